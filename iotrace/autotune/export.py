"""Tuned configs a deployment ships: ``iotrace tune ... --export best.json`` writes them, kernels load them.

The hook: :func:`iotrace.runner.resolve_config` (every ``iotrace run`` and every caller of the runner) asks
:func:`tuned_config` before the kernel's own ``default_config``. It reads the files named in ``$IOTRACE_TUNED``
(paths separated by ``os.pathsep``) and any added with :func:`use_tuned`; the first entry that matches the kernel,
backend, dtype, card and shape bucket, and that the kernel's space still accepts, wins. No file, no match: the
kernel's default, as before.

File format (JSON)::

    {"format": "iotrace-tuned", "version": 1,
     "entries": [{"kernel", "backend", "dtype", "card", "cc", "shape_bucket", "shape", "config",
                  "basis": "measured" | "predicted", "time_us", "why", "fingerprint", "triton"}]}

Exporting into an existing file replaces the entry with the same (kernel, backend, dtype, card, shape bucket) and
keeps the others, so one file can hold a whole model's kernels on several cards.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.errors import DataFileError, InvalidValueError

if TYPE_CHECKING:
    from iotrace.autotune.result import TuneResult
    from iotrace.cards import Card
    from iotrace.plugins.spec import Config, KernelSpec, Shape

__all__ = ["ENV_TUNED", "FORMAT", "export_best", "load_tuned", "tuned_config", "use_tuned"]

FORMAT = "iotrace-tuned"
VERSION = 1
#: Environment variable listing tuned-config files that kernels load at run time.
ENV_TUNED = "IOTRACE_TUNED"

_EXTRA: list[Path] = []
_IDENTITY = ("kernel", "backend", "dtype", "card", "shape_bucket")


def load_tuned(path: Path) -> list[dict[str, Any]]:
    """The entries of a tuned-config file; a damaged file is refused with its path."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(f"no tuned-config file {path}", f"export one with `iotrace tune ... --export {path}`, "
                            f"or fix ${ENV_TUNED}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFileError(f"{path} is not a readable tuned-config file ({exc})",
                            "export it again with `iotrace tune --export`") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION \
            or not isinstance(data.get("entries"), list):
        raise DataFileError(f"{path} is not an {FORMAT} version {VERSION} file",
                            "export it again with `iotrace tune --export`")
    for entry in data["entries"]:
        if not isinstance(entry, dict) or any(k not in entry for k in (*_IDENTITY, "config")):
            raise DataFileError(f"{path}: an entry lacks one of {', '.join((*_IDENTITY, 'config'))}",
                                "export it again with `iotrace tune --export`")
    return data["entries"]


def export_best(result: TuneResult, path: Path) -> dict[str, Any]:
    """Add (or replace) ``result``'s best config in the file at ``path``; returns the entry written."""
    from iotrace.autotune.fingerprint import triton_version

    if result.best is None:
        raise InvalidValueError(f"nothing to export: {result.why}", "tune again with a larger budget or space")
    entry = {"kernel": result.kernel, "backend": result.backend, "dtype": result.dtype, "card": result.card.key,
             "cc": result.card.cc, "shape_bucket": result.bucket,
             "shape": result.shape, "config": result.best.config, "basis": result.basis,
             "time_us": result.best.measured_us if result.basis == "measured" else result.best.entry.predicted_us,
             "why": result.why, "fingerprint": result.fingerprint.to_dict(), "triton": triton_version()}
    entries = load_tuned(path) if Path(path).exists() else []
    entries = [e for e in entries if any(e.get(k) != entry[k] for k in _IDENTITY)] + [entry]
    try:
        tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.{threading.get_ident()}.tmp")  # one per writer
        tmp.write_text(json.dumps({"format": FORMAT, "version": VERSION, "entries": entries}, indent=1) + "\n",
                       encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a file
    except OSError as exc:
        raise DataFileError(f"cannot write {path} ({exc.strerror})", "choose a writable path") from exc
    return entry


def use_tuned(path: Path) -> None:
    """Load tuned configs from ``path`` in this process too (as if it were listed in ``$IOTRACE_TUNED``)."""
    load_tuned(path)  # refuse a bad file now, not at the first launch
    _EXTRA.append(Path(path))


def _files() -> list[Path]:
    listed = [Path(p) for p in os.environ.get(ENV_TUNED, "").split(os.pathsep) if p.strip()]
    return [*listed, *_EXTRA]


def tuned_config(spec: KernelSpec, shape: Shape, dtype: str, card: Card, backend: str = "triton") -> Config | None:
    """The shipped tuned config for this call, or None (then the kernel's default applies)."""
    files = _files()
    if not files:
        return None
    from iotrace.autotune.space import shape_bucket

    bucket = shape_bucket(spec, shape)
    for path in files:
        for entry in load_tuned(path):
            if (entry["kernel"], entry["backend"], entry["dtype"], entry["card"]) != (spec.name, backend, dtype,
                                                                                     card.key):
                continue
            if entry["shape_bucket"] != bucket:
                continue
            try:
                return spec.check_config(entry["config"], shape, dtype, card, backend)
            except InvalidValueError:
                continue  # tuned for the bucket, but not valid at this exact shape (e.g. TMA alignment)
    return None
