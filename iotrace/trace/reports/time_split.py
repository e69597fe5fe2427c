"""Where a timeline's time goes: each device's span split into compute kernels, communication kernels, copies and
sets, and idle; each stream's busy time; and the launch of each kernel split into the API call, queueing and launch
latency.

The span of a device runs from its first GPU operation's start to its last one's end (as Nsight Systems' GPU gaps rule
bounds it). Kernels on concurrent streams overlap, so each instant is counted once, for the first category busy at it
in the order compute, communication, copies: the four parts sum to the span, and communication is the time it is
*exposed* (not hidden under compute). Communication kernels are those the origin table calls communication
(:func:`iotrace.trace.reports.origin.is_communication`): NCCL's and RCCL's (HTA's :data:`COMM_KERNEL`), and vLLM's
custom all-reduce, PyTorch symmetric memory, NVSHMEM, DeepEP and TensorRT-LLM's all-reduce, which HTA counts as
compute.

A kernel's launch (kernels with the launching API call's start and end, ``launch_ns``/``launch_end_ns``): the call's
own duration; then, from the call's end to the kernel's start, *launch latency* where the kernel started on an idle
device (from the later of the call's end and the device's last work to the kernel's start: the GPU waited for the
launch) and *queueing* for the rest (the kernel waited its turn behind other work: not a cost in itself). Nsight
Systems' ``cuda_kern_exec_sum`` report splits a launch the same way (API time, queue time, kernel time): Nsight
Systems Analysis Guide, https://docs.nvidia.com/nsight-systems/AnalysisGuide/index.html.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from iotrace.trace.reports.origin import is_communication
from iotrace.trace.tables import TraceTables

__all__ = ["CATEGORIES", "COMM_KERNEL", "LaunchSplit", "TimeSplit", "comm_mask", "launch_split", "merge", "time_split",
           "union_ns"]

#: NCCL's (and RCCL's) kernel names: ``ncclKernel_AllReduce_RING_LL_Sum_float`` (NCCL < 2.19) and
#: ``ncclDevKernel_...`` (NCCL >= 2.19). HTA's is_comm_kernel (hta/utils/utils.py) matches the same names; iotrace's
#: :func:`comm_mask` counts these and the other communication libraries the origin table knows.
COMM_KERNEL = re.compile(r"nccl(?:Dev)?Kernel")

#: The parts of a device's span, in the order an instant is attributed.
CATEGORIES = ("compute", "communication", "copies", "idle")


def comm_mask(names: pd.Series) -> pd.Series:
    """True where a kernel name is a communication kernel (:func:`iotrace.trace.reports.origin.is_communication`),
    decided once per distinct name."""
    names = names.fillna("").astype(str)
    return names.map({n: is_communication(n) for n in names.unique()}).astype(bool)


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as sorted, disjoint intervals."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.r_[True, s[1:] > e[:-1]]  # an interval that starts after every earlier one ended opens a new run
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), dtype=e.dtype)
    np.maximum.at(out_e, group, e)
    return out_s, out_e


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """The length of the union of intervals [start, end), in their unit."""
    s, e = merge(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
    return int((e - s).sum())


@dataclass(frozen=True)
class TimeSplit:
    """Per device: ``span_ns`` and the four parts (``compute_ns``, ``communication_ns``, ``copies_ns``, ``idle_ns``,
    summing to the span) with their shares; per device and stream: busy time and its share of the device's span."""

    devices: pd.DataFrame
    streams: pd.DataFrame
    #: Per device, its GPU operations as disjoint sorted busy intervals (starts, ends): the union the split, the
    #: launch split and the timeline rules all stand on, computed once.
    busy: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"devices": self.devices.to_dict("records"), "streams": self.streams.to_dict("records")}


def _intervals(tables: TraceTables) -> pd.DataFrame:
    parts = []
    kernels = tables.kernels.dropna(subset=["start_ns", "end_ns"])
    if len(kernels):
        comm = comm_mask(kernels["name"]).to_numpy()
        parts.append(pd.DataFrame({"device": kernels["device"].fillna(-1).astype("int64").to_numpy(),
                                   "stream": kernels["stream"].fillna(-1).astype("int64").to_numpy(),
                                   "start": kernels["start_ns"].astype("int64").to_numpy(),
                                   "end": kernels["end_ns"].astype("int64").to_numpy(),
                                   "category": np.where(comm, "communication", "compute")}))
    transfers = tables.transfers.dropna(subset=["start_ns", "end_ns"])
    if len(transfers):
        parts.append(pd.DataFrame({"device": transfers["device"].fillna(-1).astype("int64").to_numpy(),
                                   "stream": transfers["stream"].fillna(-1).astype("int64").to_numpy(),
                                   "start": transfers["start_ns"].astype("int64").to_numpy(),
                                   "end": transfers["end_ns"].astype("int64").to_numpy(), "category": "copies"}))
    if not parts:
        return pd.DataFrame(columns=["device", "stream", "start", "end", "category"])
    return pd.concat(parts, ignore_index=True)


def time_split(tables: TraceTables) -> TimeSplit | None:
    """The split of every device's span, or None where the trace has no timed GPU operation."""
    spans = _intervals(tables)
    if spans.empty:
        return None
    rows, stream_rows = [], []
    runs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for device, group in spans.groupby("device", sort=True):
        start, end = int(group["start"].min()), int(group["end"].max())
        span = end - start
        runs[int(device)] = merge(group["start"].to_numpy(), group["end"].to_numpy())
        covered = {3: int((runs[int(device)][1] - runs[int(device)][0]).sum())}  # any of the three
        for upto in range(1, 3):  # covered by compute; by compute or communication
            chosen = group[group["category"].isin(CATEGORIES[:upto])]
            covered[upto] = union_ns(chosen["start"].to_numpy(), chosen["end"].to_numpy())
        parts = {"compute_ns": covered[1], "communication_ns": covered[2] - covered[1],
                 "copies_ns": covered[3] - covered[2], "idle_ns": span - covered[3]}
        rows.append({"device": int(device), "span_ns": span, **parts,
                     **{k.replace("_ns", "_share"): (v / span if span > 0 else 0.0) for k, v in parts.items()}})
        for stream, lane in group.groupby("stream", sort=True):
            busy = union_ns(lane["start"].to_numpy(), lane["end"].to_numpy())
            stream_rows.append({"device": int(device), "stream": None if stream == -1 else int(stream),
                                "busy_ns": busy, "share": busy / span if span > 0 else 0.0,
                                "operations": len(lane)})
    streams = pd.DataFrame(stream_rows).sort_values(["device", "busy_ns"], ascending=[True, False],
                                                     kind="stable").reset_index(drop=True)
    return TimeSplit(pd.DataFrame(rows), streams, runs)


@dataclass(frozen=True)
class LaunchSplit:
    """The launches of a timeline split into the API call, queueing and launch latency, each as
    {"count", "total_ns", "median_ns", "p90_ns"} over the launches that have that part; ``per_kernel`` holds one row
    per launch (kernel id, device, start, end, api_ns, wait_ns, queued_ns, latency_ns) for the rules that look at
    stretches of launches."""

    api: dict[str, float]
    queueing: dict[str, float]
    latency: dict[str, float]
    per_kernel: pd.DataFrame = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api, "queueing": self.queueing, "latency": self.latency}


def _stats(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"count": 0, "total_ns": 0.0, "median_ns": float("nan"), "p90_ns": float("nan")}
    return {"count": len(values), "total_ns": float(values.sum()), "median_ns": float(np.median(values)),
            "p90_ns": float(np.quantile(values, 0.9))}


def launch_split(tables: TraceTables, busy: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
                 ) -> LaunchSplit | None:
    """The launch split of every kernel launched directly (a CUDA graph's kernels share one launch call), or None
    where the trace does not record the launching calls' start and end. A kernel that started on an idle device waited
    launch latency from the later of its call's end and the device's last work; the rest of any wait is queueing
    behind other work. ``busy`` is :attr:`TimeSplit.busy` where the caller has it (else it is computed here)."""
    kernels = tables.kernels
    need = ["start_ns", "end_ns", "launch_ns", "launch_end_ns"]
    timed = kernels.dropna(subset=need)
    timed = timed[timed["graph_launch_id"].isna()]
    if timed.empty:
        return None
    if busy is None:
        split = time_split(tables)
        busy = {} if split is None else split.busy
    device = timed["device"].fillna(-1).astype("int64").to_numpy()
    call_end = timed["launch_end_ns"].astype("int64").to_numpy()
    start = timed["start_ns"].astype("int64").to_numpy()
    wait = (start - call_end).astype("float64")
    latency = np.zeros(len(timed), dtype="float64")
    for dev in np.unique(device):
        s, e = busy[int(dev)]  # the kernels themselves are in it: every launching device has its busy runs
        mine = np.flatnonzero(device == dev)
        i = np.searchsorted(s, start[mine], side="right") - 1  # the busy run the kernel belongs to
        opened = s[i] == start[mine]  # it opened that run: the device was idle just before it started
        before = np.where(i > 0, e[np.clip(i - 1, 0, None)], np.iinfo(np.int64).min)
        idle = start[mine] - np.maximum(call_end[mine], before)  # idle from the later of call end, last work end
        latency[mine] = np.where(opened, np.clip(idle, 0, None), 0.0)
    valid = wait >= 0  # a clock skew between the CPU and GPU timelines makes a few waits negative: left out
    latency = np.where(valid, np.minimum(latency, wait), 0.0)
    queued = np.where(valid, wait - latency, 0.0)
    api = (timed["launch_end_ns"] - timed["launch_ns"]).astype("float64").to_numpy()
    per_kernel = pd.DataFrame({"kernel_id": timed["id"].to_numpy(), "device": device, "start": start,
                               "end": timed["end_ns"].astype("int64").to_numpy(), "api_ns": api, "wait_ns": wait,
                               "queued_ns": queued, "latency_ns": latency})
    return LaunchSplit(_stats(api), _stats(queued[queued > 0]), _stats(latency[latency > 0]), per_kernel)
