"""Nest ranges per thread and find the range path each kernel ran under.

A kernel runs on the GPU, but the NVTX range that explains it was open on the CPU thread that launched it. So the
join goes through the launching API call (same correlation id in the kernel and runtime tables), then looks for
the ranges open on that call's thread at that call's start: by launch, not by overlapping GPU time, which would
credit a kernel to whatever range happened to be open while it ran asynchronously.

Push/pop ranges on one thread nest (each thread has its own stack in each domain). For a call at time t, the
innermost open range is an ancestor-or-self of the last range that started at or before t, so a binary search
plus a short walk up the parents finds it; the walk is vectorised over all calls and ends after at most the
maximum depth steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["PATH_SEPARATOR", "kernel_paths", "nest"]

#: Joins range names in ``kernels.nvtx_path``. Not "/": iotrace's own range names contain slashes.
PATH_SEPARATOR = " > "


def nest(ranges: pd.DataFrame) -> pd.DataFrame:
    """``ranges`` (id, name, thread, start_ns, end_ns, nests) with ``depth``, ``parent_id`` and ``path`` added.

    Only rows with ``nests`` true (push/pop ranges) take part; others get depth 0 and no parent.
    """
    out = ranges.copy()
    n = len(out)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    paths = out["name"].astype("object").to_numpy(copy=True)
    if n:
        order = np.lexsort((-out["end_ns"].to_numpy(dtype=np.int64), out["start_ns"].to_numpy(dtype=np.int64),
                            out["thread"].fillna(-1).to_numpy(dtype=np.int64)))
        threads = out["thread"].fillna(-1).to_numpy(dtype=np.int64)
        starts = out["start_ns"].to_numpy(dtype=np.int64)
        ends = out["end_ns"].to_numpy(dtype=np.int64)
        nests = out["nests"].to_numpy(dtype=bool)
        names = paths.copy()
        stack: list[int] = []
        current = None
        for i in order.tolist():  # a plain stack walk: about a microsecond per range
            if not nests[i]:
                continue
            if threads[i] != current:
                stack, current = [], threads[i]
            while stack and ends[stack[-1]] < starts[i]:
                stack.pop()
            if stack:
                parent[i] = stack[-1]
                depth[i] = depth[stack[-1]] + 1
                paths[i] = f"{paths[stack[-1]]}{PATH_SEPARATOR}{names[i]}"
            stack.append(i)
    ids = out["id"].to_numpy(dtype=np.int64)
    out["depth"] = depth
    out["parent_id"] = pd.array([ids[p] if p >= 0 else None for p in parent.tolist()], dtype="Int64")
    out["path"] = paths
    return out


def kernel_paths(nested: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """For each launching call (thread, time_ns), the innermost open range id and its path.

    :param nested: the result of :func:`nest`.
    :param calls: columns ``thread`` and ``time_ns``; the result has the same index, columns ``nvtx_range_id``
        (nullable) and ``nvtx_path`` (None where no range was open).
    """
    range_id = pd.array([None] * len(calls), dtype="Int64")
    path = np.full(len(calls), None, dtype=object)
    usable = nested[nested["nests"]] if len(nested) else nested
    if len(usable) and len(calls):
        positions = {rid: k for k, rid in enumerate(nested["id"].to_numpy(dtype=np.int64).tolist())}
        call_threads = calls["thread"].to_numpy(dtype=np.float64)
        call_times = calls["time_ns"].to_numpy(dtype=np.float64)
        all_ends = nested["end_ns"].to_numpy(dtype=np.int64)
        all_parents = np.array([positions.get(p, -1) if p is not pd.NA else -1
                                for p in nested["parent_id"].tolist()], dtype=np.int64)
        all_ids = nested["id"].to_numpy(dtype=np.int64)
        all_paths = nested["path"].to_numpy()
        found = np.full(len(calls), -1, dtype=np.int64)
        for thread, group in usable.groupby("thread", sort=False):
            members = group.sort_values("start_ns", kind="stable")
            pos = np.array([positions[i] for i in members["id"].tolist()], dtype=np.int64)
            starts = members["start_ns"].to_numpy(dtype=np.int64)
            which = np.flatnonzero(call_threads == float(thread))
            if not len(which):
                continue
            times = call_times[which]
            k = np.searchsorted(starts, times, side="right") - 1
            cand = np.where(k >= 0, pos[np.clip(k, 0, None)], -1)
            while True:  # walk up while the candidate closed before the call
                closed = (cand >= 0) & (all_ends[np.clip(cand, 0, None)] < times)
                if not closed.any():
                    break
                cand = np.where(closed, all_parents[np.clip(cand, 0, None)], cand)
            found[which] = cand
        hit = found >= 0
        range_id = pd.array(np.where(hit, all_ids[np.clip(found, 0, None)], 0), dtype="Int64")
        range_id[~hit] = pd.NA
        path[hit] = all_paths[found[hit]]
    return pd.DataFrame({"nvtx_range_id": range_id, "nvtx_path": path}, index=calls.index)
