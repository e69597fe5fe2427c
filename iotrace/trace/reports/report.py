"""``build_report``: every analysis of one trace, per kernel, with findings — the object renderers draw.

Each analysis lives in its own module and returns a table plus findings; this module only selects kernels,
resolves the card and assembles. Nothing here prints or plots.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from iotrace.cards import Card
from iotrace.errors import InvalidValueError
from iotrace.trace.findings import (
    FileFacts,
    KernelFacts,
    TimelineFacts,
    evaluate,
    evaluate_file,
    evaluate_timeline,
    floor_bounded,
    rank,
)
from iotrace.trace.info import smem_columns, smem_text, time_unit
from iotrace.trace.reports.amd_occupancy import device_gfx
from iotrace.trace.reports.capture_gaps import capture_gaps
from iotrace.trace.reports.graph_capture import capture_run
from iotrace.trace.reports.launch_groups import group_launches, group_metrics, unprofiled
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.ncu_rules import NOT_PROFILED_NOTE, StoredRule, rule_results_of, rules_status, stored_rules
from iotrace.trace.reports.occupancy import OccupancyRow, occupancy_row
from iotrace.trace.reports.op_roofline import OP_COLUMNS, op_rooflines
from iotrace.trace.reports.origin import Origin, classify
from iotrace.trace.reports.plugin_costs import PluginMatch, match_plugins
from iotrace.trace.reports.range_roofline import RangeRooflines, plugin_models_by_launch, range_rooflines
from iotrace.trace.reports.records import Finding, Unavailable
from iotrace.trace.reports.roofline import RooflinePoint, roofline_point
from iotrace.trace.reports.source_lines import KernelSourceLines, source_lines
from iotrace.trace.reports.stalls import amd_stalls_unavailable, primary, stall_table
from iotrace.trace.reports.step_report import StepOptions, StepReport, step_report
from iotrace.trace.reports.timeline import Timeline, timeline
from iotrace.trace.reports.vendor import in_amd_terms, vocabulary_of
from iotrace.trace.tables import TraceTables

__all__ = ["CEILINGS", "KernelReport", "Report", "build_report"]

#: Where roofline ceilings come from: the file's own *.peak_sustained where it has them, else the card (auto).
CEILINGS = ("auto", "file", "card")


@dataclass
class KernelReport:
    """Everything iotrace says about one kernel row: the launches of one kernel name in one launch configuration
    (:mod:`iotrace.trace.reports.launch_groups`) — identical profiled launches of an ncu report, or a timeline's
    launches of that name and configuration — or one launch where launches are listed one by one."""

    kernel_id: int
    name: str
    grid: list[int | None]
    block: list[int | None]
    registers: int | None
    duration_ns: float | None
    launches: int
    total_ns: float | None
    occupancy: OccupancyRow | None
    stalls: pd.DataFrame
    roofline: RooflinePoint | None
    plugin: str | None
    findings: list[Finding] = field(default_factory=list)
    #: Shared memory per block of the launch configuration (None where the file lacks it); the total is
    #: static + dynamic where both are known, else the file's own total (Kineto records only that).
    static_smem_bytes: int | None = None
    dynamic_smem_bytes: int | None = None
    smem_bytes: int | None = None
    #: The kernel-table ids of every launch this row stands for (the first is ``kernel_id``).
    launch_ids: list[int] = field(default_factory=list)
    #: Launches with a duration, and {"min", "median", "max"} ns over them (None where the file aggregates launches).
    measured_launches: int = 0
    duration_stats: dict[str, float] | None = None
    #: False for launches with no counter in the file (their replay failed): nothing is analysed for them.
    profiled: bool = True
    #: This row's place among its kernel name's distinct launch configurations (1 of 1 when the name has one).
    config_index: int = 1
    configs_of_name: int = 1
    #: Where the kernel comes from, by its name (:mod:`iotrace.trace.reports.origin`); advice fits it.
    origin: Origin | None = None
    #: Nsight Compute's own rule results stored in the file for this row (its first launch).
    stored_rules: list[StoredRule] = field(default_factory=list)
    #: The row's share of the selection's kernel time, in percent.
    share_pct: float | None = None

    def smem_text(self) -> str:
        """Shared memory per block for a person: "148,992 B (0 static + 148,992 dynamic)", "87,568 B" (the file
        records only the total), "?"."""
        if self.smem_bytes is None:
            return "?"
        text = smem_text(self.smem_bytes)
        if self.static_smem_bytes is not None and self.dynamic_smem_bytes is not None:
            text += f" ({self.static_smem_bytes:,} static + {self.dynamic_smem_bytes:,} dynamic)"
        return text

    def launches_text(self) -> str:
        """"100 launches, 1.2 µs min / 1.3 median / 1.9 max", "1 launch", or "not profiled"."""
        if not self.profiled:
            return f"{self.launches} launch{'es' * (self.launches != 1)}, not profiled (no counters in the file)"
        text = f"{self.launches} launch{'es' * (self.launches != 1)}"
        stats = self.duration_stats
        if stats is not None and self.launches > 1:
            # One unit for the set, the one the per-launch time beside it is printed in ("4.05 ms per launch, 10
            # launches, 4.03 ms min / ..."), not µs in exponent form ("4.03e+03 µs min").
            unit, scale = time_unit(self.duration_ns or stats["median"])
            text += (f", {stats['min'] / scale:.3g} {unit} min / {stats['median'] / scale:.3g} median / "
                     f"{stats['max'] / scale:.3g} max")
        if self.measured_launches < self.launches:
            text += f" ({self.measured_launches} with a duration)"
        if self.configs_of_name > 1:
            text += f"; configuration {self.config_index} of {self.configs_of_name} of this name"
        return text

    def stall_shares(self) -> dict[str, float]:
        """reason → share of the primary family, ranked (highest first); zero reasons left out."""
        ranked = primary(self.stalls, self.kernel_id)
        return {str(r): round(float(s), 6) for r, s in zip(ranked["reason"], ranked["share"], strict=True) if s > 0}

    def to_dict(self) -> dict[str, Any]:
        roof = self.roofline
        ranked = primary(self.stalls, self.kernel_id)
        return {
            "id": self.kernel_id, "name": self.name, "grid": self.grid, "block": self.block,
            "registers": self.registers, "static_smem_bytes": self.static_smem_bytes,
            "dynamic_smem_bytes": self.dynamic_smem_bytes, "smem_bytes": self.smem_bytes,
            "duration_ns": self.duration_ns, "launches": self.launches, "measured_launches": self.measured_launches,
            "duration_stats": self.duration_stats, "launch_ids": self.launch_ids, "total_ns": self.total_ns,
            "profiled": self.profiled, "configuration": {"index": self.config_index, "of": self.configs_of_name},
            "plugin": self.plugin, "share_pct": self.share_pct,
            "origin": None if self.origin is None else {"family": self.origin.family, "label": self.origin.label,
                                                        "library": self.origin.library,
                                                        "built_for": self.origin.built_for,
                                                        "evidence": self.origin.evidence,
                                                        "communication": self.origin.communication},
            "occupancy": self.occupancy.to_dict() if self.occupancy is not None else
            {"theoretical_pct": None, "theoretical_pct_ncu": None, "achieved_pct": None, "limiters": []},
            "stalls": self.stall_shares(),
            "stalls_family": None if ranked.empty else str(ranked["family"].iloc[0]),
            "stalls_sampled": {str(r): round(float(s), 6) for r, s, f in zip(
                self.stalls["reason"], self.stalls["share"], self.stalls["family"], strict=True)
                if f == "sampling" and s > 0},
            "roofline": {"flops": None, "dram_bytes": None, "intensity": None, "bound": None,
                         "pct_of_attainable": None} if roof is None else {
                "flops": roof.flops, "dram_bytes": roof.dram_bytes, "intensity": roof.intensity,
                "bound": roof.bound, "bound_basis": roof.bound_basis, "pct_of_attainable": roof.pct_of_attainable,
                "basis": roof.basis,
                "precision": roof.precision, "flops_by_precision": roof.flops_by_precision,
                "flops_source": roof.flops_source, "flops_lacking": roof.flops_lacking,
                "peak_flop_per_s": roof.peak_flop_per_s,
                "peak_source": roof.peak_source, "ridge": roof.ridge, "achieved_flop_per_s": roof.achieved_flop_per_s,
                "levels": [vars(lv) for lv in roof.levels], "sol": roof.sol,
                "model": None if roof.model is None else vars(roof.model)},
            "findings": [f.to_dict() for f in self.findings],
            "ncu_rules": [r.to_dict() for r in self.stored_rules],
        }


@dataclass
class Report:
    """One trace's reports: per-kernel records, the long tables they came from, findings and what was missing."""

    meta: dict[str, Any]
    card: Card | None
    card_source: str
    kernels: list[KernelReport]
    stalls: pd.DataFrame
    occupancy: pd.DataFrame
    roofline: pd.DataFrame
    timeline: Timeline | None
    findings: list[Finding]
    unavailable: list[dict[str, Any]]
    notes: list[str]
    tables: TraceTables = field(repr=False)
    view: MetricView = field(repr=False)
    #: True for a timeline (rows are a name's launches in one configuration, ordered by total time), False for
    #: profiled launches (an ncu report, a CSV of launches: identical launches grouped, in launch order).
    grouped: bool = False
    #: Op rooflines (:func:`iotrace.trace.reports.op_roofline.op_rooflines`): empty without shaped ops in the trace.
    ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: How many kernel records the selection had before ``top`` cut it (``len(kernels)`` when nothing was cut).
    kernels_total: int = 0
    #: Distinct kernel names and launches over every record of the selection (before ``top``).
    names_total: int = 0
    launches_total: int = 0
    #: True where each record is one launch (``--each-launch``), not identical launches grouped.
    each_launch: bool = False
    #: Per-range rooflines (:func:`iotrace.trace.reports.range_roofline.range_rooflines`); None without ranges.
    range_rooflines: RangeRooflines | None = None
    #: Per profiled row, its top source lines by stall samples (:mod:`iotrace.trace.reports.source_lines`); empty
    #: where the trace has no per-address samples.
    source_lines: list[KernelSourceLines] = field(default_factory=list)
    #: Findings over the whole selection before ``top`` cut them (``len(findings)`` when nothing was cut).
    findings_total: int = 0
    #: Every row of the selection, analysed (``kernels`` is the first ``top`` of them).
    every_row: list[KernelReport] = field(default_factory=list, repr=False)
    #: An engine's steps and where their time went (:mod:`iotrace.trace.reports.step_report`); None without steps.
    steps: StepReport | None = None

    def findings_title(self) -> str:
        """"Top findings (ranked by the time they can save)", with "; 5 of 201, --top 201 shows all" when cut."""
        shown, total = len(self.findings), max(self.findings_total, len(self.findings))
        more = f"; {shown} of {total}, --top {total} shows all" if total > shown else ""
        return f"Top findings (ranked by the time they can save{more})"

    def stored_ranked(self, limit: int | None = 5) -> list[dict[str, Any]]:
        """Nsight Compute's stored rule results with a global speedup estimate, across every row of the selection,
        ranked by the time that estimate stands for (speedup % x the row's total time): its GUI shows them one kernel
        at a time.
        A local estimate is a unit's efficiency, not time (NvRules API, SpeedupType), so it is not ranked here."""
        out = []
        for k in self.every_row or self.kernels:
            for rule in k.stored_rules:
                if rule.speedup_pct is None or rule.speedup_type != "global":
                    continue
                saves = None if k.total_ns is None else rule.speedup_pct / 100.0 * k.total_ns
                out.append({"kernel_id": k.kernel_id, "kernel": k.name, "rule_id": rule.rule_id,
                            "title": rule.title or rule.rule_name, "speedup_pct": rule.speedup_pct,
                            "saves_ns": saves, "text": rule.text()})
        out.sort(key=lambda r: (r["saves_ns"] is None, -(r["saves_ns"] or 0.0), -r["speedup_pct"]))
        return out if limit is None else out[:limit]

    @property
    def counts(self) -> dict[str, int]:
        """The trace's counts, the same as ``iotrace info`` reports (:meth:`TraceTables.counts`)."""
        return self.tables.counts()

    def kernels_title(self) -> str:
        """What the kernel table holds, in words — "Kernels (5 profiled launches of 3 kernels)", "Kernels (1 launch
        group: 100 profiled launches of 1 kernel, identical launches grouped)", "Kernels (12 launch configurations of
        10 kernels by total time)" — never launches called kernels, and, when ``top`` cut it, how many of how many."""
        n, total = len(self.kernels), self.total_kernels
        limit = f"; --top {total} shows all" if total > n else ""
        shown = f"showing {n} of {self.row_unit(total)}" if limit else self.row_unit(n)
        names = max(self.names_total, len({k.name for k in self.kernels}))
        of_names = f"{names} kernel{'s' * (names != 1)}"
        if self.grouped:
            if self._rows_are() == "kernel":
                return f"Kernels ({shown} by total time{limit})"
            return f"Kernels ({shown} of {of_names} by total time{limit})"
        # ncu's results are its profiled launches, but one without counters is named so in the title too.
        failed = sum(k.launches for k in self.every_row or self.kernels if not k.profiled)
        failed_text = f", {failed} not profiled" if failed else ""
        if self._rows_are() == "launch":
            return f"Kernels ({shown.replace('launch', 'profiled launch')} of {of_names}{failed_text}{limit})"
        launches = max(self.launches_total, sum(k.launches for k in self.kernels))
        return (f"Kernels ({shown}: {launches} profiled launch{'es' * (launches != 1)} of {of_names}{failed_text}, "
                f"identical launches grouped{limit})")

    @property
    def total_kernels(self) -> int:
        """Kernel records before ``top`` cut them (a report built without that count: those it holds)."""
        return max(self.kernels_total, len(self.kernels))

    def _rows_are(self) -> str:
        """What one record is: "kernel" (a timeline whose names each ran in one configuration), "launch
        configuration", "launch" (one profiled launch each) or "launch group" (identical profiled launches)."""
        if self.grouped:
            return "kernel" if self.total_kernels <= max(self.names_total, 1) else "launch configuration"
        if self.each_launch or self.launches_total <= self.total_kernels:  # one launch per record
            return "launch"
        return "launch group"

    def row_unit(self, n: int, more: bool = False) -> str:
        """``n`` kernel records in words ("3 launches", "3 more kernels", "2 launch configurations")."""
        word = self._rows_are()
        plural = "es" if word == "launch" else "s"
        return f"{n} {'more ' if more else ''}{word}{plural * (n != 1)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.meta.get("source"), "format": self.meta.get("format"), "tool": self.meta.get("tool"),
            "version": self.meta.get("version"), "card": None if self.card is None else self.card.key,
            "card_source": self.card_source, "counts": self.counts,
            "kernels_are": _ROWS_ARE[self._rows_are()], "kernels_shown": len(self.kernels),
            "kernels_total": self.total_kernels,
            "kernels": [k.to_dict() for k in self.kernels],
            "timeline": None if self.timeline is None else self.timeline.to_dict(),
            "ops": [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
                    for row in self.ops.to_dict("records")],
            "findings": [f.to_dict() for f in self.findings],
            "findings_total": max(self.findings_total, len(self.findings)),
            "ncu_rules_ranked": self.stored_ranked(limit=None), "unavailable": self.unavailable,
            "notes": self.notes,
            "ranges": None if self.range_rooflines is None else self.range_rooflines.to_dict(),
            "source_lines": [lines.to_dict() for lines in self.source_lines],
            "steps": None if self.steps is None else self.steps.to_dict(),
        }


#: The JSON's word for what one kernel record is (:meth:`Report._rows_are`).
_ROWS_ARE = {"kernel": "names", "launch configuration": "launch_configurations", "launch": "launches",
             "launch group": "launch_groups"}


def _int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _resolve_card(tables: TraceTables, card: Card | str | None) -> tuple[Card | None, str]:
    from iotrace.cards import lookup

    if isinstance(card, Card):
        return card, "given"
    if isinstance(card, str):
        return lookup(card), "--card"
    named = tables.devices["card"].dropna()
    if len(named):
        return lookup(str(named.iloc[0])), f"the file's device ({tables.devices['name'].dropna().iloc[0]})"
    return None, "none: the file names no CardBook card (pass --card NAME)"


def _device_values(tables: TraceTables, device: Any, column: str) -> pd.Series:
    """``column`` of the file's row for ``device`` (every device's where that one is unknown or absent), non-null."""
    devices = tables.devices
    if not len(devices) or column not in devices:
        return pd.Series(dtype=object)
    same = devices[devices["device"] == device] if device is not None and not pd.isna(device) else devices
    return (same if len(same) else devices)[column].dropna()


def _device_cc(tables: TraceTables, device: Any, card: Card | None) -> str | None:
    ccs = _device_values(tables, device, "cc")
    if len(ccs):
        return str(ccs.iloc[0])
    return card.cc if card is not None else None


def _device_sms(tables: TraceTables, device: Any, card: Card | None) -> tuple[int | None, str]:
    """The SM count of the device a kernel ran on (the file's device row, else the card's) and where it came from."""
    counts = _device_values(tables, device, "sm_count")
    counts = counts[counts > 0]  # a display adapter's row (0 SMs) says nothing
    if len(counts):
        return int(counts.iloc[0]), "the file's device"
    if card is not None and card.sm_count:
        return card.sm_count, f"card {card.key}"
    return None, ""


def _smem(tables: TraceTables, kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` (rows of ``tables.kernels``) with the shared-memory total of :func:`smem_columns`."""
    total = smem_columns(tables)["smem_bytes"][kernels.index.to_numpy()]  # the index is the row position
    return kernels.assign(smem_bytes=pd.Series(total, index=kernels.index).astype("Int64"))


def _select(tables: TraceTables, pattern: str | None, each_launch: bool) -> tuple[pd.DataFrame, bool]:
    """The kernel rows to report (:func:`group_launches`): an ncu report's launches in launch order, identical ones
    grouped; a timeline's launches per name and configuration by total time (and True there)."""
    kernels = tables.kernels
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidValueError(f"--kernel {pattern!r} is not a regular expression ({exc})",
                                    "e.g. --kernel 'gemm|attn'") from exc
        kernels = kernels[[bool(regex.search(str(n))) for n in kernels["name"]]]
        if kernels.empty:
            names = ", ".join(sorted({str(n)[:40] for n in tables.kernels["name"]})[:8])
            raise InvalidValueError(f"--kernel {pattern!r} matches none of the trace's kernels",
                                    f"the kernels include: {names}")
    timeline_rows = bool(tables.metrics.empty and kernels["start_ns"].notna().any())
    failed = unprofiled(kernels, tables.metrics, tables.meta.get("not_profiled", ()))
    groups = group_launches(_smem(tables, kernels), failed, by_time=timeline_rows, each_launch=each_launch)
    return groups, timeline_rows


def build_report(tables: TraceTables, *, kernel: str | None = None, card: Card | str | None = None,
                 ceilings: str = "auto", plugin: str | None = None, shape: Mapping[str, int] | None = None,
                 dtype: str | None = None, top: int = 50, each_launch: bool = False,
                 steps: StepOptions | None = None) -> Report:
    """Warp stalls, roofline, occupancy (per kernel) and the timeline of ``tables``, with findings.

    :param kernel: a regular expression; only kernels whose name it matches are reported.
    :param card: a CardBook card (or its name) for ceilings and compute capability; default: the file's device.
    :param ceilings: ``auto``, ``file`` or ``card`` (see :data:`CEILINGS`).
    :param plugin: treat the selected kernels as this iotrace kernel plugin; with ``shape`` (and ``dtype``) its
        cost model is put beside the counters.
    :param top: report at most this many kernel rows (launch groups, launch configurations by total time).
    :param each_launch: one row per launch instead of identical launches grouped (their counters averaged).
    :param steps: the model, machine and step marks for the step report (found without them where the trace marks
        steps; see :func:`iotrace.trace.reports.step_report.step_report`).
    :raises InvalidValueError: a bad regex, no matching kernel, or a bad option.
    """
    if ceilings not in CEILINGS:
        raise InvalidValueError(f"ceilings {ceilings!r} is not one of {', '.join(CEILINGS)}", "pick one of those")
    if top < 1:
        raise InvalidValueError(f"top={top} must be at least 1", "give --top 1 or more")
    resolved, card_source = _resolve_card(tables, card)
    every, grouped = _select(tables, kernel, each_launch)
    view = MetricView(group_metrics(tables.metrics, every))
    # Every row is analysed, so findings rank across the whole selection; ``top`` cuts the rows and findings shown.
    shown = set(every.head(top)["id"].astype(int))
    plugins: PluginMatch = match_plugins(every, resolved, plugin, shape, dtype)
    ids = [int(k) for k, profiled in zip(every["id"], every["profiled"], strict=True) if profiled]
    stalls, missing = stall_table(view, ids) if view else (stall_table(view, [])[0], [])
    missing = [m for m in missing if m.kernel_id is None or m.kernel_id in shown]
    vocab = vocabulary_of(tables)
    if vocab.amd:  # rocprof-compute's counters have no per-reason stalls: say what it collects instead
        missing = [amd_stalls_unavailable(m.kernel_id, True) if m.report == "warp stalls" else m for m in missing]
    if not view:
        missing.append(amd_stalls_unavailable(None, False) if vocab.amd else
                       Unavailable("warp stalls", "smsp__average_warps_issue_stalled_*_per_issue_active.ratio",
                                   "ncu --section WarpStateStats",
                                   detail="this trace has no hardware counters (profile the kernel with ncu)"))
    kernels: list[KernelReport] = []
    occ_rows, roof_rows = [], []
    findings: list[Finding] = []
    device_of: dict[int | None, tuple[str | None, int | None, str]] = {}
    stall_groups = {int(k): g for k, g in stalls.groupby("kernel_id", sort=False)} if len(stalls) else {}
    no_stalls = stalls.iloc[0:0]
    file_ns = every["total_ns"].sum(min_count=1)
    file_ns = None if pd.isna(file_ns) else float(file_ns)
    for row in every.to_dict("records"):
        kid, name = int(row["id"]), str(row["name"])
        duration = row["mean_ns"] if pd.notna(row["mean_ns"]) else None
        total = row["total_ns"] if pd.notna(row["total_ns"]) else None
        device = None if row["device"] is None or pd.isna(row["device"]) else int(row["device"])
        if device not in device_of:  # a handful of devices, many rows: each looked up once
            device_of[device] = (_device_cc(tables, device, resolved), *_device_sms(tables, device, resolved))
        cc, sms, sms_source = device_of[device]
        mine = stall_groups.get(kid, no_stalls)
        occ, point = None, None
        if row["profiled"]:
            occ, occ_missing = occupancy_row(pd.Series(row), view, cc,
                                             device_gfx(tables, device, resolved) if vocab.amd else None)
            point, roof_missing = roofline_point(view, kid, name, duration, resolved, ceilings,
                                                 plugins.models.get(kid),
                                                 file_ceilings=tables.meta.get("roofline_ceilings"))
            if kid in shown:
                missing += occ_missing + roof_missing
        origin = classify(name)
        # A launch that was not profiled has no advice: its stored results are rules failing on missing metrics.
        stored = stored_rules(tables, list(row["launch_ids"])) if row["profiled"] else []
        facts = KernelFacts(
            kid, name, int(row["launches_total"]), tuple(row["launch_ids"]), bool(row["profiled"]),
            tuple(_int(row[f"grid_{a}"]) for a in "xyz"), tuple(_int(row[f"block_{a}"]) for a in "xyz"),  # type: ignore
            total, file_ns, origin, cc, sms, sms_source, occ, point, primary(mine, kid),
            view.get(kid, "smsp__issue_active.avg.per_cycle_active") if view else None,
            view.get(kid, "launch__waves_per_multiprocessor") if view else None,
            plugins.params_of(kid), tuple(stored), vocab)
        kernel_findings = evaluate(facts)
        findings += kernel_findings
        stats = None if pd.isna(row["median_ns"]) else {s: float(row[f"{s}_ns"]) for s in ("min", "median", "max")}
        kernels.append(KernelReport(kid, name, [_int(row[f"grid_{a}"]) for a in "xyz"],
                                    [_int(row[f"block_{a}"]) for a in "xyz"], _int(row["registers_per_thread"]),
                                    duration, int(row["launches_total"]), total, occ,
                                    mine, point, plugins.plugin_of.get(kid),
                                    kernel_findings, _int(row["static_smem_bytes"]), _int(row["dynamic_smem_bytes"]),
                                    _int(row["smem_bytes"]), list(row["launch_ids"]), int(row["measured"]), stats,
                                    bool(row["profiled"]), int(row["config_index"]), int(row["configs_of_name"]),
                                    origin, stored, facts.share_pct))
        if occ is None or kid not in shown:
            continue
        occ_rows.append({"kernel_id": kid, "kernel": name, **{k: v for k, v in occ.to_dict().items()
                                                                if k not in ("limits",)}})
        if point is not None:
            for level in point.levels:
                roof_rows.append({"kernel_id": kid, "kernel": name, "basis": point.basis, "flops": point.flops,
                                  "duration_ns": point.duration_ns, **vars(level), "bound": point.bound,
                                  "pct_of_attainable": point.pct_of_attainable})
    capturing = capture_run(tables)
    stepped = step_report(tables, steps, capturing=capturing)  # first: an inference trace gets inference advice
    line, not_run = None, []
    timed = tables.kernels["start_ns"].notna().any() and tables.kernels["end_ns"].notna().any()
    if timed or not tables.ranges.empty:
        line = timeline(tables)
        missing += line.unavailable
        timeline_findings, not_run = evaluate_timeline(TimelineFacts(line, tables, inference=stepped is not None,
                                                                     capturing=capturing))
        findings += timeline_findings
    configs = _select(tables, kernel, False)[0] if each_launch else None
    unprofiled_ids = [i for ids, profiled in zip(every["launch_ids"], every["profiled"], strict=True)
                      if not profiled for i in ids]
    file_findings = evaluate_file(FileFacts(every, dict(tables.meta), configs, vocab,
                                            rule_results_of(tables, unprofiled_ids)))
    findings += file_findings
    if stepped is not None:
        findings += stepped.findings
    if capturing is not None:  # first, as a launch that was not profiled is: it qualifies every finding after it
        findings.append(Finding("profiling", capturing[0].upper() + capturing[1:] + ".", (),
                                "Record the profile after start-up (vLLM: start_profile() once the engine is up; "
                                "nsys --delay or a capture range), when the graphs replay.", "measured",
                                severity="info", rule="graph-capture"))
    # The top kernel's gain bounded by its time above its roofline floor where its rows' verdicts give one: only with
    # every finding drawn are the timeline's kernel and its counted rows side by side.
    ranked = rank(floor_bounded(findings))
    notes = list(tables.meta.get("notes", [])) + plugins.notes
    if any(f.rule == "not-profiled" for f in file_findings):  # the finding says what the reader's note says, first
        notes = [n for n in notes if not n.startswith(NOT_PROFILED_NOTE)]
    notes += capture_gaps(tables) + (not_run if line is not None else [])
    status = rules_status(tables) if tables.meta.get("format") == "ncu-rep" else None
    if status is not None and status not in notes:
        notes.append(status)
    if line is None and tables.meta.get("format") in ("ncu-rep", "ncu-csv"):
        notes.append("timeline: not applicable to an Nsight Compute report (it replays kernels one at a time); "
                     "use an nsys or torch.profiler trace")
    every_row, kernels = kernels, [k for k in kernels if k.kernel_id in shown]
    hot_lines, lines_missing = source_lines(tables, view, [(k.kernel_id, k.name, k.launch_ids) for k in kernels
                                                           if k.profiled])
    missing += lines_missing
    if vocab.amd:  # never an ncu or nsys command for an AMD trace
        missing = [dataclasses.replace(m, **dict(zip(("report", "metric", "collect", "detail"),
                                                      in_amd_terms(m.report, m.metric, m.collect, m.detail),
                                                      strict=True)))
                   for m in missing]
    ops = op_rooflines(tables, resolved) if tables.rows("ops") else pd.DataFrame(columns=OP_COLUMNS)
    return Report(tables.meta, resolved, card_source, kernels, stalls[stalls["kernel_id"].isin(list(shown))],
                  pd.DataFrame(occ_rows),
                  pd.DataFrame(roof_rows), line, ranked[:top], _dedupe(missing, tables.meta), notes, tables, view,
                  grouped, ops, len(every), int(every["name"].nunique()), int(every["launches_total"].sum()),
                  each_launch, range_rooflines=_range_rooflines(tables, resolved, ceilings, top, every, plugins,
                                                                (plugin, shape, dtype)), source_lines=hot_lines,
                  findings_total=len(ranked), every_row=every_row, steps=stepped)


def _range_rooflines(tables: TraceTables, card: Card | None, ceilings: str, top: int, every: pd.DataFrame,
                     plugins: PluginMatch, asked: tuple[Any, Any, Any]) -> RangeRooflines | None:
    """The per-range table; a plugin's cost model reaches every launch of the selection, not only the top rows."""
    plugin, shape, dtype = asked
    if shape is not None and len(every) > top:
        plugins = match_plugins(every, card, plugin, shape, dtype)
    return range_rooflines(tables, card, ceilings=ceilings, top=top, plugin_models=plugin_models_by_launch(every,
                                                                                                         plugins))


_SECTION = re.compile(r"--section (\w+)")


def _dedupe(missing: list[Unavailable], meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One line per missing metric, with how many kernels it affects; where the capture did collect the section
    named as the fix, the line says so instead of advising it again, and the capture's command is given."""
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for item in missing:
        key = (item.report, item.metric)
        entry = grouped.setdefault(key, {**item.to_dict(), "kernels": 0, "kernel_ids": []})
        entry["kernels"] += 1
        if item.kernel_id is not None:
            entry["kernel_ids"].append(item.kernel_id)
    captured = set(meta.get("sections") or ())
    command = meta.get("command")
    for entry in grouped.values():
        sections = _SECTION.findall(entry["collect"])
        if captured and sections and set(sections) <= captured:
            entry["collected"] = True
            entry["line"] = (f"{entry['report']} not available: needs metric {entry['metric']}, which the capture's "
                             f"{', '.join(sections)} section did not record on this GPU and Nsight Compute version "
                             f"({meta.get('version') or 'version not stated'}); collecting it again will not help")
        elif command and sections:
            entry["line"] += f" (the capture ran `{command}`)"
    return list(grouped.values())
