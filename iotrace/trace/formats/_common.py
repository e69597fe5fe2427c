"""Helpers the format parsers share, on numpy arrays: exact µs→ns conversion, launch times, graph launches, NVTX
paths of kernels."""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

import numpy as np

from iotrace.trace.nvtx_join import innermost, nest_arrays

__all__ = ["graph_launch_calls", "int_or_none", "is_graph_launch", "launch_columns", "launch_times", "range_paths",
           "us_to_ns"]

#: The host calls that launch a CUDA graph: the runtime's ``cudaGraphLaunch`` and the driver's ``cuGraphLaunch``,
#: each also as the per-thread-default-stream ``_ptsz`` variant, with or without the CUPTI callback's version
#: suffix (CUDA Runtime API "Graph Management"; CUPTI ``cupti_runtime_cbid.h``:
#: ``CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000``). Nsight Systems names the call with the suffix
#: (``cudaGraphLaunch_v10000``, as ``cudaLaunchKernel_v7000`` in the corpus exports), Kineto without it.
_GRAPH_LAUNCH = re.compile(r"cu(da)?GraphLaunch(_ptsz)?(_v\d+)?")


def us_to_ns(values: Any) -> np.ndarray:
    """Microsecond timestamps (floats, as Chrome traces write them) to integer ns, as exactly as a float64 holds.

    Splitting off the whole microseconds first avoids multiplying an epoch value (~1.7e15 µs) by 1000, which would
    round to 256 ns.
    """
    arr = np.asarray(values, dtype=np.float64)
    whole = np.floor(arr)
    return whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000).astype(np.int64)


def int_or_none(value: Any) -> int | None:
    """A whole number from an int, an integral float or a decimal string; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


@cache
def is_graph_launch(name: str) -> bool:
    """Whether an API call of this name launches a CUDA graph (see :data:`_GRAPH_LAUNCH`)."""
    return _GRAPH_LAUNCH.fullmatch(name) is not None


def graph_launch_calls(names: list[Any]) -> np.ndarray:
    """Per API call, whether it launches a CUDA graph (a name that is not a string never does)."""
    return np.fromiter((type(n) is str and is_graph_launch(n) for n in names), dtype=bool, count=len(names))


def launching_calls(kernel_corr: np.ndarray, kernel_start: np.ndarray, call_corr: np.ndarray,
                    call_time: np.ndarray) -> np.ndarray:
    """Per kernel, the position in the calls of the API call that launched it (-1: none found).

    Correlation ids are float64 (NaN: none); times are int64 ns (epoch values pass 2^53, so never float64).
    CUPTI numbers correlation ids per process, so one id can belong to calls of several processes in one export:
    the launching call is the latest call with the kernel's id that began no later than the kernel did.
    """
    found = np.full(len(kernel_corr), -1, dtype=np.int64)
    wanted = np.flatnonzero(~np.isnan(kernel_corr))
    have = np.flatnonzero(~np.isnan(call_corr))
    if not len(wanted) or not len(have):
        return found
    calls = len(have)
    corr = np.concatenate([call_corr[have], kernel_corr[wanted]])
    time = np.concatenate([call_time[have], kernel_start[wanted]])
    is_call = np.arange(len(corr)) < calls
    # Sorted by id, then time, calls before kernels at equal times: the latest call at or before each kernel is
    # the last call seen so far in this order, when it has the kernel's id.
    order = np.lexsort((~is_call, time, corr))
    seen = np.maximum.accumulate(np.where(is_call[order], np.arange(len(order)), -1))
    kernel_at = np.flatnonzero(~is_call[order])
    last = seen[kernel_at]
    hit = last >= 0
    hit[hit] = corr[order][last[hit]] == corr[order][kernel_at[hit]]
    rows = wanted[order[kernel_at] - calls]
    found[rows[hit]] = have[order[last[hit]]]
    return found


def launch_times(kernel_corr: np.ndarray, kernel_start: np.ndarray, call_corr: np.ndarray,
                 call_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each kernel's ``launch_ns``: the start of the API call that launched it (:func:`launching_calls`), as
    (int64 values, missing mask). Kernel start minus it is the launch latency the timeline report shows."""
    return launch_columns(kernel_corr, kernel_start, call_corr, call_time)["launch_ns"]


def launch_columns(kernel_corr: np.ndarray, kernel_start: np.ndarray, call_corr: np.ndarray, call_time: np.ndarray,
                   call_end: np.ndarray | None = None, call_graph: np.ndarray | None = None,
                   call_end_missing: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The kernel columns that come from the launching API call (:func:`launching_calls`), each as (int64 values,
    missing mask): ``launch_ns`` (the call's start), ``launch_end_ns`` (its end, given ``call_end``; missing where
    ``call_end_missing`` says the file has none) and
    ``graph_launch_id`` (the call's correlation id where ``call_graph`` says it launched a CUDA graph: every kernel
    of one graph launch shares it, CUPTI giving a graph's kernels the correlation id of the launching call)."""
    call = launching_calls(kernel_corr, kernel_start, call_corr, call_time)
    hit = call >= 0
    at = np.where(hit, call, 0)
    empty = not len(call_corr)

    def pick(values: np.ndarray, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (np.zeros(len(call), dtype=np.int64) if empty else np.where(where, values[at], 0).astype(np.int64),
                ~where)

    out = {"launch_ns": pick(call_time, hit)}
    if call_end is not None:
        ended = hit if call_end_missing is None or empty else hit & ~call_end_missing[at]
        out["launch_end_ns"] = pick(call_end, ended)
    if call_graph is not None:
        graph = hit & (np.zeros(len(call), dtype=bool) if empty else call_graph[at])
        out["graph_launch_id"] = pick(np.nan_to_num(call_corr), graph)
    return out


def range_paths(ranges: dict[str, np.ndarray], kernel_corr: np.ndarray, call_corr: np.ndarray,
                call_thread: np.ndarray, call_time: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """Nest ``ranges`` and find, for each kernel, the innermost range open when its launching call began.

    :param ranges: arrays ``thread`` (int64, -1 unknown: the join key), ``start_ns``, ``end_ns`` (int64), ``nests``
        (bool), ``name`` (object), ``id`` (int64).
    :param kernel_corr: each kernel's correlation id (float64, NaN: none).
    :param call_corr: the launching API calls' ids (float64), ``call_thread`` (same key as ranges), ``call_time``.
    :returns: the ranges' ``depth`` and ``parent_id`` (int64 values, missing mask), and per kernel the position of
        its range in ``ranges`` (-1: none). With several calls of one id, the last one in the file launched it.
    """
    nesting = nest_arrays(ranges["thread"], ranges["start_ns"], ranges["end_ns"], ranges["nests"], ranges["name"])
    ids = ranges["id"]
    parent = nesting.parent
    nested = {"depth": nesting.depth, "parent_id": (np.where(parent >= 0, ids[np.clip(parent, 0, None)], 0),
                                                     parent < 0), "path": nesting.paths}
    found = np.full(len(kernel_corr), -1, dtype=np.int64)
    have = np.flatnonzero(~np.isnan(call_corr))
    if not len(kernel_corr) or not len(have) or not len(ids):
        return nested, found
    # The last call of each id: a stable sort keeps file order within an id, so each run's end is its last call.
    order = have[np.argsort(call_corr[have], kind="stable")]
    keys = call_corr[order]
    last = np.append(keys[1:] != keys[:-1], True)
    keys, order = keys[last], order[last]
    at = np.clip(np.searchsorted(keys, kernel_corr), 0, len(keys) - 1)
    matched = keys[at] == kernel_corr  # False for NaN
    call = order[at]
    threads = np.where(matched, call_thread[call], -1)
    times = np.where(matched, call_time[call], -1)
    found = np.where(matched, innermost(nesting, threads, times), -1)
    return nested, found


def join_frames(kernels: Any, ranges: Any, calls: Any) -> tuple[Any, Any]:
    """:func:`range_paths` and :func:`launch_times` for a reader holding DataFrames: ``kernels`` (needs
    ``correlation_id`` and ``start_ns``) gains ``nvtx_range_id``, ``nvtx_path`` and ``launch_ns``; ``ranges`` (id,
    name, thread, start_ns, end_ns, nests) gains ``depth`` and ``parent_id`` and loses ``nests``; ``calls`` holds
    ``correlation_id``, ``thread`` and ``time_ns``, and optionally ``end_ns`` and ``graph`` (bool: the call launched
    a CUDA graph), which give the kernels ``launch_end_ns`` and ``graph_launch_id`` (:func:`launch_columns`)."""
    import pandas as pd

    def floats(frame: Any, column: str) -> np.ndarray:
        return pd.to_numeric(frame[column], errors="coerce").astype("float64").to_numpy(na_value=np.nan)

    def ints(frame: Any, column: str) -> np.ndarray:
        return pd.to_numeric(frame[column], errors="coerce").astype("Int64").fillna(-1).to_numpy(dtype=np.int64)

    usable = calls.dropna(subset=["correlation_id", "time_ns"])
    call_corr, call_time = floats(usable, "correlation_id"), ints(usable, "time_ns")
    has_ids = len(kernels) and "correlation_id" in kernels
    kernel_corr = floats(kernels, "correlation_id") if has_ids else np.full(len(kernels), np.nan)
    arrays = {"thread": ints(ranges, "thread"), "start_ns": ints(ranges, "start_ns"), "end_ns": ints(ranges, "end_ns"),
              "nests": ranges["nests"].to_numpy(dtype=bool), "name": ranges["name"].astype("object").to_numpy(),
              "id": ranges["id"].to_numpy(dtype=np.int64)}
    nested, found = range_paths(arrays, kernel_corr, call_corr, ints(usable, "thread"), call_time)
    values, missing = nested["parent_id"]
    ranges = ranges.assign(depth=nested["depth"], parent_id=pd.arrays.IntegerArray(values, missing))
    ranges = ranges.drop(columns=["nests"])
    if len(kernels) and len(arrays["id"]) and len(call_corr):
        hit = found >= 0
        range_id = np.where(hit, arrays["id"][np.clip(found, 0, None)], 0)
        path = np.where(hit, nested["path"][np.clip(found, 0, None)], None)
        kernels = kernels.assign(nvtx_range_id=pd.arrays.IntegerArray(range_id, ~hit), nvtx_path=path)
    if has_ids and len(call_corr) and "start_ns" in kernels:
        end = ints(usable, "end_ns") if "end_ns" in usable else None
        unended = pd.to_numeric(usable["end_ns"], errors="coerce").isna().to_numpy() if "end_ns" in usable else None
        graph = usable["graph"].to_numpy(dtype=bool) if "graph" in usable else None
        columns = launch_columns(kernel_corr, ints(kernels, "start_ns"), call_corr, call_time, end, graph, unended)
        unstarted = kernels["start_ns"].isna().to_numpy()
        kernels = kernels.assign(**{name: pd.arrays.IntegerArray(values, missing | unstarted)
                                    for name, (values, missing) in columns.items()})
    return kernels, ranges
