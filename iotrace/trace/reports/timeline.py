"""Timeline of a traced run (nsys, Kineto): where the GPU time went and where the GPU sat idle.

Top kernels by total time, time per NVTX range, GPU idle gaps (per device: the gaps between the union of kernel
and copy intervals), launch latency (API call start to kernel start, when the trace keeps the launching call's
time) and the share of GPU busy time spent in memory copies and sets. Every number here is measured.

CUDA graph launches (kernels with a ``graph_launch_id``) get their own figure, :class:`GraphLaunches`: how many,
the kernels they ran and those kernels' share of kernel time, and the CPU time of the launch calls per kernel
against that of ordinary launches. Their kernels are left out of the launch latency, which for the 300th kernel of
a graph would be the graph's run time so far rather than a launch cost; the graph's figure has the latency from
each graph launch call to its first kernel instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from iotrace.trace.reports.range_kernels import range_kernels
from iotrace.trace.reports.records import Unavailable
from iotrace.trace.reports.time_split import LaunchSplit, TimeSplit, launch_split, time_split
from iotrace.trace.tables import GPU_RANGE_DOMAINS, TraceTables

__all__ = ["IDLE_SHARE", "MEMCPY_SHARE", "GraphLaunches", "Timeline", "timeline"]

#: GPU idle for more than 20% of the traced span is flagged. HTA's idle-time analysis uses the same framing
#: (facebookresearch/HolisticTraceAnalysis, analyzers/idle_time_analysis.py); 20% is iotrace's cut-off.
IDLE_SHARE = 0.20
#: Copies taking more than 10% of GPU busy time are flagged (iotrace's cut-off: in steady-state inference the
#: weights and KV cache stay on the device, so copies should be a small fraction).
MEMCPY_SHARE = 0.10
#: Gaps shorter than this are launch overhead, not idleness (about a kernel launch, ~5 µs; CUDA Best Practices
#: Guide, "Asynchronous and Overlapping Transfers with Computation" discusses launch costs of microseconds).
MIN_GAP_NS = 5_000


@dataclass(frozen=True)
class GraphLaunches:
    """The CUDA graph launches of a trace (kernels with a ``graph_launch_id``), all measured.

    ``launches``: graph launch calls that ran a traced kernel; ``graphs``: distinct graphs among them where the
    file names them (``graph_id``, newer Nsight Systems exports), else None; ``kernels``: the kernel launches they
    ran, ``kernel_ns`` their GPU time and ``kernel_share`` its share of all kernel time; ``launch_cpu_ns``: the
    CPU time of the graph launch calls (end minus start, where the file keeps the call's end), per kernel they
    ran in ``cpu_ns_per_kernel``, against ``direct_cpu_ns_per_kernel``, the mean CPU time of the call launching an
    ordinary kernel (None where the trace has none); ``first_kernel_latency_ns``: median time from a graph launch
    call's start to the start of the first kernel it ran.
    """

    launches: int
    graphs: int | None
    kernels: int
    kernel_ns: float
    kernel_share: float | None
    launch_cpu_ns: float | None
    cpu_ns_per_kernel: float | None
    direct_cpu_ns_per_kernel: float | None
    first_kernel_latency_ns: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Timeline:
    top_kernels: pd.DataFrame
    ranges: pd.DataFrame
    gaps: pd.DataFrame
    idle: pd.DataFrame
    launch_latency: dict[str, float] | None
    memcpy: dict[str, Any]
    unavailable: list[Unavailable] = field(default_factory=list)
    graph_launches: GraphLaunches | None = None
    #: Where the time goes per device and stream, and each launch split into call, queueing and launch latency
    #: (:mod:`iotrace.trace.reports.time_split`); None where the trace lacks what they need.
    split: TimeSplit | None = None
    launches: LaunchSplit | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"top_kernels": self.top_kernels.to_dict("records"), "ranges": self.ranges.to_dict("records"),
                "idle": self.idle.to_dict("records"), "gaps": self.gaps.to_dict("records"),
                "launch_latency_ns": self.launch_latency, "memcpy": self.memcpy,
                "graph_launches": None if self.graph_launches is None else self.graph_launches.to_dict(),
                "split": None if self.split is None else self.split.to_dict(),
                "launches": None if self.launches is None else self.launches.to_dict()}


def _busy_intervals(tables: TraceTables) -> pd.DataFrame:
    parts = []
    for frame, kind in ((tables.kernels, "kernel"), (tables.transfers, "copy")):
        timed = frame.dropna(subset=["start_ns", "end_ns"])
        if len(timed):
            parts.append(pd.DataFrame({"device": timed["device"].fillna(-1).astype("int64").to_numpy(),
                                       "start": timed["start_ns"].astype("int64").to_numpy(),
                                       "end": timed["end_ns"].astype("int64").to_numpy(),
                                       "what": timed["name"].to_numpy() if kind == "kernel" else
                                       timed["kind"].to_numpy()}))
    if not parts:
        return pd.DataFrame(columns=["device", "start", "end", "what"])
    return pd.concat(parts, ignore_index=True)


def _gaps(busy: pd.DataFrame, top: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per device: span, busy and idle time; and the longest gaps with what ran before and after."""
    idle_rows, gap_rows = [], []
    for device, group in busy.groupby("device", sort=True):
        group = group.sort_values("start", kind="stable")
        starts = group["start"].to_numpy()
        ends = np.maximum.accumulate(group["end"].to_numpy())  # the union's running end
        what = group["what"].to_numpy()
        span = int(ends[-1] - starts[0])
        gap_after = starts[1:] - ends[:-1]
        real = np.flatnonzero(gap_after > 0)
        idle = int(gap_after[real].sum()) if len(real) else 0
        idle_rows.append({"device": int(device), "span_ns": span, "busy_ns": span - idle, "idle_ns": idle,
                          "idle_share": idle / span if span > 0 else 0.0,
                          "gaps_over_min": int((gap_after >= MIN_GAP_NS).sum())})
        for i in real[np.argsort(-gap_after[real], kind="stable")][:top]:
            if gap_after[i] < MIN_GAP_NS:
                break
            gap_rows.append({"device": int(device), "start_offset_ns": int(ends[i] - starts[0]),
                             "gap_ns": int(gap_after[i]), "before": str(what[i]), "after": str(what[i + 1])})
    return pd.DataFrame(idle_rows), pd.DataFrame(gap_rows, columns=["device", "start_offset_ns", "gap_ns", "before",
                                                                      "after"])


def _ranges(tables: TraceTables, top: int) -> pd.DataFrame:
    """Time per range name: ``count`` and wall time ``total_ns``, then the kernels launched inside the name's ranges,
    by the join the per-range rooflines use too (:func:`~iotrace.trace.reports.range_kernels.range_kernels`): the
    same kernel time per range in both tables. ``kernel_ns`` and ``kernels`` (launches) are *inclusive* of nested
    ranges, each kernel once per name; ``self_kernel_ns`` is *exclusive*, the kernels launched directly inside.

    A GPU mirror of a CPU range (Kineto's ``gpu_user_annotation``) is left out where the CPU ranges are there, so a
    range is counted once (as :meth:`TraceTables.counts` counts them); listed alone, it holds no kernels (the join
    goes through the launching thread). Kernel time is a measured 0 for a range that launched none where the
    trace's kernels carry their launching call (``launch_ns``), and missing where none does."""
    ranges = tables.ranges.dropna(subset=["duration_ns"])
    cpu = ranges[~ranges["domain"].isin(GPU_RANGE_DOMAINS)]
    if len(cpu):
        ranges = cpu
    columns = ["name", "count", "total_ns", "kernel_ns", "kernels", "self_kernel_ns"]
    if ranges.empty:
        return pd.DataFrame(columns=columns)
    table = ranges.groupby("name", sort=False).agg(count=("id", "size"), total_ns=("duration_ns", "sum"))
    kernels = tables.kernels
    join = range_kernels(tables)
    times = join.times(kernels["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan),
                       kernels["launches"].to_numpy(dtype=np.int64))
    per = pd.DataFrame({"kernel_ns": times["kernel_ns"].to_numpy(), "kernels": times["launches"].to_numpy(),
                        "self_kernel_ns": times["self_ns"].to_numpy()},
                       index=pd.Index(join.names[times.index.to_numpy(dtype=np.int64)], dtype=object))
    table = table.join(per, how="left")
    joined = len(cpu) > 0 and kernels["launch_ns"].notna().any() and kernels["duration_ns"].notna().any()
    if joined:
        table[["kernel_ns", "self_kernel_ns"]] = table[["kernel_ns", "self_kernel_ns"]].fillna(0.0)
    table["kernels"] = table["kernels"].fillna(0).astype("int64")
    return table.sort_values("total_ns", ascending=False).head(top).reset_index()[columns]


def _mean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.astype("float64").mean()) if len(values) else None


def _graph_launches(kernels: pd.DataFrame) -> GraphLaunches | None:
    """The :class:`GraphLaunches` figure, or None for a trace whose kernels no CUDA graph ran."""
    ran = kernels["graph_launch_id"].notna()
    if not ran.any():
        return None
    graph = kernels[ran]
    # One call per (id, call start): CUPTI numbers correlation ids per process, as graph_launch_count does.
    per = graph.assign(call=graph["launch_ns"].fillna(-1)).groupby(["graph_launch_id", "call"], sort=False).agg(
        kernels=("launches", "sum"), first=("start_ns", "min"), start=("launch_ns", "first"),
        end=("launch_end_ns", "first"))
    cpu = (per["end"] - per["start"]).dropna()
    ids = graph["graph_id"].dropna()
    kernel_ns = float(graph["duration_ns"].sum())
    total_ns = float(kernels["duration_ns"].sum())
    direct = kernels[~ran]
    first = (per["first"] - per["start"]).dropna()
    return GraphLaunches(
        launches=len(per), graphs=int(ids.nunique()) if len(ids) else None, kernels=int(per["kernels"].sum()),
        kernel_ns=kernel_ns, kernel_share=kernel_ns / total_ns if total_ns > 0 else None,
        launch_cpu_ns=float(cpu.sum()) if len(cpu) else None,
        cpu_ns_per_kernel=float(cpu.sum()) / int(per.loc[cpu.index, "kernels"].sum()) if len(cpu) else None,
        direct_cpu_ns_per_kernel=_mean(direct["launch_end_ns"] - direct["launch_ns"]),
        first_kernel_latency_ns=float(first.astype("float64").median()) if len(first) else None)


def _copies_by_kind(transfers: pd.DataFrame) -> list[dict[str, Any]]:
    """Copies and sets per kind and memory kinds (pageable, pinned, device, managed where the export names them),
    with their achieved bandwidth: bytes over their summed time (bytes per ns is GB/s). The CardBook states no
    host-link (PCIe, NVLink) bandwidth, so no ceiling is set beside it."""
    if transfers.empty:
        return []
    table = (transfers.groupby(["kind", "src_kind", "dst_kind"], dropna=False, sort=False)
             .agg(count=("launches", "sum"), total_ns=("duration_ns", "sum"), bytes=("bytes", "sum"))
             .sort_values("total_ns", ascending=False).reset_index())
    table["bandwidth_gbs"] = (table["bytes"].astype("float64") / table["total_ns"].where(table["total_ns"] > 0))
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in table.to_dict("records")]


def timeline(tables: TraceTables, top: int = 10) -> Timeline:
    """The timeline tables of a trace; parts the trace cannot support come back as :class:`Unavailable`."""
    missing: list[Unavailable] = []
    top_kernels = tables.top_kernels(top)
    busy = _busy_intervals(tables)
    idle, gaps = _gaps(busy, top) if len(busy) else (pd.DataFrame(), pd.DataFrame())
    if busy.empty:
        missing.append(Unavailable("GPU idle gaps", "kernel start/end timestamps",
                                   "nsys profile --trace=cuda,nvtx (or torch.profiler)"))
    ranges = _ranges(tables, top)
    if tables.ranges.empty:
        missing.append(Unavailable("time per NVTX range", "NVTX ranges", "nsys profile --trace=cuda,nvtx"))
    latency = None
    kernels = tables.kernels
    graphs = _graph_launches(kernels)
    launch = kernels.get("launch_ns")
    if launch is not None and launch.notna().any():
        direct = kernels["graph_launch_id"].isna()  # a graph's kernels: see the module docstring
        delta = (kernels["start_ns"] - launch)[direct].dropna().astype("float64")
        if len(delta):
            latency = {"count": len(delta), "median": float(delta.median()), "p90": float(delta.quantile(0.9)),
                       "max": float(delta.max())}
    if latency is None and (graphs is None or graphs.first_kernel_latency_ns is None):
        missing.append(Unavailable("launch latency", "launch_ns (the launching API call's start, per kernel)",
                                   "nsys profile --trace=cuda (CUPTI_ACTIVITY_KIND_RUNTIME)",
                                   detail="this trace's tables keep no launch call times"))
    transfers = tables.transfers.dropna(subset=["duration_ns"])
    copy_ns = float(transfers["duration_ns"].sum())
    kernel_ns = float(tables.kernels["duration_ns"].sum(min_count=1) or 0.0)
    by_kind = _copies_by_kind(transfers)
    memcpy = {"copy_ns": copy_ns, "kernel_ns": kernel_ns,
              "share": copy_ns / (copy_ns + kernel_ns) if copy_ns + kernel_ns > 0 else None, "by_kind": by_kind}
    split = time_split(tables)
    return Timeline(top_kernels, ranges, gaps, idle, latency, memcpy, missing, graphs, split,
                    launch_split(tables, {} if split is None else split.busy))
