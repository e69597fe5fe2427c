"""The on-disk cache of compiled resources, keyed by (kernel source, launch, target, compiler version).

Entries live under ``$IOTRACE_CACHE_DIR/compile`` (default ``$XDG_CACHE_HOME/iotrace/compile``, that is
``~/.cache/iotrace/compile``), one JSON file per unit and target.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from dataclasses import asdict
from pathlib import Path

from iotrace.compiler.nvcc import nvcc_version
from iotrace.compiler.resources import Resources
from iotrace.plugins.spec import CudaUnit, TritonUnit

__all__ = ["CACHE_SCHEMA", "cache_dir", "cache_key", "iotrace_cache_root", "load_cached", "package_source", "store"]

#: Bumped when what a cache entry holds or how it is parsed changes.
CACHE_SCHEMA = "3"


def iotrace_cache_root() -> Path:
    """``$IOTRACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/iotrace`` (XDG Base Directory spec: ``~/.cache`` when unset)."""
    if os.environ.get("IOTRACE_CACHE_DIR"):
        return Path(os.environ["IOTRACE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iotrace"


def cache_dir() -> Path:
    return iotrace_cache_root() / "compile"


def package_source(module: str) -> bytes:
    """The source of ``module`` and of every sibling module in its package, concatenated.

    @triton.jit helpers are often shared within a package (iotrace/kernels/attention_common.py), and a change to
    one must recompile every kernel that calls it.
    """
    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin) if spec and spec.origin else None
    return b"".join(p.read_bytes() for p in sorted(origin.parent.glob("*.py"))) if origin else b""


def _compiler_version(unit: TritonUnit | CudaUnit) -> str:
    if isinstance(unit, CudaUnit):
        return "nvcc:" + nvcc_version()
    from importlib.metadata import version

    return "triton:" + version("triton") + ":" + os.environ.get("TRITON_PTXAS_PATH", "")


def cache_key(unit: TritonUnit | CudaUnit, cc_number: int, sources: dict[str, bytes] | None = None) -> str:
    """The key of ``unit`` compiled for ``sm_<cc_number>``; ``sources`` memoises :func:`package_source` per call."""
    if isinstance(unit, TritonUnit):
        sources = {} if sources is None else sources
        if unit.module not in sources:
            sources[unit.module] = package_source(unit.module)
        source = sources[unit.module]
        fields = json.dumps(asdict(unit), sort_keys=True, default=str).encode()
    else:
        source, fields = unit.source.encode(), json.dumps(asdict(unit), sort_keys=True, default=str).encode()
    digest = hashlib.sha256(source + fields + _compiler_version(unit).encode() + str(cc_number).encode()
                            + CACHE_SCHEMA.encode())
    return digest.hexdigest()[:32]


def load_cached(key: str) -> Resources | None:
    """The cached resources under ``key``, or None when absent or unreadable (then the unit compiles again)."""
    path = cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        data["grid"] = tuple(data["grid"])
        return Resources(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def store(key: str, resources: Resources) -> None:
    """Write one entry atomically (a private temporary file, then a rename); a read-only home is not an error."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        tmp = cache_dir() / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"  # two writers never share one
        tmp.write_text(json.dumps(asdict(resources)))
        tmp.replace(cache_dir() / f"{key}.json")
    except OSError:
        pass  # a read-only home only costs a recompile next time
