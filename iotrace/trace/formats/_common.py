"""Helpers the format parsers share: exact µs→ns conversion, thread keys, NVTX joining of kernel rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from iotrace.trace.nvtx_join import kernel_paths, nest

__all__ = ["attach_paths", "int_or_none", "us_to_ns"]


def us_to_ns(values: list[Any]) -> np.ndarray:
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


def attach_launch_times(kernels: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Each kernel's ``launch_ns``: the start of the API call that launched it (missing when the file holds none).
    Kernel start minus it is the launch latency the timeline report shows.

    CUPTI numbers correlation ids per process, so one id can belong to calls of several processes in one export:
    the launching call is the latest call with the kernel's id that began no later than the kernel did.
    """
    if not len(kernels) or not len(calls) or "correlation_id" not in kernels or "start_ns" not in kernels:
        return kernels
    # Int64 throughout: epoch timestamps in ns pass 2^53, past which a float64 detour would round them.
    calls = pd.DataFrame({"correlation_id": pd.to_numeric(calls["correlation_id"], errors="coerce").astype("Int64"),
                          "time_ns": pd.to_numeric(calls["time_ns"], errors="coerce").astype("Int64")}).dropna()
    wanted = pd.DataFrame({"row": np.arange(len(kernels)),
                           "correlation_id": pd.to_numeric(kernels["correlation_id"], errors="coerce").astype("Int64"),
                           "start_ns": pd.to_numeric(kernels["start_ns"], errors="coerce").astype("Int64")}).dropna()
    pairs = wanted.merge(calls, on="correlation_id")
    latest = pairs[pairs["time_ns"] <= pairs["start_ns"]].groupby("row")["time_ns"].max()
    return kernels.assign(launch_ns=latest.reindex(range(len(kernels))).astype("Int64").to_numpy())


def attach_paths(kernels: pd.DataFrame, ranges: pd.DataFrame, calls: pd.DataFrame) -> tuple[pd.DataFrame,
                                                                                           pd.DataFrame]:
    """Nest ``ranges`` and give each kernel the path of ranges open when its launching call began.

    :param kernels: needs ``correlation_id``; gains ``nvtx_range_id`` and ``nvtx_path``.
    :param ranges: id, name, thread (the join key), start_ns, end_ns, nests; gains depth, parent_id.
    :param calls: the launching API calls: ``correlation_id``, ``thread`` (same key as ranges), ``time_ns``.
    """
    nested = nest(ranges)
    if len(kernels) and len(nested) and len(calls):
        calls = calls.dropna(subset=["correlation_id"]).drop_duplicates("correlation_id", keep="last")
        launched = kernels[["correlation_id"]].merge(calls, on="correlation_id", how="left")
        launched.index = kernels.index
        found = kernel_paths(nested, launched[["thread", "time_ns"]].fillna(-1))
        kernels = kernels.assign(nvtx_range_id=found["nvtx_range_id"], nvtx_path=found["nvtx_path"])
    return kernels, nested.drop(columns=["path", "nests"])
