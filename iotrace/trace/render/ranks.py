"""The report across ranks (reports/ranks_report.py) for a terminal, Markdown, HTML and JSON.

The cells are made once here as plain text (:func:`summary_cells`, :func:`kernel_cells`, :func:`straggler_lines`)
and each format escapes them its own way, with the single-trace renderers' helpers, so the three agree.
"""

from __future__ import annotations

import os

import pandas as pd
from rich.console import Console
from rich.markup import escape

from iotrace.trace.render.fmt import duration, pct
from iotrace.trace.render.html import _findings as html_findings
from iotrace.trace.render.html import _page, _row, e
from iotrace.trace.render.jsonout import dumps
from iotrace.trace.render.markdown import _findings as md_findings
from iotrace.trace.render.markdown import _legend as md_legend
from iotrace.trace.render.markdown import _table as md_table
from iotrace.trace.render.markdown import md
from iotrace.trace.render.names import NameKeys
from iotrace.trace.render.terminal import _column, _findings, _kernel, _legend, _table
from iotrace.trace.reports.ranks_report import STRAGGLER_RULE, RankReport

__all__ = [
    "SIDE_BY_SIDE",
    "kernel_cells",
    "kernel_headers",
    "print_ranks",
    "ranks_html",
    "ranks_json",
    "ranks_markdown",
    "sources",
    "straggler_lines",
    "summary_cells",
]

#: Up to this many ranks the kernel table has one column per rank; beyond, min / median / max and the slowest rank.
SIDE_BY_SIDE = 8

SUMMARY_HEADERS = ("rank", "launches", "kernel time", "compute", "NCCL (n)", "NCCL overlapped", "NCCL exposed",
                   "idle", "idle share", "span", "step mean (n)")


def summary_cells(report: RankReport) -> list[list[str]]:
    """One row per rank, :data:`SUMMARY_HEADERS`; overlap is the share of NCCL time that overlaps compute."""
    rows = []
    for r in report.summary.to_dict("records"):
        exposed = r["comm_busy_ns"] - r["overlap_ns"]
        rows.append([str(r["label"]), f"{r['launches']:,}", duration(r["kernel_ns"]), duration(r["compute_ns"]),
                     f"{duration(r['comm_ns'])} ({r['comm_launches']})",
                     pct(None if r["overlap_share"] is None else r["overlap_share"] * 100),
                     duration(exposed), duration(r["idle_ns"]),
                     pct(None if r["idle_share"] is None else r["idle_share"] * 100), duration(r["span_ns"]),
                     duration(r["step_ns"]) + (f" ({r['steps']})" if r["steps"] else "")])
    return rows


def kernel_headers(report: RankReport) -> list[str]:
    if len(report.labels) <= SIDE_BY_SIDE:
        return ["kernel", "kind", *(f"rank {label}" for label in report.labels), "max/min"]
    return ["kernel", "kind", "min", "median", "max", "slowest rank"]


def kernel_cells(report: RankReport) -> list[list[str]]:
    """The top kernels by time over all ranks: per rank side by side, or their spread for many ranks."""
    matrix = report.kernel_matrix()
    kinds = dict(zip(report.kernels["name"], report.kernels["kind"], strict=True))
    rows = []
    for name, row in matrix.iterrows():
        first = [str(name), "NCCL" if kinds[name] == "comm" else "compute"]
        low, high = float(row.min()), float(row.max())
        if len(row) <= SIDE_BY_SIDE:
            # "none": the rank ran no such kernel (a real zero, not a missing value).
            rows.append([*first, *(duration(v) if v > 0 else "none" for v in row),
                         f"{high / low:.2f}x" if low > 0 else "—"])
        else:
            rows.append([*first, duration(low), duration(float(row.median())), duration(high), str(row.idxmax())])
    return rows


def straggler_lines(report: RankReport) -> list[str]:
    """The rule, then one line per metric: the bounds it applied and the ranks outside them."""
    out = [f"rule: {STRAGGLER_RULE}"]
    for test in report.stragglers:
        if test.skipped:
            out.append(f"{test.metric}: not tested ({test.skipped})")
            continue
        bounds = " and ".join(b for b in (f"< {duration(test.lower_ns)}" if test.lower_ns is not None else "",
                                          f"> {duration(test.upper_ns)}" if test.upper_ns is not None else "") if b)
        def named(straggler: bool, test=test) -> str:
            return ", ".join(f"rank {h['label']} ({duration(h['value_ns'])}, {h['deviation_pct']:+.0f}%)"
                             for h in test.flagged if h["straggler"] is straggler) or "none"

        waiting = named(False)
        out.append(f"{test.metric}: median {duration(test.median_ns)}, MAD {duration(test.mad_ns)}; outlier when "
                   f"{bounds}; stragglers: {named(True)}" + (f"; waiting for a peer: {waiting}" if waiting != "none"
                                                            else ""))
    return out


def sources(report: RankReport) -> list[str]:
    """The files, one a line for up to :data:`SIDE_BY_SIDE`; beyond, how many and the folder they share."""
    files = report.summary["source"].tolist()
    if len(files) <= SIDE_BY_SIDE:
        return files
    return [f"{len(files)} files in {os.path.commonpath(files)}"]


def print_ranks(console: Console, report: RankReport, names: str | NameKeys = "short") -> None:
    """The report across ranks in a terminal; ``names``: how kernel names are shown (``--names``: short or full)."""
    keys = NameKeys.of(names)
    console.print(f"[bold]iotrace report across ranks[/]: {escape(report.ranks_line())}")
    for source in sources(report):
        console.print(f"  [dim]{escape(source)}[/]")
    console.print()
    table = _table("Per rank (time; NCCL overlapped = share of NCCL kernel time that overlaps compute, HTA)")
    for i, header in enumerate(SUMMARY_HEADERS):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    for cells in summary_cells(report):
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
    console.print()
    headers = kernel_headers(report)
    table = _table(f"Top {len(report.kernel_matrix())} kernels by time over all ranks")
    _column(console, table, headers[0], ratio=1, overflow="ellipsis", no_wrap=True, min_width=16, max_width=40)
    for header in headers[1:]:
        table.add_column(header, justify="right", no_wrap=True)
    for cells in kernel_cells(report):
        table.add_row(escape(_kernel(console, keys, cells[0], 40)), *(escape(c) for c in cells[1:]))
    console.print(table)
    _legend(console, keys)
    console.print()
    console.print("[bold]Stragglers[/]")
    for line in straggler_lines(report):
        console.print(f"  {escape(line)}")
    _findings(console, report.findings, keys=keys)
    for note in report.notes:
        console.print(f" [dim]note: {escape(note)}[/]")


def ranks_markdown(report: RankReport, names: str | NameKeys = "short") -> str:
    """The report across ranks as Markdown; ``names`` as in :func:`iotrace.trace.render.markdown.report_markdown`."""
    keys = NameKeys.of(names)
    lines = ["# iotrace report across ranks", "", md(report.ranks_line()), ""]
    lines += [f"- {md(source)}" for source in sources(report)] + [""]
    lines += ["## Per rank", "", "NCCL overlapped: the share of NCCL kernel time that overlaps compute (HTA).", ""]
    lines += md_table(list(SUMMARY_HEADERS), [[md(c) for c in row] for row in summary_cells(report)])
    lines += ["## Top kernels by time over all ranks", ""]
    lines += md_table(kernel_headers(report), [[md(keys.cell(row[0])), *(md(c) for c in row[1:])]
                                               for row in kernel_cells(report)])
    lines += md_legend(keys)
    lines += ["## Stragglers", "", *(f"- {md(line)}" for line in straggler_lines(report)), ""]
    lines += ["## Findings", "", *(md_findings(report.findings, keys) if report.findings else ["none", ""])]
    lines += [f"*note: {md(note)}*" for note in report.notes]
    return "\n".join(lines) + "\n"


def _figure(report: RankReport) -> str:
    """Each rank's traced span split into compute only, compute and NCCL at once, NCCL only, copies only and idle."""
    import plotly.graph_objects as go

    s = report.summary[["span_ns", "idle_ns", "compute_busy_ns", "comm_busy_ns", "overlap_ns"]]
    s = s.apply(pd.to_numeric, errors="coerce").fillna(0)  # a trace without timestamps has no span: 0 drawn
    labels = [f"rank {label}" for label in report.summary["label"]]
    gpu_busy = s["span_ns"] - s["idle_ns"]
    kernels_busy = s["compute_busy_ns"] + s["comm_busy_ns"] - s["overlap_ns"]
    parts = (("compute only", s["compute_busy_ns"] - s["overlap_ns"]), ("compute + NCCL", s["overlap_ns"]),
             ("NCCL only", s["comm_busy_ns"] - s["overlap_ns"]), ("copies only", gpu_busy - kernels_busy),
             ("idle", s["idle_ns"]))
    fig = go.Figure([go.Bar(name=name, x=labels, y=(values / 1e6).tolist()) for name, values in parts])
    fig.update_layout(barmode="stack", title="GPU time per rank (ms)", yaxis_title="ms", height=420)
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id="plot-ranks",
                       config={"displaylogo": False, "responsive": True})


def ranks_html(report: RankReport) -> str:
    """The report across ranks as one offline HTML page."""
    body = ["<h1>iotrace report across ranks</h1>", f"<p>{e(report.ranks_line())}</p>",
            "<ul class=\"dim\">" + "".join(f"<li><code>{e(s)}</code></li>" for s in sources(report))
            + "</ul>",
            "<h2>Per rank</h2><p class=\"dim\">NCCL overlapped: the share of NCCL kernel time that overlaps compute "
            "(HTA).</p>",
            "<table>" + _row([e(h) for h in SUMMARY_HEADERS], header=True)
            + "".join(_row([e(c) for c in row]) for row in summary_cells(report)) + "</table>",
            f'<div class="figure">{_figure(report)}</div>',
            "<h2>Top kernels by time over all ranks</h2>",
            "<table>" + _row([e(h) for h in kernel_headers(report)], header=True)
            + "".join(_row([e(c) for c in row]) for row in kernel_cells(report)) + "</table>",
            "<h2>Stragglers</h2><ul>" + "".join(f"<li>{e(line)}</li>" for line in straggler_lines(report)) + "</ul>",
            "<h2>Findings</h2>", html_findings(report.findings) or "<p>none</p>"]
    if report.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    return _page("iotrace report across ranks", "\n".join(body))


def ranks_json(report: RankReport) -> str:
    return dumps(report.to_dict())
