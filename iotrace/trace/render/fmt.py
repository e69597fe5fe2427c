"""Number formatting shared by the text renderers: SI prefixes, durations, bytes, percentages."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from iotrace.trace.info import time_unit

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
    unit, scale = time_unit(ns)
    return f"{ns / scale:.3g} {unit}" if scale > 1 else f"{ns:.0f} ns"


def pct(value: Any, digits: int = 1) -> str:
    return MISSING if missing(value) else f"{float(value):.{digits}f}%"


def short(name: str, width: int) -> str:
    """A kernel name cut to ``width`` characters (C++ signatures run to thousands)."""
    name = " ".join(str(name).split())
    return name if len(name) <= width else name[: max(width - 1, 1)] + "…"


def gain_text(finding: Any) -> str:
    """A finding's estimated gain for a person: "saves up to 1.2 ms (11% of its 10.9 ms)", "up to 11% of its time"
    (no durations in the file), or "gain not estimated"."""
    gain = finding.gain
    if gain is None:
        return "gain not estimated"
    if gain.ns is None:
        return f"saves up to {gain.fraction:.0%} of its time"
    whole = f"its {duration(gain.of_ns)}" if finding.kernel_id is not None else f"the {duration(gain.of_ns)} span"
    return f"saves up to {duration(gain.ns)} ({gain.fraction:.0%} of {whole})"


def finding_where(finding: Any, name: Callable[[str], str] | None = None) -> str:
    """The kernel a finding is about, with its share of the time: "#3 sgemm (42% of kernel time)"; "" for a file's.
    ``name`` shows the kernel's name (default: cut to 60 characters)."""
    if finding.kernel_id is None:
        return ""
    share = "" if finding.share_pct is None else f" ({finding.share_pct:.0f}% of kernel time)"
    kernel = str(finding.kernel or "")
    return f"#{finding.kernel_id} {short(kernel, 60) if name is None else name(kernel)}{share}"


def bound_text(roof: Any) -> str:
    """A roofline point's verdict and what it stands on: "memory (measured speed of light)", "compute (derived)",
    "latency (modelled)", or "—"."""
    if roof is None or roof.bound is None:
        return MISSING
    if roof.bound_basis == "speed of light":
        return f"{roof.bound} (measured speed of light)"
    return f"{roof.bound} ({'derived' if roof.basis == 'measured' else roof.basis})"


#: The headings every renderer gives the report's opening sections: (title, what it stands on).
WHERE_TITLE = ("Where the time goes",
               "measured; each instant counted once: compute, then communication not hidden under compute, then "
               "copies and sets")
STORED_TITLE = ("Nsight Compute's own analysis",
                "rule results stored in the file, ranked by est. global speedup × the kernel's time")
