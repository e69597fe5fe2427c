"""Number formatting shared by the text renderers: SI prefixes, durations, bytes, percentages."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["bytes_", "duration", "missing", "num", "pct", "rate", "short"]

#: What a renderer prints where a value is missing: never a zero.
MISSING = "—"


def missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and pandas.NA
    except TypeError:
        return True


def num(value: Any, digits: int = 3) -> str:
    if missing(value):
        return MISSING
    value = float(value)
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return MISSING
    magnitude = abs(value)
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if magnitude >= scale:
            return f"{value / scale:.{digits}g}{suffix}"
    return f"{value:.{digits}g}"


def bytes_(value: Any) -> str:
    return MISSING if missing(value) else f"{num(value)}B"


def rate(value: Any, unit: str) -> str:
    return MISSING if missing(value) else f"{num(value)}{unit}"


def duration(ns: Any) -> str:
    if missing(ns):
        return MISSING
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def pct(value: Any, digits: int = 1) -> str:
    return MISSING if missing(value) else f"{float(value):.{digits}f}%"


def short(name: str, width: int) -> str:
    """A kernel name cut to ``width`` characters (C++ signatures run to thousands)."""
    name = " ".join(str(name).split())
    return name if len(name) <= width else name[: max(width - 1, 1)] + "…"
