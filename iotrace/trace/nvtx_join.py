"""Nest ranges per thread and find the range path each kernel ran under, on numpy arrays (no pandas).

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

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PATH_SEPARATOR", "Nesting", "innermost", "nest", "nest_arrays"]

#: Joins range names in ``kernels.nvtx_path``. Not "/": iotrace's own range names contain slashes.
PATH_SEPARATOR = " > "


@dataclass(frozen=True)
class Nesting:
    """Ranges nested per thread: per range (in the input order) its depth, its parent's position (-1: none) and
    its path of names from the outermost range."""

    threads: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    nests: np.ndarray
    depth: np.ndarray
    parent: np.ndarray
    paths: np.ndarray


def nest_arrays(threads: np.ndarray, starts: np.ndarray, ends: np.ndarray, nests: np.ndarray,
                names: np.ndarray) -> Nesting:
    """Nest ranges given as arrays: ``threads`` (int64, -1 where unknown), ``starts``/``ends`` (int64 ns),
    ``nests`` (bool: push/pop ranges take part; others get depth 0 and no parent), ``names`` (object)."""
    n = len(starts)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    paths = np.array(names, dtype=object, copy=True)
    if n:
        order = np.lexsort((-ends, starts, threads))
        stack: list[int] = []
        current = None
        thread_list, start_list, end_list, nest_list = threads.tolist(), starts.tolist(), ends.tolist(), nests.tolist()
        for i in order.tolist():  # a plain stack walk: about a microsecond per range
            if not nest_list[i]:
                continue
            if thread_list[i] != current:
                stack, current = [], thread_list[i]
            while stack and end_list[stack[-1]] < start_list[i]:
                stack.pop()
            if stack:
                top = stack[-1]
                parent[i] = top
                depth[i] = depth[top] + 1
                paths[i] = f"{paths[top]}{PATH_SEPARATOR}{names[i]}"
            stack.append(i)
    return Nesting(threads=threads, starts=starts, ends=ends, nests=np.asarray(nests, dtype=bool), depth=depth,
                   parent=parent, paths=paths)


def innermost(nesting: Nesting, call_threads: np.ndarray, call_times: np.ndarray) -> np.ndarray:
    """For each call (thread, time ns), the position of the innermost range open on that thread at that time, or
    -1. Threads and times are int64; thread -1 (unknown) matches nothing."""
    found = np.full(len(call_times), -1, dtype=np.int64)
    usable = np.flatnonzero(nesting.nests)
    if not len(usable) or not len(call_times):
        return found
    for thread in sorted(set(nesting.threads[usable].tolist())):  # not np.unique, which imports numpy.ma
        if thread == -1:
            continue
        members = usable[nesting.threads[usable] == thread]
        # Ranges that start together (Kineto's microsecond timestamps make that common) in nesting order, outer
        # first: the last one started at or before a call is then the deepest, and every range enclosing the call
        # is it or one of its ancestors. By start alone (file order among equals) a call could land in the outer
        # one and miss the inner.
        members = members[np.lexsort((nesting.depth[members], nesting.starts[members]))]
        which = np.flatnonzero(call_threads == thread)
        if not len(which):
            continue
        times = call_times[which]
        k = np.searchsorted(nesting.starts[members], times, side="right") - 1
        cand = np.where(k >= 0, members[np.clip(k, 0, None)], -1)
        while True:  # walk up while the candidate closed before the call
            closed = (cand >= 0) & (nesting.ends[np.clip(cand, 0, None)] < times)
            if not closed.any():
                break
            cand = np.where(closed, nesting.parent[np.clip(cand, 0, None)], cand)
        found[which] = cand
    return found


def nest(ranges: Any) -> Any:
    """``ranges`` (a DataFrame: id, name, thread, start_ns, end_ns, nests) with ``depth``, ``parent_id`` and
    ``path`` added, for callers holding a DataFrame."""
    import pandas as pd

    out = ranges.copy()
    nesting = nest_arrays(out["thread"].fillna(-1).to_numpy(dtype=np.int64), out["start_ns"].to_numpy(dtype=np.int64),
                          out["end_ns"].to_numpy(dtype=np.int64), out["nests"].to_numpy(dtype=bool),
                          out["name"].astype("object").to_numpy())
    ids = out["id"].to_numpy(dtype=np.int64)
    out["depth"] = nesting.depth
    out["parent_id"] = pd.array([ids[p] if p >= 0 else None for p in nesting.parent.tolist()], dtype="Int64")
    out["path"] = nesting.paths
    return out
