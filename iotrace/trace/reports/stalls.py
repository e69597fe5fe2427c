"""Warp stalls: per kernel, the stall reasons ranked by their share of the cycles between two issued instructions.

Three counter families carry stall reasons (Nsight Compute Kernel Profiling Guide, "Warp Scheduler States" and
the WarpStateStats / SourceCounters sections):

* ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`` — warps stalled on the reason per issue
  cycle, i.e. the reason's cycles per issued instruction (WarpStateStats section; what ncu's CPIStall rules read);
* ``smsp__average_warp_latency_issue_stalled_<reason>`` (``.ratio``/``.sum``) — the older spelling;
* ``smsp__pcsamp_warps_issue_stalled_<reason>`` — PC-sampling counts (SourceCounters section).

The reasons partition a warp's cycles between issues, so a reason's share is its value over the family's sum (for
the first family that sum is the warp cycles per issued instruction, ``smsp__average_warp_latency_per_inst_issued``
up to rounding; for sampling it is ``smsp__pcsamp_sample_count``). Spellings are resolved through
``stall_reasons.toml`` (``no_instructions`` → ``no_instruction``; Hopper's ``gmma`` and ``warpgroup_arrive`` are
ordinary reasons there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.records import Unavailable
from iotrace.trace.reports.stall_reasons import canonical, reasons

__all__ = ["FAMILIES", "STALL_COLUMNS", "StallFamily", "amd_stalls_unavailable", "primary", "stall_table"]


@dataclass(frozen=True)
class StallFamily:
    key: str
    pattern: re.Pattern[str]
    section: str
    description: str


#: In order of preference: the first family a kernel has is its primary ranking.
FAMILIES = (
    StallFamily("counters", re.compile(r"^smsp__average_warps_issue_stalled_([a-z0-9_]+?)_per_issue_active\.ratio$"),
                "ncu --section WarpStateStats", "cycles per issued instruction (counters)"),
    StallFamily("latency", re.compile(r"^smsp__average_warp_latency_issue_stalled_([a-z0-9_]+?)(?:\.ratio|\.sum)?$"),
                "ncu --section WarpStateStats", "warp latency per reason (older counters)"),
    StallFamily("sampling", re.compile(r"^smsp__pcsamp_warps_issue_stalled_([a-z0-9_]+)$"),
                "ncu --section SourceCounters", "PC samples"),
)

STALL_COLUMNS = ["kernel_id", "family", "reason", "metric", "value", "share", "rank"]

# ncu's CPIStall* rules flag a reason that takes more than 30% of the cycles between issues while the scheduler
# issues on fewer than 80% of cycles (Nsight Compute sections/CPIStallLongScoreboard.py and siblings:
# `issueActive < 0.8 and 0.3 < warpCyclesPerStall / warpCyclesPerIssue`).
DOMINANT_SHARE = 0.30
ISSUE_ACTIVE_LIMIT = 0.8


def _family_rows(view: MetricView, kernel_id: int, family: StallFamily) -> list[dict[str, object]]:
    rows: dict[str, dict[str, object]] = {}
    for name, value in view.of(kernel_id).items():
        match = family.pattern.match(name)
        if match is None:
            continue
        raw = match.group(1)
        # Sub-pipe breakdowns (long_scoreboard_pipe_l1tex) and not-issued twins repeat a reason's cycles;
        # math_pipe_throttle is a reason of its own ("math" is none).
        base, sub_pipe, _ = raw.partition("_pipe_")
        if (sub_pipe and base in reasons()) or raw.endswith("_not_issued"):
            continue
        key = canonical(raw)
        # .ratio and .sum of the latency family are the same reason; keep the first seen.
        rows.setdefault(key, {"kernel_id": kernel_id, "family": family.key, "reason": key, "metric": name,
                              "value": value})
    return list(rows.values())


def stall_table(view: MetricView, kernel_ids: list[int]) -> tuple[pd.DataFrame, list[Unavailable]]:
    """Long table (kernel_id, family, reason, metric, value, share, rank), ranked per kernel and family.

    Ranks order by value, highest first (ties by reason name, so the order is stable); ``share`` is value over
    the family's sum for that kernel.
    """
    rows: list[dict[str, object]] = []
    missing: list[Unavailable] = []
    for kid in kernel_ids:
        found = False
        for family in FAMILIES:
            family_rows = _family_rows(view, kid, family)
            if not family_rows:
                continue
            found = True
            total = sum(float(r["value"]) for r in family_rows)  # type: ignore[arg-type]
            family_rows.sort(key=lambda r: (-float(r["value"]), str(r["reason"])))  # type: ignore[arg-type]
            for rank, row in enumerate(family_rows, start=1):
                row["share"] = float(row["value"]) / total if total > 0 else 0.0  # type: ignore[arg-type]
                row["rank"] = rank
            rows.extend(family_rows)
        if not found:
            missing.append(Unavailable("warp stalls", "smsp__average_warps_issue_stalled_*_per_issue_active.ratio",
                                       "ncu --section WarpStateStats", kid,
                                       "or PC sampling smsp__pcsamp_warps_issue_stalled_* (ncu --section "
                                       "SourceCounters)"))
    table = pd.DataFrame(rows, columns=STALL_COLUMNS)
    return table, missing


#: rocprof-compute's "Wavefront" panel (rocprofiler-compute's analysis config, panel id 700, "Wavefront Runtime
#: Stats": Dependency Wait Cycles SQ_WAIT_ANY, Issue Wait Cycles SQ_WAIT_INST_ANY, over SQ_WAVE_CYCLES) counts a
#: wavefront's waits in total, not per reason; reasons per instruction come only from PC sampling (rocprofv3
#: --pc-sampling-*; ROCm docs, "Using PC sampling", https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/latest/how-to/using-pc-sampling.html).
AMD_WAITS = "SQ_WAIT_ANY, SQ_WAIT_INST_ANY per SQ_WAVE_CYCLES (rocprof-compute's Wavefront panel)"


def amd_stalls_unavailable(kernel_id: int | None, has_counters: bool) -> Unavailable:
    """The wavefront-stall line of an AMD trace: what rocprof-compute collects instead of ncu's per-reason stalls."""
    if has_counters:
        return Unavailable("wavefront stall reasons", "stall reasons per instruction (PC sampling)",
                           "rocprofv3 --pc-sampling-beta-enabled", kernel_id,
                           f"this capture has {AMD_WAITS}: a wavefront's wait cycles in total, not split by reason")
    return Unavailable("wavefront stalls", AMD_WAITS, "rocprof-compute profile", kernel_id,
                       "this trace has no hardware counters (profile the kernel with rocprof-compute)")


def primary(table: pd.DataFrame, kernel_id: int) -> pd.DataFrame:
    """The kernel's ranking from its preferred family (counters, then older counters, then sampling)."""
    if table.empty:  # a timeline's rows have no stalls: nothing to filter (and no pandas cost per row)
        return table
    mine = table[table["kernel_id"] == kernel_id]
    for family in FAMILIES:
        part = mine[mine["family"] == family.key]
        if len(part):
            return part.sort_values("rank")
    return mine
