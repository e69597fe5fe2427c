"""Helpers the format parsers share, on numpy arrays: exact µs→ns conversion, launch times, NVTX paths of kernels."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from iotrace.trace.nvtx_join import innermost, nest_arrays

__all__ = ["int_or_none", "launch_times", "range_paths", "us_to_ns"]


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


def launch_times(kernel_corr: np.ndarray, kernel_start: np.ndarray, call_corr: np.ndarray,
                 call_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each kernel's ``launch_ns``: the start of the API call that launched it, as (int64 values, missing mask).
    Kernel start minus it is the launch latency the timeline report shows.

    Correlation ids are float64 (NaN: none); times are int64 ns (epoch values pass 2^53, so never float64).
    CUPTI numbers correlation ids per process, so one id can belong to calls of several processes in one export:
    the launching call is the latest call with the kernel's id that began no later than the kernel did.
    """
    n = len(kernel_corr)
    values = np.zeros(n, dtype=np.int64)
    missing = np.ones(n, dtype=bool)
    wanted = np.flatnonzero(~np.isnan(kernel_corr))
    have = ~np.isnan(call_corr)
    if not len(wanted) or not have.any():
        return values, missing
    calls = int(have.sum())
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
    values[rows[hit]] = time[order][last[hit]]
    missing[rows[hit]] = False
    return values, missing


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
    ``correlation_id``, ``thread`` and ``time_ns``."""
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
        values, missing = launch_times(kernel_corr, ints(kernels, "start_ns"), call_corr, call_time)
        kernels = kernels.assign(launch_ns=pd.arrays.IntegerArray(values, missing | kernels["start_ns"].isna()
                                                                  .to_numpy()))
    return kernels, ranges
