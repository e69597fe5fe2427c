"""The one table model every trace format loads into: :class:`TraceTables`.

Ten long tables and a dict: ``kernels`` (one row per launch, or per kernel name for summary exports,
with ``launches`` saying how many), ``metrics`` (kernel id, metric, unit, value), ``ranges`` (NVTX and
annotation ranges), ``devices`` (what the file says about each GPU, with the matched CardBook card), ``transfers``
(memory copies and sets), ``ops`` (CPU ops with input shapes, Kineto only; a kernel's ``op_id`` is the op open when
it was launched), ``source_samples`` (PC-sampling stall samples per SASS address and reason, with the address's
source line where the file maps it; Nsight Compute reports only), ``rules`` (Nsight Compute's own rule results, its
"guided analysis", per launch; Nsight Compute reports only), ``api_calls`` (the host's CUDA runtime and driver
API calls, named and sorted into kinds; timelines only: Nsight Systems, Kineto), ``host_ops`` (every CPU op with its
thread, Kineto only) and ``meta`` (source, format, tool,
version, schema, notes). Columns a format does not carry are present and missing (``<NA>`` / NaN), never absent, so
a report can rely on the names below.

:func:`build` is the only way parsers make tables: it orders and types the columns and refuses values no real
profiler writes (infinities, NaN where a number was given, negative durations, numbers beyond 64-bit), so a
damaged file fails whole instead of loading half.

The tables are held as typed numpy columns and become pandas DataFrames on first access (``tables.kernels``):
a reader that hands :func:`build` plain columns, and a caller that needs only :meth:`TraceTables.counts` or
:meth:`TraceTables.kernel_breakdown`, never import pandas, whose import alone costs more than reading a small
trace. Once a DataFrame has been handed out it is the table (a caller may add or change its columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from iotrace.trace.errors import TraceFormatError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["API_CALL_COLUMNS", "API_CALL_KINDS", "DEVICE_COLUMNS", "GPU_RANGE_DOMAINS", "HOST_OP_COLUMNS",
           "KERNEL_COLUMNS",
           "METRIC_COLUMNS", "RANGE_COLUMNS", "RULE_COLUMNS", "SOURCE_SAMPLE_COLUMNS", "TABLES", "TRANSFER_COLUMNS",
           "Column", "KernelTotal", "TraceTables", "build", "graph_launch_count"]

# Column -> dtype. "Int64" is pandas' nullable integer (int64 values and a missing mask here): a missing value stays
# missing instead of becoming a float.
KERNEL_COLUMNS: dict[str, str] = {
    "id": "int64", "name": "object", "mangled_name": "object", "device": "Int64", "context": "Int64",
    "stream": "Int64", "correlation_id": "Int64", "start_ns": "Int64", "end_ns": "Int64", "duration_ns": "float64",
    "launches": "int64",
    "grid_x": "Int64", "grid_y": "Int64", "grid_z": "Int64", "block_x": "Int64", "block_y": "Int64", "block_z": "Int64",
    "registers_per_thread": "Int64", "static_smem_bytes": "Int64", "dynamic_smem_bytes": "Int64",
    "smem_bytes": "Int64", "local_mem_bytes_per_thread": "Int64",
    "blocks_per_sm": "float64", "warps_per_sm": "float64", "theoretical_occupancy_pct": "float64",
    "est_achieved_occupancy_pct": "float64", "achieved_occupancy_pct": "float64",
    "nvtx_range_id": "Int64", "nvtx_path": "object", "launch_ns": "Int64", "op_id": "Int64",
    # The launching API call's end, and for a kernel a CUDA graph ran: that graph launch call's correlation id (the
    # kernel's own, as CUPTI gives a graph's kernels), the graph's id and the node's id where the file records them.
    "launch_end_ns": "Int64", "graph_launch_id": "Int64", "graph_id": "Int64", "graph_node_id": "Int64",
    # AMD dispatches (rocprof, rocpd): per-work-item architectural and accumulation (MFMA) VGPRs, SGPRs per wave and
    # the wavefront size (32 or 64): AMD's occupancy limits, which registers_per_thread cannot hold. Names: rocprof v1
    # results.csv columns arch_vgpr/accum_vgpr/sgpr/wave_size (ROCm/rocprofiler doc/rocprof.md, "Output").
    "arch_vgpr": "Int64", "accum_vgpr": "Int64", "sgpr": "Int64", "wave_size": "Int64",
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
    # The ISA target an AMD agent reports (rocminfo, rocpd_info_agent.name: "gfx942"); None for NVIDIA (cc says it).
    "arch": "object",
}
#: CPU ops with their input shapes (Kineto traces recorded with record_shapes; see trace_fields.toml's shaped_ops):
#: the lists are as the file writes them, e.g. input_dims [[1024, 1705], [1705, 512]], input_types ["float", ...].
OP_COLUMNS: dict[str, str] = {
    "id": "int64", "name": "object", "start_ns": "Int64", "end_ns": "Int64", "duration_ns": "float64",
    "process": "Int64", "thread": "Int64", "input_dims": "object", "input_types": "object",
}
#: Every CPU op of a Kineto trace (``cpu_op`` events), shaped or not, with its thread: the host's own time, which the
#: step waterfall (:mod:`iotrace.trace.reports.waterfall`) splits into matrix products, attention, other ops and the
#: Python between them. Arguments are not read (``ops`` holds the shaped ones with their inputs).
HOST_OP_COLUMNS: dict[str, str] = {
    "id": "int64", "name": "object", "start_ns": "Int64", "end_ns": "Int64", "duration_ns": "float64",
    "process": "Int64", "thread": "Int64",
}
#: Warp-state samples per SASS address (ncu's SourceCounters section): one row per launch, address and stall reason
#: with samples > 0. ``reason`` is as the file spells it after ``smsp__pcsamp_warps_issue_stalled_`` (e.g.
#: ``no_instructions``); ``sass`` the address's instruction; ``file``/``line`` its source line where the report maps
#: it (compiled with line info) and ``text`` that line where ncu imported the file (``--import-source yes``).
SOURCE_SAMPLE_COLUMNS: dict[str, str] = {
    "kernel_id": "int64", "address": "int64", "reason": "object", "samples": "int64", "sass": "object",
    "file": "object", "line": "Int64", "text": "object",
}
#: Nsight Compute's rule results as the report stores them (``ncu_report``'s ``IAction.rule_results_as_dicts``), one
#: row per result per launch. ``message_type`` is the stored NvRules ``MsgType`` number and ``severity`` its word (none,
#: ok, optimization, warning, error); ``message`` is raw, with ncu's ``@section:ID:Words@`` link markup;
#: ``focus_metrics`` the stored list as JSON (name, value, severity, info); ``speedup`` the estimated speedup in percent
#: (NaN where the rule gives none: ncu before 2023.x, and rules without an estimate) and ``speedup_type`` "local" (the
#: hardware's efficiency for this problem alone) or "global" (the whole workload's runtime). Meanings: NvRules API,
#: https://docs.nvidia.com/nsight-compute/NvRulesAPI/index.html (IFrontend.SpeedupType_*, MsgType).
RULE_COLUMNS: dict[str, str] = {
    "kernel_id": "int64", "rule_id": "object", "rule_name": "object", "section": "object", "message_type": "Int64",
    "severity": "object", "title": "object", "message": "object", "focus_metrics": "object", "speedup": "float64",
    "speedup_type": "object",
}
#: Memory copies and sets. ``kind`` names the operation for a person ("memcpy HtoD", "memcpy DtoH (unified memory)",
#: "memset"; Kineto: its event name, "Memcpy HtoD (Pageable -> Device)"). ``copy_kind`` is the direction: "HtoD",
#: "DtoH", "DtoD", "HtoH" or "PtoP" (an array copy counts as the device copy it is; None for a set or where the file
#: does not say); ``src_kind``/``dst_kind`` the memory on each side: "pageable", "pinned", "device", "managed",
#: "array" or None where unknown (a set's memory is its ``dst_kind``). ``correlation_id`` is that of the API call that
#: issued it (``api_calls.correlation_id``; a unified-memory migration has none). Names and enum sources:
#: :mod:`iotrace.trace.formats.api_calls`.
TRANSFER_COLUMNS: dict[str, str] = {
    "kind": "object", "device": "Int64", "stream": "Int64", "start_ns": "Int64", "end_ns": "Int64",
    "duration_ns": "float64", "bytes": "Int64", "launches": "int64", "copy_kind": "object", "src_kind": "object",
    "dst_kind": "object", "correlation_id": "Int64",
}
#: The values of ``api_calls.kind`` (None: a parser that does not sort its calls).
API_CALL_KINDS: tuple[str, ...] = ("launch", "memcpy", "memset", "sync", "graph", "other")
#: The host's CUDA runtime and driver API calls (nsys ``CUPTI_ACTIVITY_KIND_RUNTIME``; Kineto ``cuda_runtime`` and
#: ``cuda_driver`` events), one row per call in start order. ``name`` is the call's name without CUPTI's version
#: suffix ("cudaMemcpyAsync", not "cudaMemcpyAsync_v3020"); ``kind`` one of "launch", "memcpy", "memset", "sync",
#: "graph", "other" (:data:`iotrace.trace.formats.api_calls.API_CALL_NAMES` lists which names are which);
#: ``process``/``thread`` as the ranges table has them (nsys: the process id and the ``globalTid``; Kineto: pid and
#: tid), so a call joins the ranges open on its thread; ``correlation_id`` ties it to the kernels, copies and sets
#: it issued.
API_CALL_COLUMNS: dict[str, str] = {
    "id": "int64", "name": "object", "kind": "object", "start_ns": "Int64", "end_ns": "Int64",
    "duration_ns": "float64", "process": "Int64", "thread": "Int64", "correlation_id": "Int64",
}

# Bounds on what a real export holds; beyond them the field is damaged (fuzzed, or a unit slipped).
_INT_LIMIT = 2**62           # timestamps in ns reach ~1.8e18 (2027); integer columns never get near 2^62
_DURATION_LIMIT = 1e16       # ns, about 115 days: no single kernel, range or summary total runs longer
_VALUE_LIMIT = 1e30          # metric values: counters and rates stay far below this


#: ``ranges.domain`` values that mirror a CPU-side range on the GPU timeline (Kineto copies each ``user_annotation``
#: onto the GPU stream it covered as ``gpu_user_annotation``): :meth:`TraceTables.counts` counts them apart.
GPU_RANGE_DOMAINS: frozenset[str] = frozenset({"gpu_user_annotation"})

TABLES: dict[str, dict[str, str]] = {"kernels": KERNEL_COLUMNS, "metrics": METRIC_COLUMNS, "ranges": RANGE_COLUMNS,
                                     "devices": DEVICE_COLUMNS, "transfers": TRANSFER_COLUMNS, "ops": OP_COLUMNS,
                                     "source_samples": SOURCE_SAMPLE_COLUMNS, "rules": RULE_COLUMNS,
                                     "api_calls": API_CALL_COLUMNS, "host_ops": HOST_OP_COLUMNS}


@dataclass(frozen=True)
class Column:
    """One typed column: ``values`` (int64, float64 with NaN where missing, or object with None) and, for a
    nullable integer ("Int64") column, ``missing`` (True where the value is missing; its slot in values is 0)."""

    values: np.ndarray
    missing: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class KernelTotal:
    """One kernel name's share of a trace: how many launches carried a duration and their summed time."""

    name: str | None
    launches: int
    total_ns: float


class TraceTables:
    """Everything a profiler export holds, as tables. See the module docstring for the columns."""

    def __init__(self, columns: dict[str, dict[str, Column]], meta: dict[str, Any]) -> None:
        self._columns = columns
        self._frames: dict[str, pd.DataFrame] = {}
        self.meta = meta

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={self.rows(name)}" for name in TABLES)
        return f"TraceTables({self.meta.get('source')!r}, {sizes})"

    def table(self, name: str) -> pd.DataFrame:
        """The table ``name`` as a DataFrame (built on first access, the same object afterwards)."""
        if name not in self._frames:
            self._frames[name] = _frame(self._columns[name], TABLES[name])
        return self._frames[name]

    @property
    def kernels(self) -> pd.DataFrame:
        return self.table("kernels")

    @property
    def metrics(self) -> pd.DataFrame:
        return self.table("metrics")

    @property
    def ranges(self) -> pd.DataFrame:
        return self.table("ranges")

    @property
    def devices(self) -> pd.DataFrame:
        return self.table("devices")

    @property
    def transfers(self) -> pd.DataFrame:
        return self.table("transfers")

    @property
    def ops(self) -> pd.DataFrame:
        return self.table("ops")

    @property
    def source_samples(self) -> pd.DataFrame:
        return self.table("source_samples")

    @property
    def rules(self) -> pd.DataFrame:
        return self.table("rules")

    @property
    def api_calls(self) -> pd.DataFrame:
        return self.table("api_calls")

    @property
    def host_ops(self) -> pd.DataFrame:
        return self.table("host_ops")

    def copy(self) -> TraceTables:
        """Tables of their own, as parsed: the columns copied (numpy copies; the values are numbers, strings and
        None), ``meta`` deep-copied, the frames built again on first access (a change made through this object's
        frames is not carried over). One loaded file kept for many readers is handed to each as a copy, so one
        reader's change to a table is not another's input."""
        import copy

        columns = {table: {name: Column(col.values.copy(), None if col.missing is None else col.missing.copy())
                           for name, col in cols.items()} for table, cols in self._columns.items()}
        return TraceTables(columns, copy.deepcopy(self.meta))

    def rows(self, name: str) -> int:
        """How many rows table ``name`` has."""
        if name in self._frames:
            return len(self._frames[name])
        return len(next(iter(self._columns[name].values())).values)

    def column(self, table: str, name: str) -> np.ndarray:
        """One column as a numpy array without pandas: int64, float64 (NaN where missing; nullable integers too,
        exact below 2^53) or object (None where missing)."""
        if table in self._frames:
            series = self._frames[table][name]
            if TABLES[table].get(name) == "object" or series.dtype == object:
                return series.astype("object").where(series.notna(), None).to_numpy()
            return series.astype("float64").to_numpy(na_value=np.nan) if series.hasnans else series.to_numpy()
        col = self._columns[table][name]
        if col.missing is None:
            return col.values
        return np.where(col.missing, np.nan, col.values.astype(np.float64))

    def top_kernels(self, n: int = 10) -> pd.DataFrame:
        """Kernels grouped by name, ordered by total time: name, launches, total/mean duration, share of all time."""
        import pandas as pd

        rows = self.kernel_breakdown()
        grand = sum(row.total_ns for row in rows)
        return pd.DataFrame([{"name": row.name, "launches": row.launches, "total_ns": row.total_ns,
                              "mean_ns": row.total_ns / row.launches if row.launches else float("nan"),
                              "share_pct": 100.0 * row.total_ns / grand if grand > 0 else 0.0} for row in rows[:n]],
                            columns=["name", "launches", "total_ns", "mean_ns", "share_pct"])

    def kernel_breakdown(self) -> list[KernelTotal]:
        """Kernel time by name, largest first, without pandas: kernels with no duration are left out (as in
        :meth:`top_kernels`); ties keep the order of first appearance."""
        duration = self.column("kernels", "duration_ns")
        timed = ~np.isnan(duration)
        names = self.column("kernels", "name")[timed].tolist()
        codes: dict[Any, int] = {}
        index = np.fromiter((codes.setdefault(name, len(codes)) for name in names), dtype=np.int64, count=len(names))
        totals = np.bincount(index, weights=duration[timed], minlength=len(codes))
        launches = np.bincount(index, weights=self.column("kernels", "launches")[timed], minlength=len(codes))
        rows = [KernelTotal(name, int(launches[i]), float(totals[i])) for name, i in codes.items()]
        return sorted(rows, key=lambda row: -row.total_ns)

    def counts(self) -> dict[str, int]:
        """What the trace holds, counted the same way by every command (``iotrace info``, ``iotrace report``).

        ``kernels``: distinct kernel names; ``kernel_rows``: rows of the kernels table (one per launch, or one per
        name in a summary export); ``launches``: launches (the sum of ``launches``); ``measured_launches``: the
        launches that carry a duration (what :meth:`top_kernels` and :meth:`kernel_breakdown` add up; a range
        profiler's kernels have none); ``metrics``: metric values; ``ranges``: CPU-side NVTX/annotation ranges;
        ``gpu_ranges``: their GPU-timeline mirrors (Kineto's ``gpu_user_annotation``, see
        :data:`GPU_RANGE_DOMAINS`), counted apart so a range is not counted twice; ``memcpy`` and ``memset``: memory
        copies and sets (operations: a summary row counts its calls); ``transfers``: every row of the transfers
        table as operations (memcpy + memset, and any other kind); ``devices``: devices the file describes;
        ``graph_launches``: CUDA graph launch calls that ran a traced kernel, and ``graph_kernels``: the kernel
        launches they ran (see :func:`graph_launch_count`); ``api_calls``: the host's CUDA API calls the trace
        recorded (rows of the ``api_calls`` table).
        """
        launches = self.column("kernels", "launches")
        duration = self.column("kernels", "duration_ns")
        domains = self.column("ranges", "domain")
        gpu_ranges = sum(1 for domain in domains.tolist() if domain in GPU_RANGE_DOMAINS)
        kinds = [str(kind).lower() for kind in self.column("transfers", "kind").tolist()]
        ops = self.column("transfers", "launches")
        memcpy = int(sum(n for kind, n in zip(kinds, ops.tolist(), strict=True) if kind.startswith("memcpy")))
        memset = int(sum(n for kind, n in zip(kinds, ops.tolist(), strict=True) if kind.startswith("memset")))
        return {"kernels": len(set(self.column("kernels", "name").tolist())), "kernel_rows": self.rows("kernels"),
                "launches": int(launches.sum()), "measured_launches": int(launches[~np.isnan(duration)].sum()),
                "metrics": self.rows("metrics"), "ranges": len(domains) - gpu_ranges, "gpu_ranges": gpu_ranges,
                "memcpy": memcpy, "memset": memset, "transfers": int(ops.sum()), "devices": self.rows("devices"),
                "graph_launches": graph_launch_count(self.column("kernels", "graph_launch_id"),
                                                     self.column("kernels", "launch_ns")),
                "graph_kernels": int(launches[~np.isnan(self.column("kernels", "graph_launch_id"))].sum()),
                "api_calls": self.rows("api_calls")}


def graph_launch_count(launch_id: np.ndarray, launch_ns: np.ndarray) -> int:
    """Distinct CUDA graph launch calls among kernels (``graph_launch_id``, NaN: none), told apart by correlation
    id and call start: CUPTI numbers correlation ids per process, so two processes can reuse one."""
    graph = ~np.isnan(launch_id)
    ids, starts = launch_id[graph], np.nan_to_num(launch_ns[graph], nan=-1.0)
    if not len(ids):
        return 0
    order = np.lexsort((starts, ids))  # sort and compare neighbours: np.unique imports numpy.ma
    ids, starts = ids[order], starts[order]
    return int(1 + ((ids[1:] != ids[:-1]) | (starts[1:] != starts[:-1])).sum())


def build(path: Path, *, kernels: Any = None, metrics: Any = None, ranges: Any = None, devices: Any = None,
          transfers: Any = None, ops: Any = None, source_samples: Any = None, rules: Any = None,
          api_calls: Any = None, host_ops: Any = None, meta: dict[str, Any]) -> TraceTables:
    """Conform each table to its columns and types and check every number; raise rather than return bad data.

    Each table argument is a DataFrame, a list of row dicts, or a dict of columns (lists, numpy arrays or
    :class:`Column` s of one length); ``None`` is an empty table. Plain columns of numbers and strings are conformed
    without pandas.
    """
    given = {"kernels": kernels, "metrics": metrics, "ranges": ranges, "devices": devices, "transfers": transfers,
             "ops": ops, "source_samples": source_samples, "rules": rules, "api_calls": api_calls,
             "host_ops": host_ops}
    columns = {name: _conform(path, name, given[name], spec) for name, spec in TABLES.items()}
    ids = np.sort(columns["kernels"]["id"].values)  # sort and searchsorted: np.unique/isin import numpy.ma
    if (ids[1:] == ids[:-1]).any():
        raise TraceFormatError(path, "holds two kernels with the same id", "the file is damaged")
    for table, what in (("metrics", "metric values"), ("source_samples", "stall-sample rows"),
                        ("rules", "rule results")):
        wanted = columns[table]["kernel_id"].values
        at = np.clip(np.searchsorted(ids, wanted), 0, max(len(ids) - 1, 0))
        stray = ids[at] != wanted if len(ids) else np.ones(len(wanted), dtype=bool)
        if stray.any():
            raise TraceFormatError(path, f"has {int(stray.sum())} {what} for kernels it does not hold",
                                   "the file is damaged")
    strays = set(columns["api_calls"]["kind"].values.tolist()) - {*API_CALL_KINDS, None}
    if strays:
        raise TraceFormatError(path, f"has API calls of kind {sorted(map(str, strays))[0]!r}, none of "
                                     f"{', '.join(API_CALL_KINDS)}", "the reader is out of date or the file damaged")
    meta = {"source": str(path), **meta}
    meta.setdefault("notes", [])
    return TraceTables(columns, meta)


def _source_columns(given: Any) -> tuple[dict[str, Any], int]:
    """The given table as named columns (lists, arrays or Series) and its row count."""
    if given is None:
        return {}, 0
    if isinstance(given, dict):
        lengths = {len(values) for values in given.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths {sorted(lengths)}")
        return given, lengths.pop() if lengths else 0
    if isinstance(given, list):
        names = list(dict.fromkeys(key for row in given for key in row))
        return {name: [row.get(name) for row in given] for name in names}, len(given)
    # A DataFrame.
    return {name: given[name] for name in given.columns}, len(given)


def _conform(path: Path, table: str, given: Any, columns: dict[str, str]) -> dict[str, Column]:
    source, n = _source_columns(given)
    out: dict[str, Column] = {}
    for column, dtype in columns.items():
        if column not in source:
            if dtype == "object":
                out[column] = Column(np.full(n, None, dtype=object))
                continue
            # An absent number is missing everywhere (launches: one each); the checks below still apply to it.
            absent = np.ones(n, dtype=np.int64) if column == "launches" else np.full(n, np.nan)
            out[column] = _checked(path, table, column, absent, None, dtype)
            continue
        values = source[column]
        out[column] = _strings(values) if dtype == "object" else _numbers(path, table, column, values, dtype)
    return out


def _missing(value: Any) -> bool:
    return value is None or (type(value) is float and value != value)


def _strings(values: Any) -> Column:
    if hasattr(values, "notna"):  # a Series: pandas' own missing values (NA, NaT, NaN) become None
        return Column(values.astype("object").where(values.notna(), None).to_numpy())
    out = np.fromiter(values, dtype=object, count=len(values))
    try:
        # Only a NaN differs from itself: numpy compares the column in one C loop, and just those few values are
        # looked at in Python (a per-value generator costs ~10x more on a 20,000-row column).
        suspects = np.flatnonzero(np.asarray(out != out, dtype=bool)).tolist()
    except (TypeError, ValueError):  # a value whose != is not a bool (an array, pandas.NA): look at each one
        suspects = range(len(out))
    for i in suspects:
        if _missing(out[i]):
            out[i] = None
    return Column(out)


def _numbers(path: Path, table: str, column: str, values: Any, dtype: str) -> Column:
    plain = _plain_numbers(values)
    if plain is not None:
        return _checked(path, table, column, *plain, dtype)
    return _via_pandas(path, table, column, values, dtype)


def _plain_numbers(values: Any) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(int64 or float64 array, missing mask or None) when ``values`` are plain numbers (a :class:`Column`, a numeric
    numpy array or Series, or a list of ints, floats and None); None when they need pandas' parsing (strings, bools,
    objects)."""
    if isinstance(values, Column) and values.values.dtype in (np.int64, np.float64):
        missing = values.missing
        return values.values, missing if missing is not None and missing.any() else None
    if isinstance(values, np.ndarray) and values.dtype in (np.int64, np.float64):
        return values, None
    if hasattr(values, "dtype") and hasattr(values, "to_numpy"):  # a Series
        if values.dtype == np.int64 or values.dtype == np.float64:
            return values.to_numpy(), None
        return None
    if not isinstance(values, list):
        return None
    missing = [v is None for v in values]
    kinds = {type(v) for v in values}
    kinds.discard(type(None))
    if not kinds <= {int, float}:
        return None
    if kinds == {int}:
        try:
            ints = np.array([0 if v is None else v for v in values], dtype=np.int64)
        except OverflowError:
            return None
        return ints, np.array(missing, dtype=bool) if any(missing) else None
    floats = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return floats, None


def _via_pandas(path: Path, table: str, column: str, values: Any, dtype: str) -> Column:
    import pandas as pd

    series = pd.Series(values) if not hasattr(values, "to_numpy") else values.reset_index(drop=True)
    try:
        # numpy_nullable keeps whole numbers as Int64: a float64 detour would round ns timestamps past 2^53.
        numbers = pd.to_numeric(series, errors="raise", dtype_backend="numpy_nullable")
    except (ValueError, TypeError) as exc:
        raise TraceFormatError(path, f"{table}.{column} holds a value that is not a number ({exc})",
                               "the file is damaged or not this format") from exc
    if pd.api.types.is_integer_dtype(numbers.dtype):
        missing = numbers.isna().to_numpy()
        return _checked(path, table, column, numbers.to_numpy(dtype=np.int64, na_value=0),
                        missing if missing.any() else None, dtype)
    return _checked(path, table, column, numbers.astype("float64").to_numpy(dtype=np.float64, na_value=np.nan),
                    None, dtype)


def _checked(path: Path, table: str, column: str, values: np.ndarray, missing: np.ndarray | None,
             dtype: str) -> Column:
    """Check ``values`` (int64 with an optional missing mask, or float64 with NaN where missing) and type them."""
    whole = values.dtype == np.int64
    floats = values.astype(np.float64) if whole else values
    if whole and missing is not None:
        floats = np.where(missing, np.nan, floats)
    _validate(path, table, column, floats, dtype, whole and missing is None)
    if dtype == "float64":
        return Column(floats.copy() if floats is values else floats)
    if whole:
        ints = values.copy()
    else:
        missing = np.isnan(floats)
        ints = np.where(missing, 0.0, np.round(floats)).astype(np.int64)
    if dtype == "int64":
        return Column(ints)
    return Column(ints, missing if missing is not None else np.zeros(len(ints), dtype=bool))


def _frame(columns: dict[str, Column], spec: dict[str, str]) -> pd.DataFrame:
    import pandas as pd

    n = len(next(iter(columns.values())).values)
    index = pd.RangeIndex(n)
    data: dict[str, Any] = {}
    for name, col in columns.items():
        if spec[name] == "Int64":
            data[name] = pd.Series(pd.arrays.IntegerArray(col.values, col.missing), index=index)
        else:  # object stays object: pandas 3 would infer its string dtype from an array of str
            data[name] = pd.Series(col.values, index=index, dtype=spec[name], copy=False)
    return pd.DataFrame(data, index=index)


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
