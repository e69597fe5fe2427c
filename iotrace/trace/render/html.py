"""One self-contained, offline HTML file: plotly.js embedded once, every figure interactive, every name escaped.

Nothing is fetched when the file opens (no CDN, no fonts, no MathJax); text from the trace goes through
``html.escape`` before it reaches the page or a figure.
"""

from __future__ import annotations

import html
from functools import cache

from iotrace.trace.info import counts_text, smem_text
from iotrace.trace.render.amd import amd_card, amd_occupancy_text, is_amd_report
from iotrace.trace.render.figures import figures
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
)
from iotrace.trace.render.names import NAME_WIDTH, base_name
from iotrace.trace.render.range_table import HEADERS as RANGE_HEADERS
from iotrace.trace.render.range_table import cells as range_cells
from iotrace.trace.render.range_table import legend as range_legend
from iotrace.trace.reports.records import Finding
from iotrace.trace.reports.report import KernelReport, Report
from iotrace.trace.reports.stall_reasons import reason
from iotrace.trace.reports.stalls import primary

__all__ = ["report_html"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child, td.name { text-align: left; }
td.name { max-width: 420px; overflow-wrap: anywhere; }
.finding { margin: 0.6em 0; } .warning { border-left: 4px solid #d62728; padding-left: 8px; }
.info { border-left: 4px solid #1f77b4; padding-left: 8px; } .dim { color: #666; font-size: 0.9em; }
.na { color: #8a6d00; } code { background: #f4f4f4; padding: 0 3px; }
"""


@cache
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def e(value: object) -> str:
    return html.escape(str(value))


def _row(cells: list[str], header: bool = False, name_first: bool = True) -> str:
    tag = "th" if header else "td"
    out = []
    for i, cell in enumerate(cells):
        cls = ' class="name"' if i == 0 and name_first and not header else ""
        out.append(f"<{tag}{cls}>{cell}</{tag}>")
    return "<tr>" + "".join(out) + "</tr>"


def _findings(findings: list[Finding]) -> str:
    """Numbered, in the order given (a report's are ranked by the time they can save)."""
    parts = []
    for number, f in enumerate(findings, 1):
        # A long name as its base name, not cut: the "#id" before it leads to the kernel table's row, which has it all.
        where = finding_where(f, lambda name: name if len(name) <= NAME_WIDTH else base_name(name))
        evidence = "; ".join(ev.text() for ev in f.evidence)
        reasoning = f": {f.gain.reasoning}" if f.gain and f.gain.reasoning else ""
        parts.append(f'<div class="finding {f.severity}">{number}. <b>[{e(f.report)}]</b> '
                     f"{e(where + ': ' if where else '')}{e(f.text)}"
                     + (f"<div>next: {e(f.try_next)}</div>" if f.try_next else "")
                     + f'<div>{e(gain_text(f))}<span class="dim">{e(reasoning)}</span></div>'
                     f'<div class="dim">evidence: {e(evidence)} · {e(f.basis)}</div></div>')
    return "\n".join(parts)


def _kernel_table(report: Report) -> str:
    amd = is_amd_report(report)  # AMD's words: workgroups, VGPRs/SGPRs, LDS per workgroup
    rows = [_row(["kernel", "grid (workgroups)" if amd else "grid", "workgroup" if amd else "block",
                  "VGPRs, SGPRs" if amd else "regs", "LDS/workgroup" if amd else "shared memory/block", "time",
                  "launches",
                  "theoretical (iotrace / file)",
                  "achieved", "limiter", "top stall", "bound"], header=True)]
    for k in report.kernels:
        occ = k.occupancy
        stall = next((f"{reason(r).label} {s * 100:.0f}%" for r, s in k.stall_shares().items()
                      if not reason(r).not_a_stall), "—")
        roof = k.roofline
        rows.append(_row([
            e(f"#{k.kernel_id} {k.name}"), e("×".join("?" if v is None else str(v) for v in k.grid)),
            e("×".join("?" if v is None else str(v) for v in k.block)), e(_registers(k)), e(_smem(k)),
            e(duration(k.duration_ns)), e(k.launches_text()),
            e(f"{pct(None if occ is None else occ.theoretical_pct)} / "
              f"{pct(None if occ is None else occ.theoretical_pct_file)}"),
            e(pct(None if occ is None else occ.achieved_pct)), e(", ".join(occ.limiters) if occ else "—"), e(stall),
            e(bound_text(roof))]))
    return "<table>" + "".join(rows) + "</table>"


def _registers(k: KernelReport) -> str:
    """The registers cell: NVIDIA's registers per thread, or an AMD kernel's "128 arch + 384 accum VGPRs, 112 SGPRs"."""
    res = None if k.occupancy is None else k.occupancy.amd
    if res is None:
        return str(k.registers) if k.registers is not None else "—"
    known = ["?" if v is None else f"{v:,}" for v in (res.arch_vgpr, res.accum_vgpr, res.sgpr)]
    return f"{known[0]} arch" + (f" + {known[1]} accum" if res.accum_vgpr else "") + f" VGPRs, {known[2]} SGPRs"


def _smem(k: KernelReport) -> str:
    res = None if k.occupancy is None else k.occupancy.amd
    return k.smem_text() if res is None else smem_text(res.lds_per_workgroup)


def _details(report: Report, limit: int = 10) -> str:
    parts = []
    for k in report.kernels[:limit]:
        ranked = primary(k.stalls, k.kernel_id)
        amd, amd_occ = amd_card(k), amd_occupancy_text(k.occupancy)
        if not (len(ranked) or k.roofline is not None or k.stored_rules or amd is not None):
            continue  # nothing to detail: no heading without a body
        parts.append(f"<h3>#{k.kernel_id} {e(k.name)}</h3>")
        if amd is not None:  # an AMD kernel's card: VGPRs, SGPRs, LDS, wave size and its occupancy in waves per CU
            parts.append(f"<p>{e(amd)}</p>" + ("" if amd_occ is None else f"<p>Occupancy: {e(amd_occ)}</p>"))
        if len(ranked):
            rows = [_row(["stall reason (measured)", "value", "share", "what it means", "try"], header=True)]
            for r in ranked.head(6).to_dict("records"):
                if r["value"] > 0:
                    info = reason(str(r["reason"]))
                    rows.append(_row([e(info.label), e(num(r["value"])), e(pct(r["share"] * 100)), e(info.meaning),
                                      e(info.knob)]))
            parts.append("<table>" + "".join(rows) + "</table>")
        roof = k.roofline
        if roof is not None:
            rows = [_row(["level", "bytes", "FLOP/byte", "ceiling", "ceiling from", "bytes from"], header=True)]
            for lv in roof.levels:
                rows.append(_row([e(lv.level.upper()), e(bytes_(lv.bytes)), e(num(lv.intensity)),
                                  e("—" if lv.ceiling_bytes_per_s is None else f"{num(lv.ceiling_bytes_per_s)}B/s"),
                                  e(lv.ceiling_source), e(lv.bytes_source)]))
            parts.append(f"<p>Roofline (FLOPs and bytes {e(roof.basis)}): {e(num(roof.flops))} FLOPs "
                         f"({e(roof.flops_source)}); peak {e(num(roof.peak_flop_per_s))}FLOP/s from "
                         f"{e(roof.peak_source)}; bound <b>{e(bound_text(roof))}</b>, "
                         f"{e(pct(roof.pct_of_attainable))} of attainable at DRAM.</p>"
                         "<table>" + "".join(rows) + "</table>")
        if k.stored_rules:
            parts.append("<p>Nsight Compute's own analysis (rule results stored in the file):</p><ul>"
                         + "".join(f"<li>{e(rule.text())}</li>" for rule in k.stored_rules) + "</ul>")
    return "\n".join(parts)


def _source_lines(report: Report, limit: int = 10) -> list[str]:
    """Per launch (the first ``limit`` rows), its top source lines or SASS addresses by stall samples."""
    detailed = {k.kernel_id for k in report.kernels[:limit]}
    parts = []
    for k in report.source_lines:
        if k.kernel_id not in detailed:
            continue
        rows = [_row(["where", "samples", "share", "top reason", "of it", "SASS", "source"], header=True)]
        rows += [_row([e(line.location), e(f"{line.samples:,}"), e(pct(line.share * 100, 0)),
                       e(reason(line.reason).label), e(pct(line.reason_share * 100, 0)), e(line.sass or "—"),
                       e(line.text or "—")]) for line in k.lines]
        parts += [f"<h3>#{e(k.kernel_id)} {e(k.kernel)}: {e(k.title())}</h3>", "<table>" + "".join(rows) + "</table>"]
        if k.advice:
            parts.append(f'<p class="dim">{e(k.advice)}</p>')
    return ["<h2>Stall samples by source line (measured, PC sampling)</h2>", *parts] if parts else []


def _page(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{_STYLE}</style>\n<script>{_plotly_js()}</script></head>\n<body>\n{body}\n</body></html>\n")


def _range_rooflines(report: Report) -> list[str]:
    """The per-range roofline section (reports/range_roofline.py), each range's path on hover; nothing for a trace
    without ranges."""
    ranges = report.range_rooflines
    if ranges is None:
        return []
    rows = []
    for row in ranges.table.to_dict("records"):
        first, *rest = range_cells(row)
        path = row["path"] if isinstance(row["path"], str) else first
        rows.append(_row([f'<span title="{e(path)}">{e(first)}</span>', *(e(c) for c in rest)]))
    return [f"<h2>{e(ranges.title())}</h2>",
            "<table>" + _row([e(h) for h in RANGE_HEADERS], header=True) + "".join(rows) + "</table>",
            '<ul class="dim">' + "".join(f"<li>{e(line)}</li>" for line in range_legend(ranges)) + "</ul>"]


#: The op-roofline table's columns, in the HTML and Markdown reports.
OP_HEADERS = ("op", "shapes", "dtype", "calls", "kernel time", "FLOP/byte", "achieved", "% of attainable", "bound")


def _where_time_goes(report: Report) -> str:
    split = None if report.timeline is None else report.timeline.split
    if split is None:
        return ""
    rows = [_row(["GPU", "span", "compute", "communication", "copies and sets", "idle"], header=True)]
    rows += [_row([e(r["device"]), e(duration(r["span_ns"])), e(pct(r["compute_share"] * 100)),
                   e(pct(r["communication_share"] * 100)), e(pct(r["copies_share"] * 100)),
                   e(pct(r["idle_share"] * 100))], name_first=False) for r in split.devices.to_dict("records")]
    return f"<h2>{e(WHERE_TITLE[0])} ({e(WHERE_TITLE[1])})</h2><table>" + "".join(rows) + "</table>"


def _stored(report: Report) -> str:
    """Nsight Compute's stored global estimates, ranked across the file; nothing where the file has none."""
    stored = report.stored_ranked()
    if not stored:
        return ""
    items = "".join(f"<li>#{row['kernel_id']} {e(row['kernel'])}: "
                    + ("" if row["saves_ns"] is None else f"~{e(duration(row['saves_ns']))} ")
                    + f"{e(row['text'])}</li>"
                    for row in stored)
    return f"<h2>{e(STORED_TITLE[0])} ({e(STORED_TITLE[1])})</h2><ol>{items}</ol>"


def report_html(report: Report) -> str:
    """The whole report as one HTML page that needs no network."""
    meta = report.meta
    body = [f"<h1>iotrace report</h1><p><code>{e(meta.get('source'))}</code><br>{e(meta.get('format'))} "
            f"({e(meta.get('tool'))}, version {e(meta.get('version') or 'not stated')})<br>card: "
            f"{e(report.card.name if report.card else 'none')} — {e(report.card_source)}<br>counts: "
            f"{e(counts_text(report.counts))}</p>",
            _where_time_goes(report), f"<h2>{e(report.findings_title())}</h2>",
            _findings(report.findings) or "<p>none</p>", _stored(report),
            f"<h2>{e(report.kernels_title())}</h2>", _kernel_table(report), "<h2>Figures</h2>"]
    for n, (name, fig) in enumerate(figures(report)):
        body.append(f'<div class="figure" id="{e(name)}">'
                    + fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{n}",
                                  config={"displaylogo": False, "responsive": True}) + "</div>")
    graphs = report.timeline.graph_launches if report.timeline is not None else None
    if graphs is not None:  # the timeline's CUDA graph launches (reports/timeline.py, GraphLaunches)
        rows = [("graph launches", str(graphs.launches)),
                ("distinct graphs", "—" if graphs.graphs is None else str(graphs.graphs)),
                ("kernels they ran", str(graphs.kernels)), ("GPU time of those kernels", duration(graphs.kernel_ns)),
                ("share of kernel time", "—" if graphs.kernel_share is None else pct(graphs.kernel_share * 100)),
                ("CPU time of the graph launch calls", duration(graphs.launch_cpu_ns)),
                ("… per kernel they ran", duration(graphs.cpu_ns_per_kernel)),
                ("CPU time per ordinary launch call", duration(graphs.direct_cpu_ns_per_kernel)),
                ("graph launch call → first kernel (median)", duration(graphs.first_kernel_latency_ns))]
        body += ["<h2>CUDA graph launches (measured)</h2>",
                 "<table>" + "".join(_row([e(a), e(b)], name_first=False) for a, b in rows) + "</table>"]
    if not report.ops.empty:
        body += ["<h2>Op rooflines (from input shapes; FLOPs and bytes from the plugins' cost models)</h2>",
                 "<table>" + _row([e(h) for h in OP_HEADERS], header=True) + "".join(
                     _row([e(r["op"]), e(r["shapes"]), e(r["dtype"]), e(r["calls"]), e(duration(r["kernel_ns"])),
                           e(num(r["intensity"])), e(f"{num(r['achieved_flop_per_s'])}FLOP/s"),
                           e(pct(r["pct_of_attainable"])), e(r["bound"] or "—")])
                     for r in report.ops.to_dict("records")) + "</table>",
                 "<ul>" + "".join(f"<li>{e(f)}</li>" for f in dict.fromkeys(report.ops["formula"])) + "</ul>"]
    body += _range_rooflines(report)
    body += _source_lines(report)
    if report.unavailable:
        body.append("<h2>Not available</h2><ul>" + "".join(
            f'<li class="na">{e(u["line"])}' + (f" ({e(report.row_unit(u['kernels']))})" if u["kernels"] > 1 else "")
            + "</li>"
            for u in report.unavailable) + "</ul>")
    body += ["<h2>Kernel details</h2>", _details(report)]
    if report.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    return _page(f"iotrace report — {meta.get('source')}", "\n".join(body))
