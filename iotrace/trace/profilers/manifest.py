"""The run manifest: a JSON file beside every capture that says exactly how it was made, so anyone can rerun it.

Schema ``iotrace.run-manifest/1`` (every key is always present; a value that could not be found is null with a note
saying why):

- ``schema``, ``status`` (``ok`` or ``failed``), ``error`` (the one-line message when failed, else null);
- ``kernel``, ``backend``, ``shape``, ``dtype``, ``config``, ``seed``, ``check``: the run, fully resolved;
- ``range``: the NVTX range the kernels were launched in (``iotrace/<kernel>``), ``nvtx_filter`` (ncu's filter);
- ``tool``: ``name``, ``product``, ``path``, ``version``, ``version_text`` (``--cupti``: the collector used);
- ``options``: the profiler options (clock control, section set, launch count, timeout);
- ``argv``: ``parent`` (this process's ``sys.argv``), ``child`` (the run under the profiler; null for ``--cupti``),
  ``profiler`` (each profiler command, in order), and ``rerun`` (one shell line that repeats this capture, seed
  included);
- ``card``: the CardBook card (``key``, ``name``, ``cc``, ``origin``); ``device``: what ``nvidia-smi`` reports
  (``name``, ``driver``, ``cc``, ``memory``) with a ``note`` when it cannot;
- ``versions``: ``python``, ``iotrace``, ``torch``, ``cuda`` (torch's CUDA runtime), ``triton``, ``platform``;
- ``git``: ``commit``, ``dirty`` of the iotrace source checkout, or a ``note`` that it is not one;
- ``started_utc``, ``finished_utc``, ``seconds``;
- ``paths``: ``manifest``, ``capture`` (the profiler's own file), ``export`` (the file iotrace loads), ``log``;
- ``kernels``: ``in_range`` (count), ``total`` (in the export), ``names`` (distinct names in the range).
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from iotrace.checkout import git_info  # the manifest records which source ran
from iotrace.kernel_call import CallFields, KernelCall

__all__ = ["SCHEMA", "Manifest", "device_info", "git_info", "utc_now", "versions"]

SCHEMA = "iotrace.run-manifest/1"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Manifest(CallFields):
    """Everything that made one capture; :meth:`write` puts it beside the capture as JSON."""

    call: KernelCall
    config: dict[str, Any]
    seed: int
    check: bool
    range: str
    tool: dict[str, Any]
    options: dict[str, Any]
    argv: dict[str, Any]
    card_given: str | None  # --card as given (None: $IOTRACE_CARD or the local GPU chose it)
    started: datetime
    paths: dict[str, str | None]
    nvtx_filter: str | None = None
    status: str = "failed"
    error: str | None = None
    finished: datetime | None = None
    kernels: dict[str, Any] = field(default_factory=lambda: {"in_range": None, "total": None, "names": []})
    device: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    git: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        finished = self.finished or utc_now()
        return {
            "schema": SCHEMA, "status": self.status, "error": self.error,
            "kernel": self.call.kernel, "backend": self.call.backend, "shape": dict(self.call.shape),
            "dtype": self.call.dtype, "config": self.config, "seed": self.seed, "check": self.check,
            "range": self.range, "nvtx_filter": self.nvtx_filter, "tool": self.tool, "options": self.options,
            "argv": self.argv,
            "card": self.card, "device": self.device, "versions": self.versions, "git": self.git,
            "started_utc": self.started.isoformat(timespec="seconds"),
            "finished_utc": finished.isoformat(timespec="seconds"),
            "seconds": round((finished - self.started).total_seconds(), 3),
            "paths": self.paths, "kernels": self.kernels,
        }

    @property
    def card(self) -> dict[str, Any]:
        card = self.call.card
        return {"key": card.key, "name": card.name, "cc": card.cc, "origin": card.origin, "given": self.card_given}


    def write(self) -> Path:
        path = Path(self.paths["manifest"] or "manifest.json")
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        return path


def versions() -> dict[str, Any]:
    """Python, iotrace, torch (and its CUDA runtime), Triton and the OS, as this process has them."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("iotrace", "torch", "triton"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            torch = None
    out["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)  # None on a CPU build of torch
    return out


def device_info(timeout_s: float = 30) -> dict[str, Any]:
    """GPU 0 as ``nvidia-smi`` reports it (name, driver, compute capability, memory), or a note on why not."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"name": None, "driver": None, "cc": None, "memory": None,
                "note": "nvidia-smi not found: no NVIDIA driver on this machine's PATH"}
    query = ["--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader"]
    try:
        done = subprocess.run([exe, *query], capture_output=True, text=True, timeout=timeout_s, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"name": None, "driver": None, "cc": None, "memory": None, "note": f"nvidia-smi failed: {exc}"}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return {"name": None, "driver": None, "cc": None, "memory": None,
                "note": f"nvidia-smi exit {done.returncode}: {' '.join(done.stderr.split())[:200]}"}
    fields = [part.strip() for part in lines[0].split(",")]
    fields += [None] * (4 - len(fields))
    return {"name": fields[0], "driver": fields[1], "cc": fields[2], "memory": fields[3], "note": None,
            "gpus": len(lines)}

