"""``iotrace tune ... --export best.json``: write a tune's best config where deployments load it from.

Exporting into an existing file replaces the entry with the same (kernel, backend, dtype, card, shape bucket) and
keeps the others, so one file can hold a whole model's kernels on several cards. The format and the run-time lookup
are in :mod:`iotrace.tuned`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.errors import DataFileError, InvalidValueError
from iotrace.tuned import ENV_TUNED, FORMAT, IDENTITY, VERSION, load_tuned, tuned_config, use_tuned

if TYPE_CHECKING:
    from iotrace.autotune.result import TuneResult

__all__ = ["ENV_TUNED", "export_best", "load_tuned", "tuned_config", "use_tuned"]


def export_best(result: TuneResult, path: Path) -> dict[str, Any]:
    """Add (or replace) ``result``'s best config in the file at ``path``; returns the entry written."""
    from iotrace.autotune.fingerprint import triton_version

    if result.best is None:
        raise InvalidValueError(f"nothing to export: {result.why}", "tune again with a larger budget or space")
    entry = {"kernel": result.kernel, "backend": result.backend, "dtype": result.dtype, "card": result.card.key,
             "cc": result.card.cc, "shape_bucket": result.bucket,
             "shape": result.shape, "config": result.best.config, "basis": result.basis,
             "time_us": result.best.entry.predicted_us if result.basis == "predicted" else result.best.measured_us,
             "why": result.why, "fingerprint": result.fingerprint.to_dict(), "triton": triton_version()}
    entries = load_tuned(path) if Path(path).exists() else []
    entries = [e for e in entries if any(e.get(k) != entry[k] for k in IDENTITY)] + [entry]
    try:
        tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
        tmp.write_text(json.dumps({"format": FORMAT, "version": VERSION, "entries": entries}, indent=1) + "\n",
                       encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a file
    except OSError as exc:
        raise DataFileError(f"cannot write {path} ({exc.strerror})", "choose a writable path") from exc
    return entry
