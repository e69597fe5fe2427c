"""What ``iotrace info`` reports about a trace: a JSON-able summary and its plain-text rendering."""

from __future__ import annotations

import math
from typing import Any

from iotrace.trace.tables import TraceTables

__all__ = ["render_info", "summarise"]


def _plain(value: Any) -> Any:
    """pandas scalars to JSON: <NA>/NaN to None, numpy numbers to Python numbers."""
    if value is None:
        return None
    try:
        if value != value:  # NaN and pandas.NA (whose != raises TypeError)
            return None
    except TypeError:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return int(value)
    return value


def summarise(tables: TraceTables, top: int = 10) -> dict[str, Any]:
    """Format, tool, version, schema, devices with their cards, table counts, the top kernels and notes."""
    meta = tables.meta
    keys = ("device", "name", "cc", "sm_count", "memory_bytes", "card")
    columns = [tables.column("devices", key).tolist() for key in keys]
    devices = [{key: _plain(value) for key, value in zip(keys, row, strict=True)} for row in zip(*columns, strict=True)]
    breakdown = tables.kernel_breakdown()  # no pandas: `iotrace info` on a small trace costs less than its import
    grand = sum(row.total_ns for row in breakdown)
    kernels = [{"name": row.name, "launches": row.launches, "total_ns": _plain(row.total_ns),
                "mean_ns": _plain(row.total_ns / row.launches) if row.launches else None,
                "share_pct": round(100.0 * row.total_ns / grand, 2) if grand > 0 else 0.0}
               for row in breakdown[:top]]
    return {"source": meta.get("source"), "format": meta.get("format"), "tool": meta.get("tool"),
            "version": meta.get("version"), "schema": meta.get("schema"), "devices": devices,
            "counts": tables.counts(), "top_kernels": kernels, "notes": list(meta.get("notes", []))}


def _duration(ns: float | None) -> str:
    if ns is None:
        return "—"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns:.0f} ns"


def render_info(info: dict[str, Any], width: int = 100, wide: bool = False) -> str:
    """The summary as text for a person (measured values, straight from the file).

    Kernel names are cut to fit ``width`` columns unless ``wide`` (``--wide``, a pipe, a file): templated kernels
    often differ only past the cut, so a cut list can show several identical-looking rows.
    """
    lines = [f"{info['source']}",
             f"  format   {info['format']} ({info['tool']}, version {info['version'] or 'not stated'})",
             f"  schema   {info['schema']}"]
    counts = info["counts"]
    lines.append(f"  counts   {counts['kernels']} kernels ({counts['launches']} launches), {counts['metrics']} "
                 f"metric values, {counts['ranges']} ranges, {counts['transfers']} transfers")
    if info["devices"]:
        lines.append("  devices")
        for d in info["devices"]:
            cc = f"CC {d['cc']}" if d["cc"] else "CC ?"
            sms = f"{d['sm_count']} SMs" if d["sm_count"] is not None else "SMs ?"
            card = f"card {d['card']}" if d["card"] else "no CardBook card"
            lines.append(f"    {d['device']}: {d['name'] or '(unnamed)'}, {cc}, {sms} -> {card}")
    else:
        lines.append("  devices  none named in the file")
    if info["top_kernels"]:
        lines.append("  top kernels by total time (measured)")
        for k in info["top_kernels"]:
            name = k["name"] if wide or len(k["name"]) <= width - 40 else k["name"][: width - 41] + "…"
            lines.append(f"    {k['share_pct']:6.2f}%  {_duration(k['total_ns']):>12}  x{k['launches']:<6} {name}")
    for note in info["notes"]:
        lines.append(f"  note     {note}")
    return "\n".join(lines)
