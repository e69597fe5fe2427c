"""The report as Markdown: tables and findings, with the figures as images beside the file when asked.

No cell is cut: a long kernel name is shown as its base name and a key (``cutlass::Kernel [1]``; the rule:
:mod:`iotrace.trace.render.names`), its full name listed once below the table or list that first shows it;
``names="full"`` keeps every name whole in the tables.
"""

from __future__ import annotations

import re
from pathlib import Path

from iotrace.trace.info import counts_text, smem_text
from iotrace.trace.render.amd import amd_card, amd_occupancy_text, is_amd_report
from iotrace.trace.render.fmt import (
    STORED_TITLE,
    WHERE_TITLE,
    bound_text,
    bytes_,
    duration,
    finding_where,
    gain_text,
    num,
    pct,
    short,
)
from iotrace.trace.render.names import NameKeys
from iotrace.trace.render.range_table import HEADERS as RANGE_HEADERS
from iotrace.trace.render.range_table import cells as range_cells
from iotrace.trace.render.range_table import legend as range_legend
from iotrace.trace.reports.diff import TRAFFIC, Diff
from iotrace.trace.reports.records import Finding
from iotrace.trace.reports.report import Report
from iotrace.trace.reports.stall_reasons import reason
from iotrace.trace.reports.stalls import primary

__all__ = ["diff_markdown", "md", "report_markdown"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#!~])")


def md(text: object, width: int | None = None) -> str:
    """Trace text made inert in Markdown: every character Markdown or HTML would interpret is escaped."""
    value = " ".join(str(text).split())
    if width is not None:
        value = short(value, width)
    return _SPECIAL.sub(r"\\\1", value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


def _legend(keys: NameKeys) -> list[str]:
    """The full names keyed since the last legend, as a list under the table or list that keyed them."""
    pending = keys.take()
    if not pending:
        return []
    return ["Kernel names in full:", "", *(f"- \\[{key}\\] {md(name)}" for key, name in pending), ""]


def _findings(findings: list[Finding], keys: NameKeys | None = None) -> list[str]:
    """Numbered, in the order given (a report's are ranked by the time they can save); the long kernel names they key
    listed after them."""
    keys = keys if keys is not None else NameKeys()
    out = []
    for number, f in enumerate(findings, 1):
        where = finding_where(f, keys.cell)
        out.append(f"{number}. **{md(f.report)}** {md(where) + ': ' if where else ''}{md(f.text)} *({f.basis})*")
        if f.try_next:
            out.append(f"   - next: {md(f.try_next)}")
        out.append(f"   - {md(gain_text(f))}" + (f": {md(f.gain.reasoning)}" if f.gain and f.gain.reasoning else ""))
        if f.evidence:
            out.append("   - evidence: " + md("; ".join(e.text() for e in f.evidence)))
    return [*out, "", *_legend(keys)]


def _where_time_goes(report: Report) -> list[str]:
    split = None if report.timeline is None else report.timeline.split
    if split is None:
        return []
    rows = [[str(r["device"]), duration(r["span_ns"]), pct(r["compute_share"] * 100),
             pct(r["communication_share"] * 100), pct(r["copies_share"] * 100), pct(r["idle_share"] * 100)]
            for r in split.devices.to_dict("records")]
    return [f"## {WHERE_TITLE[0]} ({WHERE_TITLE[1]})", "",
            *_table(["GPU", "span", "compute", "communication", "copies and sets", "idle"], rows)]


def _top_findings(report: Report, keys: NameKeys) -> list[str]:
    lines = [f"## {report.findings_title()}", "",
             *(_findings(report.findings, keys) if report.findings else ["none", ""])]
    stored = report.stored_ranked()
    if stored:
        lines += [f"## {STORED_TITLE[0]} ({STORED_TITLE[1]})", ""]
        lines += [f"{n}. \\#{row['kernel_id']} {md(keys.cell(row['kernel']))}: "
                  + ("" if row["saves_ns"] is None else f"~{duration(row['saves_ns'])} ") + md(row["text"])
                  for n, row in enumerate(stored, 1)] + ["", *_legend(keys)]
    return lines


def _range_rooflines(report: Report) -> list[str]:
    """The per-range roofline section (reports/range_roofline.py); nothing for a trace without ranges."""
    ranges = report.range_rooflines
    if ranges is None:
        return []
    rows = [[md(cell) for cell in range_cells(row)] for row in ranges.table.to_dict("records")]
    return [f"## {md(ranges.title())}", "", *_table(list(RANGE_HEADERS), rows),
            *[f"- {md(line)}" for line in range_legend(ranges)], ""]


def _source_lines(report: Report, details: int, keys: NameKeys) -> list[str]:
    """Per launch shown in detail, its top source lines (or SASS addresses) by stall samples; nothing without them."""
    detailed = {k.kernel_id for k in report.kernels[:details]}
    shown = [k for k in report.source_lines if k.kernel_id in detailed]
    if not shown:
        return []
    lines = ["## Stall samples by source line (measured, PC sampling)", ""]
    for k in shown:
        lines += [f"**#{k.kernel_id} {md(keys.cell(k.kernel))}**: {md(k.title())}", "", *_legend(keys)]
        lines += _table(["where", "samples", "share", "top reason", "of it", "SASS", "source"],
                        [[md(line.location), f"{line.samples:,}", pct(line.share * 100, 0),
                          md(reason(line.reason).label), pct(line.reason_share * 100, 0), md(line.sass or "—"),
                          md(line.text or "—")] for line in k.lines])
        if k.advice:
            lines += [f"*{md(k.advice)}*", ""]
    return lines


def report_markdown(report: Report, details: int = 5, images: dict[str, str] | None = None,
                    names: str | NameKeys = "short") -> str:
    """The report as Markdown; ``names``: ``short`` (long kernel names as base name and key, listed in full below) or
    ``full`` (whole in the tables)."""
    keys = NameKeys.of(names)
    meta = report.meta
    lines = ["# iotrace report", "", f"{md(meta.get('source'))} — {md(meta.get('format'))} ({md(meta.get('tool'))}, "
             f"version {md(meta.get('version') or 'not stated')}); card: "
             f"{md(report.card.name if report.card else 'none')} ({md(report.card_source)})", "",
             f"Counts: {md(counts_text(report.counts))}", "", *_where_time_goes(report), *_top_findings(report, keys)]
    rows = []
    for k in report.kernels:
        occ = k.occupancy
        stall = next((f"{reason(r).label} {s * 100:.0f}%" for r, s in k.stall_shares().items()
                      if not reason(r).not_a_stall), "—")
        roof = k.roofline
        rows.append([md(f"#{k.kernel_id} {keys.cell(k.name)}"), md(smem_text(k.smem_bytes)), duration(k.duration_ns),
                     str(k.launches) if k.profiled else f"{k.launches} (not profiled)",
                     pct(None if occ is None else occ.theoretical_pct), pct(None if occ is None else
                                                                             occ.theoretical_pct_file),
                     pct(None if occ is None else occ.achieved_pct), md(", ".join(occ.limiters) if occ else "—"),
                     md(stall), md(bound_text(roof))])
    lines += [f"## {md(report.kernels_title())}", ""]
    smem = "LDS/workgroup" if is_amd_report(report) else "smem/block"
    lines += _table(["kernel", smem, "time", "launches", "theoretical (iotrace)", "theoretical (file)",
                     "achieved", "limiter", "top stall", "bound"], rows)
    lines += _legend(keys)
    for name, path in (images or {}).items():
        lines += [f"![{md(name)}]({Path(path).name})", ""]
    for k in report.kernels[:details]:
        ranked = primary(k.stalls, k.kernel_id)
        roof = k.roofline
        amd, amd_occ = amd_card(k), amd_occupancy_text(k.occupancy)
        if not (len(ranked) or roof is not None or k.stored_rules or amd is not None):
            continue  # nothing to detail: no heading without a body
        lines += [f"### #{k.kernel_id} {md(keys.cell(k.name))}", "", *_legend(keys)]
        if amd is not None:  # an AMD kernel's card: VGPRs, SGPRs, LDS, wave size and its occupancy in waves per CU
            lines += [f"{md(amd)}.", ""] + ([f"Occupancy: {md(amd_occ)}.", ""] if amd_occ is not None else [])
        if len(ranked):
            lines += _table(["stall reason (measured)", "value", "share", "what it means"],
                            [[md(reason(r["reason"]).label), num(r["value"]), pct(r["share"] * 100),
                              md(reason(r["reason"]).meaning)]
                             for r in ranked.head(6).to_dict("records") if r["value"] > 0])
        if roof is not None:
            lines += [f"Roofline (FLOPs and bytes {roof.basis}): {num(roof.flops)} FLOPs, peak "
                      f"{num(roof.peak_flop_per_s)}FLOP/s ({md(roof.peak_source)}); bound **{md(bound_text(roof))}**, "
                      f"{pct(roof.pct_of_attainable)} of attainable at DRAM.", ""]
            lines += _table(["level", "bytes", "FLOP/byte", "ceiling", "ceiling from"],
                            [[lv.level.upper(), bytes_(lv.bytes), num(lv.intensity),
                              "—" if lv.ceiling_bytes_per_s is None else f"{num(lv.ceiling_bytes_per_s)}B/s",
                              md(lv.ceiling_source)] for lv in roof.levels])
        if k.stored_rules:
            lines += ["Nsight Compute's own analysis (rule results stored in the file):", ""]
            lines += [f"- {md(rule.text())}" for rule in k.stored_rules] + [""]
    if report.steps is not None:
        from iotrace.trace.render.steps import steps_markdown

        lines += steps_markdown(report.steps)
    line = report.timeline
    if line is not None:
        lines += ["## Timeline (measured)", ""]
        lines += _table(["share", "total", "launches", "kernel"],
                        [[pct(r["share_pct"]), duration(r["total_ns"]), str(r["launches"]), md(keys.cell(r["name"]))]
                         for r in line.top_kernels.to_dict("records")])
        lines += _legend(keys)
        for r in line.idle.to_dict("records"):
            lines += [f"GPU {r['device']}: idle {pct(r['idle_share'] * 100)} of {duration(r['span_ns'])}.", ""]
        graphs = line.graph_launches
        if graphs is not None:
            lines += ["### CUDA graph launches", ""]
            lines += _table(["quantity", "value"], [
                ["graph launches", str(graphs.launches)],
                ["distinct graphs", "—" if graphs.graphs is None else str(graphs.graphs)],
                ["kernels they ran", str(graphs.kernels)],
                ["GPU time of those kernels", duration(graphs.kernel_ns)],
                ["share of kernel time", "—" if graphs.kernel_share is None else pct(graphs.kernel_share * 100)],
                ["CPU time of the graph launch calls", duration(graphs.launch_cpu_ns)],
                ["… per kernel they ran", duration(graphs.cpu_ns_per_kernel)],
                ["CPU time per ordinary launch call", duration(graphs.direct_cpu_ns_per_kernel)],
                ["graph launch call → first kernel (median)", duration(graphs.first_kernel_latency_ns)]])
    if not report.ops.empty:
        lines += ["## Op rooflines (from input shapes; the plugins' cost models)", ""]
        lines += _table(["op", "shapes", "dtype", "calls", "kernel time", "FLOP/byte", "achieved", "% of attainable",
                         "bound"],
                        [[md(r["op"]), md(r["shapes"]), r["dtype"], str(r["calls"]), duration(r["kernel_ns"]),
                          num(r["intensity"]), f"{num(r['achieved_flop_per_s'])}FLOP/s", pct(r["pct_of_attainable"]),
                          r["bound"] or "—"] for r in report.ops.to_dict("records")])
        lines += [f"- {md(f)}" for f in dict.fromkeys(report.ops["formula"])] + [""]
    lines += _range_rooflines(report)
    lines += _source_lines(report, details, keys)
    if report.unavailable:
        lines += ["## Not available", ""] + [f"- {md(u['line'])}" for u in report.unavailable] + [""]
    return "\n".join(lines)


def diff_markdown(diff: Diff, names: str | NameKeys = "short") -> str:
    """The diff as Markdown; ``names`` as in :func:`report_markdown`."""
    keys = NameKeys.of(names)
    lines = ["# iotrace diff", "", f"before {md(diff.before.meta.get('source'))}, after "
             f"{md(diff.after.meta.get('source'))}", ""]
    for r in diff.kernels.to_dict("records"):
        lines += [f"## {md(keys.cell(r['before']))} → {md(keys.cell(r['after']))}", "", *_legend(keys),
                  f"matched by: {r['match']}", ""]
        rows = [["time per launch", duration(r["duration_ns_before"]), duration(r["duration_ns_after"]),
                 num(r["duration_ns_ratio"])]]
        rows += [[md(label), bytes_(r[f"{key}_before"]), bytes_(r[f"{key}_after"]), num(r[f"{key}_ratio"])]
                 for key, label in TRAFFIC.items() if r[f"{key}_before"] is not None or r[f"{key}_after"] is not None]
        lines += _table(["quantity", "before", "after", "after/before"], rows)
    return "\n".join([*lines, "## Findings", "", *_findings(diff.findings, keys)])
