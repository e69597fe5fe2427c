"""What ``iotrace info`` reports about a trace: a JSON-able summary and its plain-text rendering."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from iotrace.trace.tables import TraceTables

__all__ = ["counts_text", "render_info", "smem_columns", "smem_text", "summarise", "time_unit"]

#: The shared-memory quantities per launch: key in JSON -> column of the kernels table (the total is static +
#: dynamic where both are known, else the file's own total, e.g. Kineto's "shared memory").
SMEM_KEYS = ("static_smem_bytes", "dynamic_smem_bytes", "smem_bytes")


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


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def counts_text(counts: dict[str, int]) -> str:
    """:meth:`TraceTables.counts` in words, the same in ``iotrace info`` and ``iotrace report``: distinct kernels
    with their launches (and how many carry a duration, where not all do), metric values, CPU-side ranges (GPU
    mirrors apart), memcpy and memset operations, devices, and the CUDA graph launches with the kernel launches
    they ran, where there are any."""
    launches = _plural(counts["launches"], "launch", "launches")
    if counts["measured_launches"] != counts["launches"]:
        launches += f", {counts['measured_launches']} with a duration"
    ranges = _plural(counts["ranges"], "range")
    if counts["gpu_ranges"]:
        ranges += f" (+{counts['gpu_ranges']} GPU mirrors)"
    graphs = ""
    if counts.get("graph_launches"):
        graphs = (f", {_plural(counts['graph_launches'], 'CUDA graph launch', 'CUDA graph launches')} "
                  f"(running {counts['graph_kernels']} of the launches)")
    return (f"{_plural(counts['kernels'], 'kernel')} ({launches}), {_plural(counts['metrics'], 'metric value')}, "
            f"{ranges}, {counts['memcpy']} memcpy, {counts['memset']} memset, {_plural(counts['devices'], 'device')}"
            + graphs)


def smem_columns(tables: TraceTables) -> dict[str, np.ndarray]:
    """Static, dynamic and total shared memory per block of every kernel row (NaN where the file lacks it), without
    pandas; the total is static + dynamic where both are known, else the file's own total."""
    static = tables.column("kernels", "static_smem_bytes").astype(np.float64)
    dynamic = tables.column("kernels", "dynamic_smem_bytes").astype(np.float64)
    total = np.where(np.isnan(static) | np.isnan(dynamic), tables.column("kernels", "smem_bytes"), static + dynamic)
    return {"static_smem_bytes": static, "dynamic_smem_bytes": dynamic, "smem_bytes": total}


def _smem_by_name(tables: TraceTables) -> dict[Any, dict[str, dict[str, int] | None]]:
    """Per kernel name: {"min", "max"} of each shared-memory quantity over its launches that record it (None where
    none does); min < max says the launches differ."""
    columns = smem_columns(tables)
    rows: dict[Any, list[int]] = {}
    for i, name in enumerate(tables.column("kernels", "name").tolist()):
        rows.setdefault(name, []).append(i)
    out: dict[Any, dict[str, dict[str, int] | None]] = {}
    for name, index in rows.items():
        entry: dict[str, dict[str, int] | None] = {}
        for key in SMEM_KEYS:
            values = columns[key][index]
            values = values[~np.isnan(values)]
            entry[key] = {"min": int(values.min()), "max": int(values.max())} if len(values) else None
        out[name] = entry
    return out


def smem_text(low: int | None, high: int | None = None) -> str:
    """Bytes of shared memory per block for a person: "148,992 B", "0 to 76,896 B" (launches differ), "?"."""
    if low is None:
        return "?"
    return f"{low:,} B" if high is None or high == low else f"{low:,} to {high:,} B"


def summarise(tables: TraceTables, top: int = 10) -> dict[str, Any]:
    """Format, tool, version, schema, devices with their cards, table counts, the top kernels and notes.

    Each top kernel carries its shared memory per block over its launches: ``static_smem_bytes``,
    ``dynamic_smem_bytes`` and ``smem_bytes`` (the total), each ``{"min": ..., "max": ...}`` (equal when every
    launch agrees) or None where the file does not record it."""
    meta = tables.meta
    keys = ("device", "name", "cc", "sm_count", "memory_bytes", "card")
    columns = [tables.column("devices", key).tolist() for key in keys]
    devices = [{key: _plain(value) for key, value in zip(keys, row, strict=True)} for row in zip(*columns, strict=True)]
    # An AMD device is named by its gfx target and counts CUs (the devices table's vendor and arch); NVIDIA's stay as
    # they were.
    vendors, arches = tables.column("devices", "vendor").tolist(), tables.column("devices", "arch").tolist()
    for device, vendor, arch in zip(devices, vendors, arches, strict=True):
        if vendor == "amd":
            device.update(vendor="amd", arch=_plain(arch))
    breakdown = tables.kernel_breakdown()  # no pandas: `iotrace info` on a small trace costs less than its import
    grand = sum(row.total_ns for row in breakdown)
    smem = _smem_by_name(tables) if breakdown else {}
    kernels = [{"name": row.name, "launches": row.launches, "total_ns": _plain(row.total_ns),
                "mean_ns": _plain(row.total_ns / row.launches) if row.launches else None,
                "share_pct": round(100.0 * row.total_ns / grand, 2) if grand > 0 else 0.0, **smem[row.name]}
               for row in breakdown[:top]]
    return {"source": meta.get("source"), "format": meta.get("format"), "tool": meta.get("tool"),
            "version": meta.get("version"), "schema": meta.get("schema"), "devices": devices,
            "counts": tables.counts(), "top_kernels": kernels, "top_kernels_of": len(breakdown),
            "notes": list(meta.get("notes", []))}


def time_unit(ns: float) -> tuple[str, float]:
    """The unit a time of ``ns`` nanoseconds reads in, and its size in ns: the largest of s, ms and µs it reaches,
    else ns (one choice for every duration a report prints)."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return unit, scale
    return "ns", 1.0


def _duration(ns: float | None) -> str:
    if ns is None:
        return "—"
    unit, scale = time_unit(ns)
    return f"{ns / scale:.3f} {unit}" if scale > 1 else f"{ns:.0f} ns"


def render_info(info: dict[str, Any], width: int = 100, wide: bool = False) -> str:
    """The summary as text for a person (measured values, straight from the file).

    Kernel names are cut to fit ``width`` columns unless ``wide`` (``--wide``, a pipe, a file): templated kernels
    often differ only past the cut, so a cut list can show several identical-looking rows.
    """
    lines = [f"{info['source']}",
             f"  format   {info['format']} ({info['tool']}, version {info['version'] or 'not stated'})",
             f"  schema   {info['schema']}"]
    lines.append(f"  counts   {counts_text(info['counts'])}")  # the report's counts line, word for word
    if info["devices"]:
        lines.append("  devices")
        for d in info["devices"]:
            amd = d.get("vendor") == "amd"  # gfx target and CUs (rocminfo's words) instead of CC and SMs
            cc = (d.get("arch") or "gfx ?") if amd else f"CC {d['cc']}" if d["cc"] else "CC ?"
            unit = "CUs" if amd else "SMs"
            sms = f"{d['sm_count']} {unit}" if d["sm_count"] is not None else f"{unit} ?"
            card = f"card {d['card']}" if d["card"] else "no CardBook card"
            lines.append(f"    {d['device']}: {d['name'] or '(unnamed)'}, {cc}, {sms} -> {card}")
    else:
        lines.append("  devices  none named in the file")
    if info["top_kernels"]:
        of = info.get("top_kernels_of", len(info["top_kernels"]))
        shown = f"top {len(info['top_kernels'])} of {of} kernels, --top {of} lists all" \
            if of > len(info["top_kernels"]) else f"all {of} kernel{'s' * (of != 1)}"
        amd = any(d.get("vendor") == "amd" for d in info["devices"])
        tag = "lds" if amd else "smem"
        lines.append(f"  top kernels by total time (measured; {shown}; "
                     + ("lds: LDS per workgroup)" if amd else "smem: shared memory per block)"))
        for k in info["top_kernels"]:
            total = k.get("smem_bytes")
            smem = f"  {tag} {smem_text(total['min'], total['max'])}" if total else ""
            room = width - 40 - len(smem)
            name = k["name"] if wide or len(k["name"]) <= room else k["name"][: room - 1] + "…"
            lines.append(f"    {k['share_pct']:6.2f}%  {_duration(k['total_ns']):>12}  x{k['launches']:<6} {name}"
                         + smem)
    for note in info["notes"]:
        lines.append(f"  note     {note}")
    return "\n".join(lines)
