"""Finding Nsight Systems (``nsys``) and Nsight Compute (``ncu``) and asking them their version.

A CUDA toolkit installs both under ``$CUDA_HOME/bin`` (``ncu`` and ``nsys`` are launchers there), and the stand-alone
installers use ``/opt/nvidia/nsight-systems/<version>/bin/nsys`` and ``/opt/nvidia/nsight-compute/<version>/ncu``;
neither is always on PATH, so those places are searched after PATH. Nothing here runs a profiler.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from iotrace.trace.profilers.errors import ToolNotFoundError

__all__ = ["TOOLS", "Tool", "ToolSpec", "find_tool"]


@dataclass(frozen=True)
class ToolSpec:
    """What iotrace knows about one profiler: its command, product name, where installers put it, where to get it."""

    command: str
    product: str
    install_globs: tuple[str, ...]
    download: str


TOOLS: dict[str, ToolSpec] = {
    "nsys": ToolSpec("nsys", "Nsight Systems",
                     ("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-systems-*/bin/nsys"),
                     "https://developer.nvidia.com/nsight-systems"),
    "ncu": ToolSpec("ncu", "Nsight Compute",
                    ("/opt/nvidia/nsight-compute/*/ncu", "/opt/nvidia/nsight-compute-*/ncu"),
                    "https://developer.nvidia.com/nsight-compute"),
}

# "NVIDIA Nsight Systems version 2024.5.1.113-245134619542v0" and ncu's "Version 2024.3.2.0 (build 34861637)".
_VERSION = re.compile(r"(?:version\s+)?(20\d\d\.\d+(?:\.\d+)*)", re.IGNORECASE)


@dataclass(frozen=True)
class Tool:
    """A profiler found on this machine: its name, path and the version it reports (None when it would not say)."""

    name: str
    product: str
    path: str
    version: str | None
    version_text: str

    def to_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "product": self.product, "path": self.path, "version": self.version,
                "version_text": self.version_text}


def _candidates(spec: ToolSpec) -> list[str]:
    found = [shutil.which(spec.command)]
    for home in filter(None, (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        found.append(shutil.which(spec.command, path=str(Path(home) / "bin")))
    for pattern in spec.install_globs:
        found.extend(sorted(glob.glob(pattern), reverse=True))  # newest version directory first
    return [path for path in found if path and os.access(path, os.X_OK)]


def find_tool(name: str) -> Tool:
    """The profiler called ``name`` (``nsys`` or ``ncu``) with its version.

    :raises ToolNotFoundError: it is not installed where iotrace looks; the message says where to get it.
    """
    spec = TOOLS[name]
    candidates = _candidates(spec)
    if not candidates:
        raise ToolNotFoundError(
            f"{spec.command} ({spec.product}) is not installed: not on PATH, not in $CUDA_HOME/bin or "
            f"/usr/local/cuda/bin",
            f"install {spec.product} ({spec.download}, or the CUDA toolkit, which ships it) and put its bin directory "
            f"on PATH; or use --cupti, which collects kernel activity in-process without Nsight tools")
    path = candidates[0]
    version, text = _version(path)
    return Tool(name, spec.product, path, version, text)


def _version(path: str) -> tuple[str | None, str]:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"`{path} --version` failed: {exc}"
    text = (done.stdout + done.stderr).strip()
    match = _VERSION.search(text)
    return (match.group(1) if match else None), " ".join(text.split())[:300]
