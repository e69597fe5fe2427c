"""Diff of two traces (before / after): per-kernel deltas of time, stalls, bytes and occupancy, matched by name.

Kernels are matched by their full name first, then by the function name without its parameter list and template
arguments, and finally, when exactly one kernel is left on each side, with each other (a renamed kernel:
``rgb_increase_brightness`` → ``rgb_increase_brightness_coalesced``); the match column says which rule paired them.
Launches of one name are averaged. Every value is measured unless the report that produced it says modelled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from iotrace.trace.reports.records import Evidence, Finding
from iotrace.trace.reports.report import Report
from iotrace.trace.reports.stall_reasons import reason

__all__ = ["CHANGE", "TRAFFIC", "Diff", "diff_reports"]

#: Memory traffic per kernel: what the roofline reads per level, plus the L1↔L2 crossbar bytes ncu's memory chart
#: (MemoryWorkloadAnalysis_Chart) stores.
TRAFFIC = {
    "dram_bytes": "DRAM bytes",
    "l2_bytes": "L2 bytes",
    "l1_bytes": "L1 bytes",
    "l1_to_l2_write_bytes": "L1→L2 write bytes (l1tex__m_l1tex2xbar_write_bytes.sum)",
    "l2_to_l1_read_bytes": "L2→L1 read bytes (l1tex__m_xbar2l1tex_read_bytes.sum)",
}
_XBAR = {"l1_to_l2_write_bytes": "l1tex__m_l1tex2xbar_write_bytes.sum",
         "l2_to_l1_read_bytes": "l1tex__m_xbar2l1tex_read_bytes.sum"}

#: A change smaller than 5% is reported but not turned into a finding: run-to-run noise of kernel timings on one
#: machine is a few percent (ncu's clock control narrows it; see Kernel Profiling Guide, "Clock Control").
CHANGE = 0.05

_BASE = re.compile(r"^(?:void\s+)?([A-Za-z_][\w:]*)")


def base_name(name: str) -> str:
    """``void warptiling<128, 128>(int, …)`` → ``warptiling``."""
    match = _BASE.match(name.strip())
    return match.group(1) if match else name


@dataclass
class Diff:
    before: Report
    after: Report
    kernels: pd.DataFrame
    stalls: pd.DataFrame
    findings: list[Finding]
    unmatched_before: list[str]
    unmatched_after: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before.meta.get("source"), "after": self.after.meta.get("source"),
                "kernels": self.kernels.to_dict("records"), "stalls": self.stalls.to_dict("records"),
                "findings": [f.to_dict() for f in self.findings], "unmatched_before": self.unmatched_before,
                "unmatched_after": self.unmatched_after}


def _per_name(report: Report) -> pd.DataFrame:
    rows = []
    for k in report.kernels:
        roof = k.roofline
        row: dict[str, Any] = {"name": k.name, "duration_ns": k.duration_ns, "launches": k.launches}
        for level in ("dram", "l2", "l1"):
            lv = roof.level(level) if roof is not None else None
            row[f"{level}_bytes"] = None if lv is None else lv.bytes
        for key, metric in _XBAR.items():
            row[key] = report.view.get(k.kernel_id, metric)
        occ = k.occupancy
        row["theoretical_pct"] = None if occ is None else occ.theoretical_pct
        row["achieved_pct"] = None if occ is None else occ.achieved_pct
        row["kernel_id"] = k.kernel_id
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    numeric = [c for c in frame.columns if c not in ("name", "kernel_id", "launches")]
    # A row stands for its launches (identical launches, or one launch configuration): the per-name figure is the
    # mean over launches, each value weighted by its row's launches where it is known.
    values = frame[numeric].astype(float)
    weights = values.notna().mul(frame["launches"].clip(lower=1), axis=0)
    grouped = frame.groupby("name", sort=False)
    out = (values.fillna(0.0) * weights).groupby(frame["name"], sort=False).sum() / weights.groupby(
        frame["name"], sort=False).sum().replace(0, float("nan"))
    out["launches"] = grouped["launches"].sum()
    out["kernel_id"] = grouped["kernel_id"].first()
    return out.reset_index()


def _pairs(before: pd.DataFrame, after: pd.DataFrame) -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    left = list(before["name"]) if len(before) else []
    right = list(after["name"]) if len(after) else []
    pairs = [(n, n, "name") for n in left if n in right]
    left = [n for n in left if n not in {p[0] for p in pairs}]
    right = [n for n in right if n not in {p[1] for p in pairs}]
    for n in list(left):
        same = [m for m in right if base_name(m) == base_name(n)]
        if len(same) == 1:
            pairs.append((n, same[0], "function name"))
            left.remove(n)
            right.remove(same[0])
    if len(left) == 1 and len(right) == 1:
        pairs.append((left[0], right[0], "only kernel left on each side"))
        left, right = [], []
    return pairs, left, right


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b is None or pd.isna(a) or pd.isna(b) or a == 0:
        return None
    return float(b) / float(a)


def diff_reports(before: Report, after: Report) -> Diff:
    """Per-kernel deltas between two reports; kernels on only one side are listed, not dropped silently."""
    left, right = _per_name(before), _per_name(after)
    pairs, only_before, only_after = _pairs(left, right)
    rows, stall_rows, findings = [], [], []
    for name_b, name_a, how in pairs:
        b = left[left["name"] == name_b].iloc[0]
        a = right[right["name"] == name_a].iloc[0]
        row: dict[str, Any] = {"before": name_b, "after": name_a, "match": how}
        for column in ("duration_ns", *TRAFFIC, "theoretical_pct", "achieved_pct"):
            vb = None if pd.isna(b[column]) else float(b[column])
            va = None if pd.isna(a[column]) else float(a[column])
            row[f"{column}_before"], row[f"{column}_after"] = vb, va
            row[f"{column}_ratio"] = _ratio(vb, va)
        rows.append(row)
        shares_b = next(k for k in before.kernels if k.kernel_id == b["kernel_id"]).stall_shares()
        shares_a = next(k for k in after.kernels if k.kernel_id == a["kernel_id"]).stall_shares()
        for key in dict.fromkeys([*shares_b, *shares_a]):
            stall_rows.append({"before": name_b, "after": name_a, "reason": key, "share_before": shares_b.get(key),
                               "share_after": shares_a.get(key),
                               "delta": (shares_a.get(key) or 0.0) - (shares_b.get(key) or 0.0)})
        findings += _findings(row, name_a)
    stalls = pd.DataFrame(stall_rows, columns=["before", "after", "reason", "share_before", "share_after", "delta"])
    for item in stall_rows:
        if abs(item["delta"]) >= 0.10 and not reason(item["reason"]).not_a_stall:
            findings.append(Finding("diff", f"{reason(item['reason']).label} stalls went from "
                                            f"{(item['share_before'] or 0) * 100:.0f}% to "
                                            f"{(item['share_after'] or 0) * 100:.0f}% of cycles.",
                                    (Evidence("share delta", round(item["delta"], 3), ">= 0.10"),), "", "measured",
                                    None, item["after"], "info"))
    return Diff(before, after, pd.DataFrame(rows), stalls, findings, only_before, only_after)


def _findings(row: dict[str, Any], kernel: str) -> list[Finding]:
    out = []
    ratio = row["duration_ns_ratio"]
    if ratio is not None and abs(ratio - 1) >= CHANGE:
        out.append(Finding("diff", f"Time {'fell' if ratio < 1 else 'rose'} {abs(1 - ratio) * 100:.0f}%: "
                                   f"{row['duration_ns_before'] / 1e3:.2f} → {row['duration_ns_after'] / 1e3:.2f} µs.",
                           (Evidence("duration ratio", round(ratio, 3), f"|change| >= {CHANGE:.0%}"),), "",
                           "measured", None, kernel, "info"))
    for key, label in TRAFFIC.items():
        r = row[f"{key}_ratio"]
        if r is not None and abs(r - 1) >= CHANGE:
            out.append(Finding("diff", f"{label.split(' (')[0]} changed {r:.2f}×: {_bytes(row[f'{key}_before'])} → "
                                       f"{_bytes(row[f'{key}_after'])}.",
                               (Evidence(key, round(r, 3), f"|change| >= {CHANGE:.0%}"),), "", "measured", None,
                               kernel, "info"))
    return out


def _bytes(value: float | None) -> str:
    if value is None:
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"
