"""Tuned configs a deployment ships, looked up at run time: the runner asks here before a kernel's default.

:func:`iotrace.runner.resolve_config` (every ``iotrace run`` and every caller of the runner) asks :func:`tuned_config`
before the kernel's own ``default_config``. It reads the files named in ``$IOTRACE_TUNED`` (paths separated by
``os.pathsep``) and any added with :func:`use_tuned`; the first entry that matches the kernel, backend, dtype, card and
shape bucket, and that the kernel's space still accepts, wins. No file, no match: the kernel's default. The files are
written by ``iotrace tune ... --export best.json`` (:func:`iotrace.autotune.export.export_best`); this module sits
below the runner and the autotuner so that neither imports the other to find a config.

File format (JSON)::

    {"format": "iotrace-tuned", "version": 1,
     "entries": [{"kernel", "backend", "dtype", "card", "cc", "shape_bucket", "shape", "config",
                  "basis": "measured" | "replayed" | "predicted", "time_us", "why", "fingerprint", "triton"}]}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.errors import DataFileError, InvalidValueError
from iotrace.plugins.spec import DEFAULT_BACKEND

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import Config, KernelSpec, Shape

__all__ = ["ENV_TUNED", "FORMAT", "IDENTITY", "VERSION", "load_tuned", "shape_bucket", "tuned_config", "use_tuned"]

FORMAT = "iotrace-tuned"
VERSION = 1
#: Environment variable listing tuned-config files that kernels load at run time.
ENV_TUNED = "IOTRACE_TUNED"
#: The fields that name what an entry is tuned for; a later export with the same ones replaces it.
IDENTITY = ("kernel", "backend", "dtype", "card", "shape_bucket")

_EXTRA: list[Path] = []


def shape_bucket(spec: KernelSpec, shape: Shape) -> Shape:
    """The bucket a tuned config stands for: every size rounded up to a power of two, switches kept.

    An exported best config serves every shape of its bucket at run time (M=4000 and M=3000 run M=4096's choice),
    as a deployment cannot tune every size; the tuning cache keys rows by bucket but reuses a measurement only at
    the exact shape it was taken at.
    """
    return {k: v if k in spec.shape_flags else 1 << max(0, (v - 1).bit_length()) for k, v in shape.items()}


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
        if not isinstance(entry, dict) or any(k not in entry for k in (*IDENTITY, "config")):
            raise DataFileError(f"{path}: an entry lacks one of {', '.join((*IDENTITY, 'config'))}",
                                "export it again with `iotrace tune --export`")
    return data["entries"]


def use_tuned(path: Path) -> None:
    """Load tuned configs from ``path`` in this process too (as if it were listed in ``$IOTRACE_TUNED``)."""
    load_tuned(path)  # refuse a bad file now, not at the first launch
    _EXTRA.append(Path(path))


def _files() -> list[Path]:
    listed = [Path(p) for p in os.environ.get(ENV_TUNED, "").split(os.pathsep) if p.strip()]
    return [*listed, *_EXTRA]


def tuned_config(spec: KernelSpec, shape: Shape, dtype: str, card: Card,
                 backend: str = DEFAULT_BACKEND) -> Config | None:
    """The shipped tuned config for this call, or None (then the kernel's default applies)."""
    files = _files()
    if not files:
        return None
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
