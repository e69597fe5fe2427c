"""The per-range roofline table as plain-text cells and legend lines, shared by the terminal, Markdown and HTML
renderers (each escapes them its own way)."""

from __future__ import annotations

from typing import Any

from iotrace.trace.render.fmt import MISSING, bytes_, duration, missing, num, pct, rate
from iotrace.trace.reports.range_roofline import INCLUSIVE, RangeRooflines

__all__ = ["HEADERS", "TERMINAL", "cells", "legend"]

#: "kernel time" (and launches) count nested ranges' kernels, "self" only those launched directly in the range
#: (reports/range_kernels.py); the timeline's "time per NVTX range" labels its kernel time the same way.
HEADERS = ("range", "depth", "calls", "launches", "kernel time (incl.)", "self (excl.)", "share", "FLOPs", "bytes",
           "covers", "FLOP/s", "B/s", "% attainable", "occupancy")
#: The columns that fit a 100-column terminal: (short header, the width its cells need: "5.57TFLOP/s",
#: "100.0% th."). The table's title says "inclusive".
TERMINAL = {"range": ("range", 12), "depth": ("depth", 5), "launches": ("launches", 8),
            "kernel time (incl.)": ("incl.", 7), "self (excl.)": ("self", 7), "FLOP/s": ("FLOP/s", 11),
            "% attainable": ("attain.", 7), "occupancy": ("occ.", 10)}

#: Short tags for the occupancy cell; :func:`legend` spells each one out.
_OCCUPANCY_TAGS = (("achieved", "ach."), ("estimated", "est."), ("theoretical", "th."))


def _depth(row: dict[str, Any]) -> str:
    low, high = row["depth"], row["depth_max"]
    if missing(low):
        return MISSING
    return str(low) if low == high else f"{low}-{high}"


def _occupancy(row: dict[str, Any]) -> str:
    if missing(row["occupancy_pct"]):
        return MISSING
    basis = str(row["occupancy_basis"])
    tags = [tag for word, tag in _OCCUPANCY_TAGS if word in basis]
    return f"{pct(row['occupancy_pct'])} {tags[0] if len(tags) == 1 else 'mixed'}"


def cells(row: dict[str, Any]) -> list[str]:
    """One table row (:data:`HEADERS`) of a :class:`RangeRooflines` table row; "—" wherever a value is missing."""
    covers = row["flops_covers_pct"] if not missing(row["flops_covers_pct"]) else row["bytes_covers_pct"]
    return [str(row["range"]), _depth(row), MISSING if missing(row["calls"]) else str(row["calls"]),
            str(row["launches"]), duration(row["kernel_ns"]), duration(row["self_ns"]), pct(row["share_pct"]),
            num(row["flops"]), bytes_(row["bytes"]), pct(covers, 0), rate(row["achieved_flop_per_s"], "FLOP/s"),
            rate(row["achieved_bytes_per_s"], "B/s"), pct(row["pct_of_attainable"]), _occupancy(row)]


def legend(ranges: RangeRooflines) -> list[str]:
    """The lines under the table: what the rows count, where FLOPs, bytes, roof and occupancy came from (and why
    a cell is "—"), and the analysis' notes."""
    table = ranges.table
    out = [f"rows are {INCLUSIVE}; covers: the share of the range's kernel time whose FLOPs (else bytes) are known"]
    if ranges.kernel_ns is not None:
        inside = ranges.in_ranges_ns or 0.0
        out.append(f"kernel time inside ranges {duration(inside)} + (no range) {duration(ranges.kernel_ns - inside)} "
                   f"= the trace's {duration(ranges.kernel_ns)}")
    for column, what in (("flops_source", "FLOPs"), ("bytes_source", "bytes"), ("roof_basis", "% attainable"),
                         ("occupancy_basis", "occupancy")):
        values = [str(v) for v in dict.fromkeys(table[column].dropna())]
        known = [v for v in values if not v.startswith("none:")]
        if known:
            out.append(f"{what} from: {'; '.join(known)}")
        out += [f"{what} {MISSING} where {v.removeprefix('none: ')}" for v in values if v.startswith("none:")]
    out.append("occupancy tags: ach. achieved (measured), est. estimated by CUPTI, th. theoretical, mixed: several "
               "over the range's kernels (time-weighted)")
    return out + list(ranges.notes)
