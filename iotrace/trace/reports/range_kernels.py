"""Which kernels each NVTX / ``record_function`` range holds: the one join behind both per-range tables of a report,
the timeline's "time per NVTX range" (:func:`iotrace.trace.reports.timeline.timeline`) and the per-range rooflines
(:mod:`iotrace.trace.reports.range_roofline`), so the two cannot disagree about a range's kernel time.

The rule. A kernel belongs to every range open on the thread that launched it when the launching API call began:
``range.start_ns <= kernels.launch_ns <= range.end_ns`` on the call's thread (the kernel and the call share a
correlation id). Its *innermost* range, ``kernels.nvtx_range_id``, is joined by the readers
(:func:`iotrace.trace.nvtx_join.innermost`); the ranges enclosing the call are that one and those of its ancestors
(``ranges.parent_id``, same thread) that are still open at the call. A range's kernel time is therefore *inclusive*:
the kernels launched inside it, nested ranges' included; its *self* time counts only the kernels whose innermost range
it is. Rows are range names; a name opened inside itself (recursion, repeated pushes) counts each kernel once.

Sources for the rule:

* Nsight Systems' NVTX GPU projection (``nsys stats --report nvtx_gpu_proj_trace`` / ``nvtx_gpu_proj_sum``, the
  report scripts shipped in ``Target-*/reports``): "A GPU operation is considered to be 'contained' by an NVTX range
  if the CUDA API call used to launch the operation is within the NVTX range. Only ranges that start and end on the
  same thread are taken into account." Its query joins the GPU operation to ``CUPTI_ACTIVITY_KIND_RUNTIME`` by
  ``correlationId`` (and process) and to *every* range on the call's ``globalTid`` that encloses the call, so an
  outer range holds its inner ranges' work. (It keeps the whole call inside the range; for a push/pop range on the
  calling thread that is the same as the call's start inside it: the thread cannot pop the range mid-call.)
* PyTorch's profiler (``torch/autograd/profiler_util.py``, ``FunctionEvent.device_time_total``): an op's device
  time is its own kernels' plus its CPU children's ("account for the kernels in the children ops"), inclusive;
  ``self_device_time_total`` subtracts the children's, exclusive.

Ranges that do not nest on a thread (Nsight Systems start/end ranges) and GPU mirrors of CPU ranges (Kineto's
``gpu_user_annotation``) hold no kernels here: the first may end on another thread, the second are the GPU side of a
CPU range that is already counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from iotrace.trace.tables import GPU_RANGE_DOMAINS

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

__all__ = ["RangeKernels", "range_kernels"]


@dataclass(frozen=True)
class RangeKernels:
    """The join of a trace's kernels to its CPU-side ranges (positions: ``ranges`` rows, ``tables.kernels`` rows).

    ``names`` are the distinct range names (a name's group is its position), ``codes`` each range's group,
    ``parent`` each range's enclosing range (-1: none), ``home`` each kernel's innermost range (-1: launched outside
    every range, or not joined), and ``kernel``/``instance`` every (kernel, range) pair where the range encloses the
    kernel's launch call: the home and every ancestor still open at the call.
    """

    ranges: pd.DataFrame
    names: np.ndarray
    codes: np.ndarray
    parent: np.ndarray
    home: np.ndarray
    kernel: np.ndarray
    instance: np.ndarray

    def name_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(kernel, name group) pairs, each once: a kernel inside two nested ranges of one name counts once."""
        if not len(self.kernel):
            return self.kernel, self.kernel
        group = self.codes[self.instance]
        keep = ~pd.DataFrame({"k": self.kernel, "g": group}).duplicated().to_numpy()
        return self.kernel[keep], group[keep]

    def times(self, durations: np.ndarray, launches: np.ndarray) -> pd.DataFrame:
        """Per name group (index), from per-kernel ``durations`` (float ns, NaN: unknown) and ``launches``:
        ``kernel_ns`` and ``launches`` inclusive of nested ranges, ``self_ns`` and ``self_launches`` of the kernels
        whose innermost range has the name. Only names holding a kernel have a row; a sum of unknown durations is
        NaN, never 0."""
        kern, group = self.name_pairs()
        # sum(min_count=1): a name whose kernels are all untimed keeps a missing time (launches are never missing).
        inclusive = pd.DataFrame({"g": group, "kernel_ns": durations[kern], "launches": launches[kern]}).groupby(
            "g").sum(min_count=1)
        inside = np.flatnonzero(self.home >= 0)
        own = pd.DataFrame({"g": self.codes[self.home[inside]], "self_ns": durations[inside],
                            "self_launches": launches[inside]}).groupby("g").sum(min_count=1)
        out = inclusive.join(own, how="left")
        # Timed kernels inside the name but none directly in it: a measured 0, not a missing value.
        out["self_ns"] = out["self_ns"].where(out["self_ns"].notna() | out["kernel_ns"].isna(), 0.0)
        out["self_launches"] = out["self_launches"].fillna(0).astype("int64")
        out["launches"] = out["launches"].astype("int64")
        return out


def range_kernels(tables: TraceTables) -> RangeKernels:
    """The kernels each CPU-side range of ``tables`` holds, by the rule in the module docstring."""
    ranges = tables.ranges
    ranges = ranges[~ranges["domain"].isin(GPU_RANGE_DOMAINS)].reset_index(drop=True)
    kernels = tables.kernels
    ids = pd.Index(ranges["id"].to_numpy(dtype=np.int64))
    parent = ids.get_indexer(ranges["parent_id"].fillna(-1).astype("int64").to_numpy()) if len(ranges) else \
        np.zeros(0, dtype=np.int64)
    names = ranges["name"].astype("object").to_numpy()
    codes, uniques = pd.factorize(names, use_na_sentinel=False)
    if len(kernels) and len(ranges):
        home = ids.get_indexer(kernels["nvtx_range_id"].fillna(-1).astype("int64").to_numpy())
    else:
        home = np.full(len(kernels), -1, dtype=np.int64)
    kern, inst = _ancestry(home, parent)
    if len(kern):
        # An ancestor closed before the call does not hold the kernel: push/pop ranges nest, but a reader's nesting
        # of ranges that only overlap (timestamps rounded to a microsecond) could make one a parent.
        launch = kernels["launch_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[kern]
        start = ranges["start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[inst]
        end = ranges["end_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[inst]
        inside = np.isnan(launch) | ((np.isnan(start) | (start <= launch)) & (np.isnan(end) | (launch <= end)))
        kern, inst = kern[inside], inst[inside]
    return RangeKernels(ranges=ranges, names=np.asarray(uniques, dtype=object), codes=np.asarray(codes),
                        parent=parent, home=home, kernel=kern, instance=inst)


def _ancestry(home: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kernel position, range position) for each kernel and every range enclosing its innermost one: a walk up the
    parents, vectorised over kernels, as long as the deepest nesting."""
    kern_parts, inst_parts = [], []
    which = np.flatnonzero(home >= 0)
    current = home[which]
    while len(which):
        kern_parts.append(which)
        inst_parts.append(current)
        up = parent[current]
        which, current = which[up >= 0], up[up >= 0]
    if not kern_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(kern_parts), np.concatenate(inst_parts)
