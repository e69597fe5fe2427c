"""Profiler field maps (``iotrace/data/trace_fields.toml``): raw field names per format version, read once."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from iotrace.errors import DataFileError

__all__ = ["NCU_NOT_COUNTERS", "fields"]

#: Nsight Compute metric families recorded from the launch itself and the device even when the replay that collects
#: the counters fails: a launch that has only these was not profiled (the ncu reader and the report's launch groups).
NCU_NOT_COUNTERS = ("launch__", "device__", "numa__", "nvlink__", "c2clink__", "profiler__")

_DATA_FILE = "trace_fields.toml"


@cache
def _all() -> dict[str, Any]:
    try:
        return tomllib.loads(resources.files("iotrace.data").joinpath(_DATA_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"iotrace/data/{_DATA_FILE} cannot be read ({exc})",
                            "reinstall iotrace or restore the file from git") from exc


def fields(fmt: str) -> dict[str, Any]:
    """The field maps of one format (``"kineto"``, ``"nsys"``, ``"ncu"``)."""
    table = _all().get(fmt)
    if table is None:
        raise DataFileError(f"iotrace/data/{_DATA_FILE} has no section [{fmt}]", "restore the file from git")
    return table
