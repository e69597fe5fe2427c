"""The one table model every trace format loads into: :class:`TraceTables`.

Four long pandas tables and a dict: ``kernels`` (one row per launch, or per kernel name for summary exports,
with ``launches`` saying how many), ``metrics`` (kernel id, metric, unit, value), ``ranges`` (NVTX and
annotation ranges), ``devices`` (what the file says about each GPU, with the matched CardBook card), ``transfers``
(memory copies and sets) and ``meta`` (source, format, tool, version, schema, notes). Columns a format does not
carry are present and missing (``<NA>`` / NaN), never absent, so a report can rely on the names below.

:func:`build` is the only way parsers make tables: it orders and types the columns and refuses values no real
profiler writes (infinities, NaN where a number was given, negative durations, numbers beyond 64-bit), so a
damaged file fails whole instead of loading half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iotrace.trace.errors import TraceFormatError

__all__ = ["DEVICE_COLUMNS", "KERNEL_COLUMNS", "KernelTotal", "METRIC_COLUMNS", "RANGE_COLUMNS", "TRANSFER_COLUMNS", "TraceTables",
           "build"]

# Column -> dtype. "Int64" is pandas' nullable integer: a missing value stays missing instead of becoming a float.
KERNEL_COLUMNS: dict[str, str] = {
    "id": "int64", "name": "object", "mangled_name": "object", "device": "Int64", "context": "Int64",
    "stream": "Int64", "correlation_id": "Int64", "start_ns": "Int64", "end_ns": "Int64", "duration_ns": "float64",
    "launches": "int64",
    "grid_x": "Int64", "grid_y": "Int64", "grid_z": "Int64", "block_x": "Int64", "block_y": "Int64", "block_z": "Int64",
    "registers_per_thread": "Int64", "static_smem_bytes": "Int64", "dynamic_smem_bytes": "Int64",
    "smem_bytes": "Int64", "local_mem_bytes_per_thread": "Int64",
    "blocks_per_sm": "float64", "warps_per_sm": "float64", "theoretical_occupancy_pct": "float64",
    "est_achieved_occupancy_pct": "float64", "achieved_occupancy_pct": "float64",
    "nvtx_range_id": "Int64", "nvtx_path": "object", "launch_ns": "Int64",
}
METRIC_COLUMNS: dict[str, str] = {"kernel_id": "int64", "metric": "object", "unit": "object", "value": "float64"}
RANGE_COLUMNS: dict[str, str] = {
    "id": "int64", "name": "object", "domain": "object", "kind": "object", "start_ns": "Int64", "end_ns": "Int64",
    "duration_ns": "float64", "process": "Int64", "thread": "Int64", "depth": "Int64", "parent_id": "Int64",
}
DEVICE_COLUMNS: dict[str, str] = {
    "device": "Int64", "name": "object", "vendor": "object", "cc": "object", "sm_count": "Int64",
    "memory_bytes": "Int64", "memory_bandwidth_bytes_per_s": "float64", "clock_mhz": "float64",
    "l2_bytes": "Int64", "warp_size": "Int64", "max_threads_per_block": "Int64", "max_warps_per_sm": "Int64",
    "max_blocks_per_sm": "Int64", "max_regs_per_sm": "Int64", "max_smem_per_sm": "Int64",
    "max_smem_per_block_optin": "Int64", "card": "object",
}
TRANSFER_COLUMNS: dict[str, str] = {
    "kind": "object", "device": "Int64", "stream": "Int64", "start_ns": "Int64", "end_ns": "Int64",
    "duration_ns": "float64", "bytes": "Int64", "launches": "int64",
}

# Bounds on what a real export holds; beyond them the field is damaged (fuzzed, or a unit slipped).
_INT_LIMIT = 2**62           # timestamps in ns reach ~1.8e18 (2027); integer columns never get near 2^62
_DURATION_LIMIT = 1e16       # ns, about 115 days: no single kernel, range or summary total runs longer
_VALUE_LIMIT = 1e30          # metric values: counters and rates stay far below this


@dataclass(frozen=True)
class KernelTotal:
    """One kernel name's share of a trace: how many launches carried a duration and their summed time."""

    name: str | None
    launches: int
    total_ns: float


@dataclass
class TraceTables:
    """Everything a profiler export holds, as tables. See the module docstring for the columns."""

    kernels: pd.DataFrame
    metrics: pd.DataFrame
    ranges: pd.DataFrame
    devices: pd.DataFrame
    transfers: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def top_kernels(self, n: int = 10) -> pd.DataFrame:
        """Kernels grouped by name, ordered by total time: name, launches, total/mean duration, share of all time."""
        timed = self.kernels.dropna(subset=["duration_ns"])
        if timed.empty:
            return pd.DataFrame(columns=["name", "launches", "total_ns", "mean_ns", "share_pct"])
        grouped = timed.groupby("name", sort=False).agg(launches=("launches", "sum"), total_ns=("duration_ns", "sum"))
        grouped["mean_ns"] = grouped["total_ns"] / grouped["launches"]
        grand = grouped["total_ns"].sum()
        grouped["share_pct"] = 100.0 * grouped["total_ns"] / grand if grand > 0 else 0.0
        return grouped.sort_values("total_ns", ascending=False).head(n).reset_index()

    def kernel_breakdown(self) -> list[KernelTotal]:
        """Kernel time by name, largest first, without pandas: kernels with no duration are left out (as in
        :meth:`top_kernels`); ties keep the order of first appearance."""
        totals: dict[Any, list[float]] = {}
        frame = self.kernels
        for name, launches, duration in zip(frame["name"].tolist(), frame["launches"].tolist(),
                                            frame["duration_ns"].tolist(), strict=True):
            if duration == duration:  # NaN: no duration
                entry = totals.setdefault(name, [0, 0.0])
                entry[0] += launches
                entry[1] += duration
        rows = [KernelTotal(name, int(n), float(t)) for name, (n, t) in totals.items()]
        return sorted(rows, key=lambda row: -row.total_ns)

    def counts(self) -> dict[str, int]:
        """Rows per table, and launches (a summary export has fewer rows than launches)."""
        return {"kernels": len(self.kernels), "launches": int(self.kernels["launches"].sum()),
                "metrics": len(self.metrics), "ranges": len(self.ranges), "devices": len(self.devices),
                "transfers": len(self.transfers)}


def build(path: Path, *, kernels: Any = None, metrics: Any = None, ranges: Any = None, devices: Any = None,
          transfers: Any = None, meta: dict[str, Any]) -> TraceTables:
    """Conform each table to its columns and types and check every number; raise rather than return bad data.

    Each table argument is a DataFrame, a list of row dicts, or a dict of columns; ``None`` is an empty table.
    """
    tables = {}
    for name, given, columns in (("kernels", kernels, KERNEL_COLUMNS), ("metrics", metrics, METRIC_COLUMNS),
                                 ("ranges", ranges, RANGE_COLUMNS), ("devices", devices, DEVICE_COLUMNS),
                                 ("transfers", transfers, TRANSFER_COLUMNS)):
        tables[name] = _conform(path, name, given, columns)
    if tables["kernels"]["id"].duplicated().any():
        raise TraceFormatError(path, "holds two kernels with the same id", "the file is damaged")
    known = set(tables["kernels"]["id"])
    stray = ~tables["metrics"]["kernel_id"].isin(known)
    if stray.any():
        raise TraceFormatError(path, f"has {int(stray.sum())} metric values for kernels it does not hold",
                               "the file is damaged")
    meta = {"source": str(path), **meta}
    meta.setdefault("notes", [])
    return TraceTables(meta=meta, **tables)


def _conform(path: Path, table: str, given: Any, columns: dict[str, str]) -> pd.DataFrame:
    frame = pd.DataFrame(given if given is not None else {})
    n = len(frame)
    out: dict[str, pd.Series] = {}
    for column, dtype in columns.items():
        if column not in frame:
            if dtype == "object":
                out[column] = pd.Series([None] * n, dtype="object")
                continue
            # An absent number is missing everywhere (launches: one each); the checks below still apply to it.
            absent = np.ones(n, dtype=np.int64) if column == "launches" else np.full(n, np.nan)
            out[column] = _checked(path, table, column, absent, dtype)
            continue
        series = frame[column].reset_index(drop=True)
        out[column] = _typed(path, table, column, series, dtype)
    return pd.DataFrame(out, index=pd.RangeIndex(n))


def _typed(path: Path, table: str, column: str, series: pd.Series, dtype: str) -> pd.Series:
    if dtype == "object":
        return series.astype("object").where(series.notna(), None)
    if series.dtype == np.int64 or series.dtype == np.float64:
        return _checked(path, table, column, series.to_numpy(), dtype)  # plain numbers: one numpy pass
    try:
        # numpy_nullable keeps whole numbers as Int64: a float64 detour would round ns timestamps past 2^53.
        values = pd.to_numeric(series, errors="raise", dtype_backend="numpy_nullable")
    except (ValueError, TypeError) as exc:
        raise TraceFormatError(path, f"{table}.{column} holds a value that is not a number ({exc})",
                               "the file is damaged or not this format") from exc
    floats = values.astype("float64").to_numpy(dtype=np.float64, na_value=np.nan)
    _validate(path, table, column, floats, dtype, whole=False)
    if dtype in ("int64", "Int64"):
        if pd.api.types.is_integer_dtype(values.dtype):
            return values.astype(dtype)  # the exact integers, not their float64 copies
        return pd.Series(np.round(floats)).astype(dtype)
    return pd.Series(floats, dtype="float64")


def _checked(path: Path, table: str, column: str, values: np.ndarray, dtype: str) -> pd.Series:
    """:func:`_typed` for a plain int64 or float64 array."""
    whole = values.dtype == np.int64
    floats = values.astype(np.float64) if whole else values
    _validate(path, table, column, floats, dtype, whole)
    if dtype in ("int64", "Int64"):
        if whole:
            return pd.Series(values.copy(), dtype=dtype)
        return pd.Series(np.round(floats)).astype(dtype)
    return pd.Series(floats.copy() if floats is values else floats, dtype="float64")


def _validate(path: Path, table: str, column: str, floats: np.ndarray, dtype: str, whole: bool) -> None:
    """Every check a numeric column passes, on its values as float64 (NaN where missing); ``whole`` says the
    source was int64, so nothing is missing or fractional."""
    if np.isinf(floats).any():
        raise TraceFormatError(path, f"{table}.{column} holds an infinite number", "the file is damaged")
    missing = None if whole else np.isnan(floats)
    any_missing = missing is not None and bool(missing.any())
    present = floats[~missing] if any_missing else floats
    limit = _DURATION_LIMIT if column == "duration_ns" else _VALUE_LIMIT if dtype == "float64" else _INT_LIMIT
    if len(present) and (np.abs(present).max() >= limit):
        raise TraceFormatError(path, f"{table}.{column} holds {np.abs(present).max():.3g}, beyond any real value "
                                     f"(limit {limit:.3g})", "the file is damaged")
    if column.endswith(("_ns", "bytes", "launches")) and len(present) and present.min() < 0 \
            and column not in ("start_ns", "end_ns"):
        raise TraceFormatError(path, f"{table}.{column} holds a negative value ({present.min():g})",
                               "the file is damaged")
    if table == "metrics" and column == "value" and any_missing:
        raise TraceFormatError(path, "a metric value is NaN or missing", "the file is damaged")
    if dtype in ("int64", "Int64") and not whole:
        if dtype == "int64" and any_missing:
            raise TraceFormatError(path, f"{table}.{column} is missing a value it needs", "the file is damaged")
        fractional = present != np.floor(present)
        if fractional.any():
            raise TraceFormatError(path, f"{table}.{column} holds a fraction where a whole number belongs "
                                         f"({present[fractional][0]!r})", "the file is damaged")
