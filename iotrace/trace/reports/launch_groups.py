"""Launches grouped by kernel name and launch configuration: the rows every per-kernel report stands on.

One row per (name, grid, block, registers, shared memory): identical launches (100 profiled launches of one kernel in
an Nsight Compute report, 36 timeline launches at grid 111) become one row with their count and min/median/max
duration, while launches of one name at different configurations stay apart (a grid-111 launch at 5% occupancy and a
grid-4995 launch at 100% are different kernels to tune). Nsight Compute's own ``--print-summary per-kernel`` groups the
same way and averages the counters (https://docs.nvidia.com/nsight-compute/NsightComputeCli/index.html#command-line-
options-console-output); :func:`group_metrics` does that for the analyses.

A profiled launch with no counter in the file (its replay failed), or one the reader found nothing recorded for, is
kept apart as "not profiled" (:func:`unprofiled`) so that its missing counters are never read as sections the capture
lacks.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from iotrace.trace.fields import NCU_NOT_COUNTERS

__all__ = ["CONFIG_COLUMNS", "NOT_COUNTERS", "config_text", "group_launches", "group_metrics",
           "unprofiled"]

#: What makes two launches of one name the same launch configuration.
CONFIG_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                  "static_smem_bytes", "dynamic_smem_bytes", "smem_bytes")
#: Metric families that are not counters (:data:`iotrace.trace.fields.NCU_NOT_COUNTERS`).
NOT_COUNTERS = NCU_NOT_COUNTERS
#: Occupancy columns a timeline records per launch: averaged over a group weighted by each launch's duration.
_WEIGHTED = ("est_achieved_occupancy_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct", "blocks_per_sm",
             "warps_per_sm")


def unprofiled(kernels: pd.DataFrame, metrics: pd.DataFrame, flagged: Collection[int] = ()) -> set[int]:
    """Ids of the launches that have no counter in ``metrics`` while other launches have some (a failed replay), and
    those of ``kernels`` the reader ``flagged`` as not profiled (``meta["not_profiled"]``: ncu recorded nothing for
    them, not even the launch); an empty set where no launch has counters and none is flagged (a timeline, or a
    capture of launch statistics only)."""
    ids = {int(k) for k in kernels["id"]}
    failed = ids & {int(k) for k in flagged}
    if metrics.empty:
        return failed
    counters = metrics["metric"].astype(str)
    counters = ~counters.str.startswith(NOT_COUNTERS)
    counted = set(metrics.loc[counters, "kernel_id"].astype(int))
    if not counted:
        return failed
    return failed | (ids - counted)


def group_launches(kernels: pd.DataFrame, failed: Collection[int] = (), *, by_time: bool = False,
                   each_launch: bool = False) -> pd.DataFrame:
    """One row per launch group of ``kernels`` (which carries a ``smem_bytes`` total), the first launch's columns
    standing for the group, with:

    ``launch_ids`` (every kernel row's id), ``launches_total``, ``total_ns``, ``mean_ns``, ``min_ns``/``median_ns``/
    ``max_ns`` (over single-launch rows with a duration; NaN where a row aggregates launches, as nsys stats do),
    ``measured`` (launches with a duration), ``profiled``, the time-weighted occupancy columns, and
    ``config_index``/``configs_of_name`` (this row's place among the name's configurations, by time).

    :param by_time: order by the name's total time, then the configuration's (a name's configurations sit
        together), as a timeline is read; else in launch order (an Nsight Compute report's order).
    :param each_launch: one row per kernel row (no grouping), as Nsight Compute lists launches.
    """
    frame = kernels.reset_index(drop=True).copy()
    frame["profiled"] = ~frame["id"].isin(list(failed))
    config = ["name", *[c for c in CONFIG_COLUMNS if c in frame]]
    # A launch configuration is the name and its resources; whether a launch was profiled splits groups, not
    # configurations, and listing launches one by one (each_launch) invents none.
    frame["_config"] = frame.groupby(config, sort=False, dropna=False).ngroup()
    if each_launch:
        frame["_group"] = np.arange(len(frame))
    else:
        frame["_group"] = frame.groupby([*config, "profiled"], sort=False, dropna=False).ngroup()
    single = frame["launches"] == 1
    frame["_single_ns"] = frame["duration_ns"].where(single)
    grouped = frame.groupby("_group", sort=False)
    out = grouped.first()
    out["id"] = grouped["id"].first()
    out["launch_ids"] = grouped["id"].agg(lambda ids: [int(i) for i in ids])
    out["launches_total"] = grouped["launches"].sum()
    out["total_ns"] = grouped["duration_ns"].sum(min_count=1)
    out["measured"] = grouped["duration_ns"].count()
    out["mean_ns"] = out["total_ns"] / out["launches_total"].clip(lower=1)
    aggregated = grouped["_single_ns"].count() < out["measured"]  # a row that sums launches has no min or max
    for stat in ("min", "median", "max"):
        out[f"{stat}_ns"] = grouped["_single_ns"].agg(stat).where(~aggregated)
    weights = frame["duration_ns"].fillna(0.0)
    for column in (c for c in _WEIGHTED if c in frame):
        have = frame[column].notna() & (weights > 0)
        num = (frame[column].astype(float) * weights).where(have).groupby(frame["_group"]).sum(min_count=1)
        den = weights.where(have).groupby(frame["_group"]).sum(min_count=1)
        plain = frame[column].astype(float).groupby(frame["_group"]).mean()
        out[column] = (num / den).fillna(plain)  # no durations: the plain mean
    out["name_total_ns"] = out.groupby("name", sort=False)["total_ns"].transform("sum")
    if by_time:
        out = out.sort_values(["name_total_ns", "total_ns"], ascending=False, kind="stable", na_position="last")
    out["config_index"] = out.groupby("name", sort=False)["_config"].transform(
        lambda c: pd.Series(pd.factorize(c)[0] + 1, index=c.index))
    out["configs_of_name"] = out.groupby("name", sort=False)["_config"].transform("nunique")
    return out.drop(columns=["_single_ns", "_config"]).reset_index(drop=True)


def group_metrics(metrics: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """``metrics`` with each group's launches averaged into one set of values under the group's first launch id (the
    per-kernel summary of ``ncu --print-summary per-kernel``); unchanged where every group is one launch."""
    if metrics.empty or (groups["launch_ids"].map(len) == 1).all():
        return metrics
    owner = {int(i): int(rep) for rep, ids in zip(groups["id"], groups["launch_ids"], strict=True) for i in ids}
    kept = metrics[metrics["kernel_id"].isin(list(owner))]
    kept = kept.assign(kernel_id=kept["kernel_id"].map(owner))
    return kept.groupby(["kernel_id", "metric", "unit"], sort=False, as_index=False)["value"].mean()


def config_text(row: pd.Series | dict) -> str:
    """A launch configuration in words: "grid 111×1×1, block 128×1×1, 32 registers, 0 B shared"."""
    def dims(prefix: str) -> str:
        return "×".join("?" if pd.isna(row.get(f"{prefix}_{a}")) else str(int(row[f"{prefix}_{a}"])) for a in "xyz")

    regs = row.get("registers_per_thread")
    smem = row.get("smem_bytes")
    return (f"grid {dims('grid')}, block {dims('block')}, {'?' if pd.isna(regs) else int(regs)} registers, "
            f"{'?' if smem is None or pd.isna(smem) else f'{int(smem):,}'} B shared")
