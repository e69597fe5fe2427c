"""``build_report``: every analysis of one trace, per kernel, with findings — the object renderers draw.

Each analysis lives in its own module and returns a table plus findings; this module only selects kernels,
resolves the card and assembles. Nothing here prints or plots.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from iotrace.cards import Card
from iotrace.errors import InvalidValueError
from iotrace.trace.info import smem_columns, smem_text
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.occupancy import OccupancyRow, occupancy_findings, occupancy_row
from iotrace.trace.reports.op_roofline import OP_COLUMNS, op_rooflines
from iotrace.trace.reports.plugin_costs import PluginMatch, match_plugins
from iotrace.trace.reports.records import Finding, Unavailable
from iotrace.trace.reports.roofline import RooflinePoint, roofline_findings, roofline_point
from iotrace.trace.reports.stalls import primary, stall_findings, stall_table
from iotrace.trace.reports.timeline import Timeline, timeline, timeline_findings
from iotrace.trace.tables import TraceTables

__all__ = ["CEILINGS", "KernelReport", "Report", "build_report"]

#: Where roofline ceilings come from: the file's own *.peak_sustained where it has them, else the card (auto).
CEILINGS = ("auto", "file", "card")


@dataclass
class KernelReport:
    """Everything iotrace says about one kernel (one profiled launch, or one kernel name of a timeline)."""

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
    #: Shared memory per block of the launch this record describes (None where the file lacks it); the total is
    #: static + dynamic where both are known, else the file's own total (Kineto records only that).
    static_smem_bytes: int | None = None
    dynamic_smem_bytes: int | None = None
    smem_bytes: int | None = None
    #: {"min", "max"} of the total over every launch this record stands for (a timeline's kernel name groups
    #: launches whose shared memory may differ); None where no launch records it.
    smem_bytes_range: dict[str, int] | None = None

    def smem_text(self) -> str:
        """Shared memory per block for a person: "148,992 B (0 static + 148,992 dynamic)", "87,568 B" (the file
        records only the total), "?"; where the launches it stands for differ, their range too."""
        if self.smem_bytes is None and self.smem_bytes_range is None:
            return "?"
        text = smem_text(self.smem_bytes)
        if self.static_smem_bytes is not None and self.dynamic_smem_bytes is not None:
            text += f" ({self.static_smem_bytes:,} static + {self.dynamic_smem_bytes:,} dynamic)"
        span = self.smem_bytes_range
        if span is not None and span["min"] != span["max"]:
            text += f"; {smem_text(span['min'], span['max'])} over its launches"
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
            "smem_bytes_range": self.smem_bytes_range, "duration_ns": self.duration_ns, "launches": self.launches,
            "total_ns": self.total_ns, "plugin": self.plugin,
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
                "flops_source": roof.flops_source, "peak_flop_per_s": roof.peak_flop_per_s,
                "peak_source": roof.peak_source, "ridge": roof.ridge, "achieved_flop_per_s": roof.achieved_flop_per_s,
                "levels": [vars(lv) for lv in roof.levels], "sol": roof.sol,
                "model": None if roof.model is None else vars(roof.model)},
            "findings": [f.to_dict() for f in self.findings],
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
    #: True where each kernel record is one kernel name (a timeline: its launches grouped), False where each is
    #: one profiled launch (an ncu report, a CSV of launches).
    grouped: bool = False
    #: Op rooflines (:func:`iotrace.trace.reports.op_roofline.op_rooflines`): empty without shaped ops in the trace.
    ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: How many kernel records the selection had before ``top`` cut it (``len(kernels)`` when nothing was cut).
    kernels_total: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """The trace's counts, the same as ``iotrace info`` reports (:meth:`TraceTables.counts`)."""
        return self.tables.counts()

    def kernels_title(self) -> str:
        """What the kernel table holds, in words: "Kernels (5 profiled launches of 3 kernels)", "Kernels (10
        kernels by total time)" — never launches called kernels — and, when ``top`` cut it, how many of how many."""
        n, total = len(self.kernels), self.total_kernels
        limit = f"; --top {total} shows all" if total > n else ""
        if self.grouped:
            shown = f"showing {n} of {total} kernels" if limit else f"{n} kernel{'s' * (n != 1)}"
            return f"Kernels ({shown} by total time{limit})"
        names = len({k.name for k in self.kernels})
        shown = f"showing {n} of {total} profiled launches" if limit else f"{n} profiled launch{'es' * (n != 1)}"
        return f"Kernels ({shown} of {names} kernel{'s' * (names != 1)}{limit})"

    @property
    def total_kernels(self) -> int:
        """Kernel records before ``top`` cut them (a report built without that count: those it holds)."""
        return max(self.kernels_total, len(self.kernels))

    def row_unit(self, n: int, more: bool = False) -> str:
        """``n`` kernel records in words ("3 launches", "3 more kernels"): launches, or kernels of a timeline."""
        word = f"kernel{'s' * (n != 1)}" if self.grouped else f"launch{'es' * (n != 1)}"
        return f"{n} {'more ' if more else ''}{word}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.meta.get("source"), "format": self.meta.get("format"), "tool": self.meta.get("tool"),
            "version": self.meta.get("version"), "card": None if self.card is None else self.card.key,
            "card_source": self.card_source, "counts": self.counts, "kernels_are": "names" if self.grouped else
            "launches", "kernels_shown": len(self.kernels),
            "kernels_total": self.total_kernels,
            "kernels": [k.to_dict() for k in self.kernels],
            "timeline": None if self.timeline is None else self.timeline.to_dict(),
            "ops": [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
                    for row in self.ops.to_dict("records")],
            "findings": [f.to_dict() for f in self.findings], "unavailable": self.unavailable,
            "notes": self.notes,
        }


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


def _device_cc(tables: TraceTables, device: Any, card: Card | None) -> str | None:
    devices = tables.devices
    if len(devices):
        same = devices[devices["device"] == device] if device is not None and not pd.isna(device) else devices
        ccs = (same if len(same) else devices)["cc"].dropna()
        if len(ccs):
            return str(ccs.iloc[0])
    return card.cc if card is not None else None


def _smem(tables: TraceTables, kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` (rows of ``tables.kernels``) with the shared-memory total of :func:`smem_columns`."""
    total = smem_columns(tables)["smem_bytes"][kernels.index.to_numpy()]  # the index is the row position
    return kernels.assign(smem_bytes=pd.Series(total, index=kernels.index).astype("Int64"))


def _select(tables: TraceTables, pattern: str | None) -> tuple[pd.DataFrame, bool]:
    """The kernels to report: every profiled launch of an ncu report; the top names by time of a timeline (and
    True there: each row then stands for every launch of its name)."""
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
    kernels = _smem(tables, kernels)
    kernels = kernels.assign(total_ns=kernels["duration_ns"], mean_ns=kernels["duration_ns"] /
                             kernels["launches"].clip(lower=1), launches_total=kernels["launches"],
                             smem_min=kernels["smem_bytes"], smem_max=kernels["smem_bytes"])
    if tables.metrics.empty and kernels["start_ns"].notna().any():
        # A timeline: one row per kernel name (its longest launch represents the launch configuration).
        grouped = kernels.groupby("name", sort=False).agg(total_ns=("duration_ns", "sum"),
                                                          launches_total=("launches", "sum"),
                                                          smem_min=("smem_bytes", "min"),
                                                          smem_max=("smem_bytes", "max"))
        order = kernels.sort_values("duration_ns", ascending=False, kind="stable").drop_duplicates("name")
        order = order.drop(columns=["total_ns", "launches_total", "smem_min", "smem_max"]).join(grouped, on="name")
        order["mean_ns"] = order["total_ns"] / order["launches_total"].clip(lower=1)
        return order.sort_values("total_ns", ascending=False, kind="stable"), True
    return kernels, False


def build_report(tables: TraceTables, *, kernel: str | None = None, card: Card | str | None = None,
                 ceilings: str = "auto", plugin: str | None = None, shape: Mapping[str, int] | None = None,
                 dtype: str | None = None, top: int = 50) -> Report:
    """Warp stalls, roofline, occupancy (per kernel) and the timeline of ``tables``, with findings.

    :param kernel: a regular expression; only kernels whose name it matches are reported.
    :param card: a CardBook card (or its name) for ceilings and compute capability; default: the file's device.
    :param ceilings: ``auto``, ``file`` or ``card`` (see :data:`CEILINGS`).
    :param plugin: treat the selected kernels as this iotrace kernel plugin; with ``shape`` (and ``dtype``) its
        cost model is put beside the counters.
    :param top: report at most this many kernels (profiled launches, or kernel names by total time).
    :raises InvalidValueError: a bad regex, no matching kernel, or a bad option.
    """
    if ceilings not in CEILINGS:
        raise InvalidValueError(f"ceilings {ceilings!r} is not one of {', '.join(CEILINGS)}", "pick one of those")
    if top < 1:
        raise InvalidValueError(f"top={top} must be at least 1", "give --top 1 or more")
    resolved, card_source = _resolve_card(tables, card)
    view = MetricView(tables.metrics)
    every, grouped = _select(tables, kernel)
    selected = every.head(top)
    plugins: PluginMatch = match_plugins(selected, resolved, plugin, shape, dtype)
    ids = [int(k) for k in selected["id"]]
    stalls, missing = stall_table(view, ids) if view else (stall_table(view, [])[0], [])
    if not view:
        missing.append(Unavailable("warp stalls", "smsp__average_warps_issue_stalled_*_per_issue_active.ratio",
                                   "ncu --section WarpStateStats",
                                   detail="this trace has no hardware counters (profile the kernel with ncu)"))
    kernels: list[KernelReport] = []
    occ_rows, roof_rows = [], []
    findings: list[Finding] = []
    for row in selected.to_dict("records"):
        kid, name = int(row["id"]), str(row["name"])
        series = pd.Series(row)
        occ, occ_missing = occupancy_row(series, view, _device_cc(tables, row["device"], resolved))
        duration = row["mean_ns"] if pd.notna(row["mean_ns"]) else None
        point, roof_missing = roofline_point(view, kid, name, duration, resolved, ceilings, plugins.models.get(kid))
        missing += occ_missing + roof_missing
        mine = stalls[stalls["kernel_id"] == kid]
        kernel_findings = (stall_findings(stalls, view, kid, name, plugins.params_of(kid))
                           + ([] if point is None else roofline_findings(point)) + occupancy_findings(occ))
        findings += kernel_findings
        kernels.append(KernelReport(kid, name, [_int(row[f"grid_{a}"]) for a in "xyz"],
                                    [_int(row[f"block_{a}"]) for a in "xyz"], _int(row["registers_per_thread"]),
                                    duration, int(row["launches_total"]),
                                    row["total_ns"] if pd.notna(row["total_ns"]) else None, occ, mine, point,
                                    plugins.plugin_of.get(kid), kernel_findings, _int(row["static_smem_bytes"]),
                                    _int(row["dynamic_smem_bytes"]), _int(row["smem_bytes"]),
                                    None if _int(row["smem_min"]) is None else
                                    {"min": _int(row["smem_min"]), "max": _int(row["smem_max"])}))
        occ_rows.append({"kernel_id": kid, "kernel": name, **{k: v for k, v in occ.to_dict().items()
                                                                if k not in ("limits",)}})
        if point is not None:
            for level in point.levels:
                roof_rows.append({"kernel_id": kid, "kernel": name, "basis": point.basis, "flops": point.flops,
                                  "duration_ns": point.duration_ns, **vars(level), "bound": point.bound,
                                  "pct_of_attainable": point.pct_of_attainable})
    line = None
    timed = tables.kernels["start_ns"].notna().any() and tables.kernels["end_ns"].notna().any()
    if timed or not tables.ranges.empty:
        line = timeline(tables)
        missing += line.unavailable
        findings += timeline_findings(line)
    notes = list(tables.meta.get("notes", [])) + plugins.notes
    if line is None and tables.meta.get("format") in ("ncu-rep", "ncu-csv"):
        notes.append("timeline: not applicable to an Nsight Compute report (it replays kernels one at a time); "
                     "use an nsys or torch.profiler trace")
    ops = op_rooflines(tables, resolved) if tables.rows("ops") else pd.DataFrame(columns=OP_COLUMNS)
    return Report(tables.meta, resolved, card_source, kernels, stalls, pd.DataFrame(occ_rows),
                  pd.DataFrame(roof_rows), line, findings, _dedupe(missing), notes, tables, view, grouped, ops,
                  len(every))


def _dedupe(missing: list[Unavailable]) -> list[dict[str, Any]]:
    """One line per missing metric, with how many kernels it affects."""
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for item in missing:
        key = (item.report, item.metric)
        entry = grouped.setdefault(key, {**item.to_dict(), "kernels": 0, "kernel_ids": []})
        entry["kernels"] += 1
        if item.kernel_id is not None:
            entry["kernel_ids"].append(item.kernel_id)
    return list(grouped.values())
