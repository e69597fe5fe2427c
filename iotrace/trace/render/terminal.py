"""The report for a person at a terminal: rich tables readable at 100 columns.

Every name from a trace is escaped for rich markup (a kernel called ``[bold]x[/]`` prints as typed). On a console
at natural width (a pipe, a file, ``--wide``; see :func:`iotrace.render.console.is_natural`) nothing is cut: names
are printed in full and no column is capped or ellipsised.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from iotrace.render.console import RULE_WIDTH, is_natural
from iotrace.trace.info import counts_text
from iotrace.trace.render.fmt import bytes_, duration, num, pct, short
from iotrace.trace.reports.diff import TRAFFIC, Diff
from iotrace.trace.reports.records import Finding
from iotrace.trace.reports.report import KernelReport, Report
from iotrace.trace.reports.stall_reasons import reason
from iotrace.trace.reports.stalls import primary

__all__ = ["DETAILS", "print_diff", "print_report"]

#: Kernels shown with their full stall, roofline and occupancy detail; the rest appear in the summary table.
DETAILS = 5


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                 pad_edge=False, padding=(0, 1))


def _name(console: Console, name: object, width: int) -> str:
    """A trace name cut to ``width`` for a terminal; whole (whitespace collapsed) at natural width."""
    return " ".join(str(name).split()) if is_natural(console) else short(str(name), width)


def _column(console: Console, table: Table, header: str, **options: Any) -> None:
    """``table.add_column``; at natural width without the caps (``max_width``, ellipsis) that fit it to a terminal."""
    if is_natural(console):
        options.pop("max_width", None)
        if options.get("overflow") == "ellipsis":
            options["overflow"] = "fold"  # never reached at natural width; a cut cell would lose data
    table.add_column(header, **options)


def _rule(console: Console, title: str) -> None:
    """A left-aligned rule: the terminal's width, or at natural width the design width (:data:`RULE_WIDTH`) or its
    title's, where that is longer, so the title is never cut."""
    if not is_natural(console):
        console.rule(title, align="left")
        return
    console.print(Rule(title, align="left"), width=max(RULE_WIDTH, Text.from_markup(title).cell_len + 4))


def _header(console: Console, report: Report) -> None:
    meta = report.meta
    console.print(f"[bold]{escape(str(meta.get('source')))}[/]")
    console.print(f"  {escape(str(meta.get('format')))} ({escape(str(meta.get('tool')))}, version "
                  f"{escape(str(meta.get('version') or 'not stated'))})")
    card = report.card.name if report.card is not None else "none"
    console.print(f"  card: {escape(card)} — {escape(report.card_source)}")
    console.print(f"  counts: {escape(counts_text(report.counts))}")


def _summary(console: Console, report: Report) -> None:
    table = _table(report.kernels_title())
    _column(console, table, "# kernel", ratio=1, overflow="ellipsis", no_wrap=True, min_width=16, max_width=30)
    # Widths that fit 100 columns with the kernel name taking what is left.
    for col, width in (("time", 8), ("occ th/ach", 10), ("limiter", 9), ("top stall", 19), ("bound", 7)):
        _column(console, table, col, justify="right" if col in ("time", "occ th/ach") else "left", no_wrap=True,
                min_width=width, max_width=width + 3, overflow="ellipsis")
    for k in report.kernels:
        occ = k.occupancy
        shares = k.stall_shares()
        stall = next((f"{reason(r).label} {s * 100:.0f}%" for r, s in shares.items() if not reason(r).not_a_stall),
                     "—")
        roof = k.roofline
        bound = "—" if roof is None or roof.bound is None else roof.bound
        if roof is not None and roof.basis == "modelled" and roof.bound is not None:
            bound += " (modelled)"
        theo = pct(None if occ is None else occ.theoretical_pct, 0)
        ach = pct(None if occ is None else occ.achieved_pct, 0)
        table.add_row(escape(f"{k.kernel_id} {_name(console, k.name, 60)}"), duration(k.duration_ns), f"{theo}/{ach}",
                      escape(", ".join(occ.limiters) if occ is not None and occ.limiters else "—"),
                      escape(stall), bound)
    console.print(table)


def _kernel_detail(console: Console, report: Report, k: KernelReport) -> None:
    console.print()
    _rule(console, f"[bold]#{k.kernel_id}[/] {escape(_name(console, k.name, 84))}")
    grid = "×".join("?" if v is None else str(v) for v in k.grid)
    block = "×".join("?" if v is None else str(v) for v in k.block)
    console.print(f"  grid {grid}, block {block}, {k.registers if k.registers is not None else '?'} registers/thread, "
                  f"shared memory/block {k.smem_text()}, {duration(k.duration_ns)} per launch, {k.launches} launch(es)"
                  + (f", iotrace plugin {escape(k.plugin)}" if k.plugin else ""))
    ranked = primary(k.stalls, k.kernel_id)
    if len(ranked):
        family = str(ranked["family"].iloc[0])
        table = _table(f"Warp stalls (measured, {family}: share of "
                       f"{'cycles between issues' if family != 'sampling' else 'PC samples'})")
        table.add_column("reason", no_wrap=True)
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("share", justify="right", no_wrap=True)
        _column(console, table, "", no_wrap=True, min_width=10, max_width=10)
        table.add_column("what it means", ratio=1)
        for row in ranked.head(6).to_dict("records"):
            if row["value"] <= 0:
                continue
            info = reason(str(row["reason"]))
            bar = "█" * max(1, round(float(row["share"]) * 10))
            table.add_row(escape(info.label), num(row["value"]), pct(float(row["share"]) * 100, 0), bar,
                          escape(info.meaning))
        console.print(table)
    roof = k.roofline
    if roof is not None:
        table = _table(f"Roofline ({roof.basis}; FLOPs {num(roof.flops)}, {roof.precision or '—'}; peak "
                       f"{num(roof.peak_flop_per_s)}FLOP/s from {escape(_name(console, roof.peak_source, 60))})")
        for col in ("level", "bytes", "FLOP/byte", "ceiling", "ceiling from"):
            table.add_column(col, justify="left" if col in ("level", "ceiling from") else "right",
                             no_wrap=col != "ceiling from", ratio=1 if col == "ceiling from" else None)
        for lv in roof.levels:
            table.add_row(lv.level.upper(), bytes_(lv.bytes), num(lv.intensity),
                          "—" if lv.ceiling_bytes_per_s is None else f"{num(lv.ceiling_bytes_per_s)}B/s",
                          escape(lv.ceiling_source))
        console.print(table)
        if roof.bound_basis == "speed of light":
            console.print(f"  bound: [bold]{roof.bound}[/] ({roof.basis}, speed of light: SM "
                          f"{pct(roof.sol['sm_throughput_pct'])}, memory {pct(roof.sol['memory_throughput_pct'])} "
                          "of peak; no DRAM bytes or FLOPs for a roofline)")
        else:
            console.print(f"  bound: [bold]{roof.bound or '—'}[/] ({roof.basis}), {pct(roof.pct_of_attainable)} of "
                          f"attainable; ridge {num(roof.ridge)} FLOP/byte; achieved "
                          f"{num(roof.achieved_flop_per_s)}FLOP/s")
        if roof.model is not None:
            m = roof.model
            console.print(f"  model ({escape(m.plugin)}, modelled): {num(m.flops)} FLOPs, {bytes_(m.bytes)} — "
                          f"counters/model: DRAM {num(m.dram_ratio)}×, FLOPs {num(m.flops_ratio)}×")
    occ = k.occupancy
    if occ is not None and (occ.theoretical_pct is not None or occ.achieved_pct is not None):
        file_part = (f", file {pct(occ.theoretical_pct_file, 2)} ({escape(occ.theoretical_file_source)})"
                     if occ.theoretical_pct_file is not None else "")
        console.print(f"  occupancy: theoretical {pct(occ.theoretical_pct, 2)} (iotrace, CC {occ.cc}){file_part}; "
                      f"achieved {pct(occ.achieved_pct, 1)} ({escape(occ.achieved_source or 'not in the file')}); "
                      f"limited by {escape(', '.join(occ.limiters) or '—')}")
        if occ.assumptions:
            console.print(f"  [dim]{escape(occ.assumptions)}[/]")


def _findings(console: Console, findings: list[Finding], detailed: set[int] | None = None) -> None:
    """Warnings always; notes (severity info) about a kernel only when that kernel is shown in detail."""
    if detailed is not None:
        findings = [f for f in findings if f.severity == "warning" or f.kernel_id is None or f.kernel_id in detailed]
    if not findings:
        return
    console.print()
    console.print("[bold]Findings[/]")
    for f in findings:
        where = f"#{f.kernel_id} " if f.kernel_id is not None else ""
        mark = "!" if f.severity == "warning" else "·"
        console.print(f" {mark} {escape(f'[{f.report}]')} {where}{escape(f.text)}")
        if f.evidence:
            console.print("     evidence: " + escape("; ".join(e.text() for e in f.evidence)), style="dim")
        if f.try_next:
            console.print(f"     try: {escape(f.try_next)}")


def _timeline(console: Console, report: Report) -> None:
    line = report.timeline
    if line is None:
        return
    console.print()
    table = _table("Timeline: top kernels by total time (measured)")
    for col, width in (("share", 6), ("total", 9), ("launches", 8), ("mean", 9), ("kernel", 20)):
        _column(console, table, col, justify="right" if col != "kernel" else "left", no_wrap=True, min_width=width,
                ratio=1 if col == "kernel" else None, overflow="ellipsis")
    for row in line.top_kernels.to_dict("records"):
        table.add_row(pct(row["share_pct"]), duration(row["total_ns"]), str(row["launches"]), duration(row["mean_ns"]),
                      escape(_name(console, row["name"], 70)))
    if line.top_kernels.empty:
        console.print("Timeline (measured)", style="bold")
    else:
        console.print(table)
    if len(line.ranges):
        table = _table("Time per NVTX range")
        for col, width in (("range", 20), ("count", 5), ("wall", 9), ("kernel time", 11)):
            _column(console, table, col, justify="left" if col == "range" else "right",
                    ratio=1 if col == "range" else None, overflow="ellipsis", no_wrap=True, min_width=width)
        for row in line.ranges.to_dict("records"):
            table.add_row(escape(_name(console, row["name"], 60)), str(row["count"]), duration(row["total_ns"]),
                          duration(row["kernel_ns"]))
        console.print(table)
    for row in line.idle.to_dict("records"):
        console.print(f"  GPU {row['device']}: busy {duration(row['busy_ns'])} of {duration(row['span_ns'])}, idle "
                      f"{pct(row['idle_share'] * 100)} in {row['gaps_over_min']} gaps ≥ 5 µs")
    if len(line.gaps):
        table = _table("Longest GPU idle gaps")
        for col, width in (("GPU", 3), ("at", 9), ("gap", 9), ("after kernel", 16), ("before kernel", 16)):
            _column(console, table, col, justify="right" if col in ("GPU", "at", "gap") else "left", no_wrap=True,
                    overflow="ellipsis", ratio=1 if "kernel" in col else None, min_width=width)
        for row in line.gaps.head(5).to_dict("records"):
            table.add_row(str(row["device"]), duration(row["start_offset_ns"]), duration(row["gap_ns"]),
                          escape(_name(console, row["before"], 34)), escape(_name(console, row["after"], 34)))
        console.print(table)
    memcpy = line.memcpy
    if memcpy.get("share") is not None:
        console.print(f"  copies: {duration(memcpy['copy_ns'])} vs kernels {duration(memcpy['kernel_ns'])} "
                      f"({pct(memcpy['share'] * 100)} of GPU busy time)")
    if line.launch_latency is not None:
        lat = line.launch_latency
        console.print(f"  launch latency (API call → kernel start): median {duration(lat['median'])}, p90 "
                      f"{duration(lat['p90'])}, max {duration(lat['max'])} over {lat['count']} launches")


def _ops(console: Console, report: Report, top: int = 10) -> None:
    """The op rooflines: GEMM, attention and RMSNorm ops from their input shapes, largest kernel time first."""
    ops = report.ops
    if ops.empty:
        return
    console.print()
    shown = f"top {top} of {len(ops)}" if len(ops) > top else f"{len(ops)}"
    table = _table(f"Op rooflines ({shown} op shapes; FLOPs and bytes from the plugins' cost models)")
    for col, width in (("op", 8), ("shapes", 12), ("dtype", 5), ("calls", 5), ("time", 9), ("FLOP/B", 6),
                       ("FLOP/s", 7), ("attain.", 7), ("bound", 7)):
        caps = {"op": 8, "shapes": 22}  # at 100 columns; natural width drops the caps
        _column(console, table, col, justify="left" if col in ("op", "shapes", "dtype", "bound") else "right",
                no_wrap=True, min_width=width, overflow="ellipsis", max_width=caps.get(col))
    for row in ops.head(top).to_dict("records"):
        table.add_row(escape(row["op"].removeprefix("aten::")), escape(_name(console, row["shapes"], 40)),
                      row["dtype"], str(row["calls"]), duration(row["kernel_ns"]), num(row["intensity"]),
                      num(row["achieved_flop_per_s"]), pct(row["pct_of_attainable"]), row["bound"] or "—")
    console.print(table)
    for formula in dict.fromkeys(ops["formula"].head(top)):
        console.print(f"  [dim]{escape(formula)}[/]")
    if len(ops) > top:
        console.print(f"  [dim]{len(ops) - top} more op shapes: --format json has every one[/]")


def print_report(console: Console, report: Report, details: int = DETAILS) -> None:
    """The whole report: header, kernel summary, the top kernels in detail, timeline, findings, what is missing."""
    _header(console, report)
    console.print()
    if report.kernels:
        _summary(console, report)
    else:
        console.print("  no kernels in this trace")
    for k in report.kernels[:details]:
        _kernel_detail(console, report, k)
    if len(report.kernels) > details:
        more = report.row_unit(len(report.kernels) - details, more=True)
        console.print(f"\n  [dim]{more} in the table above, not detailed here; --kernel REGEX selects one, "
                      "--format json details every one in the table[/]")
    _timeline(console, report)
    _ops(console, report)
    _findings(console, report.findings, {k.kernel_id for k in report.kernels[:details]})
    if report.unavailable:
        console.print()
        for item in report.unavailable:
            count = f" ({report.row_unit(item['kernels'])})" if item["kernels"] > 1 else ""
            console.print(f" [yellow]{escape(item['line'])}{count}[/]")
    for note in report.notes:
        console.print(f" [dim]note: {escape(note)}[/]")


def print_diff(console: Console, diff: Diff) -> None:
    console.print(f"[bold]before[/] {escape(str(diff.before.meta.get('source')))}")
    console.print(f"[bold]after [/] {escape(str(diff.after.meta.get('source')))}")
    for row in diff.kernels.to_dict("records"):
        console.print()
        same = row["before"] == row["after"]
        _rule(console, escape(_name(console, row["after"], 90)) if same else
              f"{escape(_name(console, row['before'], 44))} → {escape(_name(console, row['after'], 44))}")
        console.print(f"  matched by: {row['match']}")
        table = _table("")
        for col in ("quantity", "before", "after", "after/before"):
            table.add_column(col, justify="left" if col == "quantity" else "right", no_wrap=True)
        table.add_row("time per launch", duration(row["duration_ns_before"]), duration(row["duration_ns_after"]),
                      num(row["duration_ns_ratio"]))
        for key, label in TRAFFIC.items():
            if row[f"{key}_before"] is None and row[f"{key}_after"] is None:
                continue
            table.add_row(escape(_name(console, label, 44)), bytes_(row[f"{key}_before"]), bytes_(row[f"{key}_after"]),
                          num(row[f"{key}_ratio"]))
        table.add_row("theoretical occupancy", pct(row["theoretical_pct_before"]), pct(row["theoretical_pct_after"]),
                      num(row["theoretical_pct_ratio"]))
        table.add_row("achieved occupancy", pct(row["achieved_pct_before"]), pct(row["achieved_pct_after"]),
                      num(row["achieved_pct_ratio"]))
        console.print(table)
        stalls = diff.stalls[(diff.stalls["before"] == row["before"]) & (diff.stalls["after"] == row["after"])]
        if len(stalls):
            table = _table("Warp stalls (share of cycles)")
            for col in ("reason", "before", "after", "change"):
                table.add_column(col, justify="left" if col == "reason" else "right", no_wrap=True)
            for s in stalls.sort_values("delta", key=abs, ascending=False).head(6).to_dict("records"):
                table.add_row(escape(reason(s["reason"]).label), pct(None if s["share_before"] is None else
                                                                      s["share_before"] * 100, 0),
                              pct(None if s["share_after"] is None else s["share_after"] * 100, 0),
                              f"{s['delta'] * 100:+.0f} pts")
            console.print(table)
    for name in diff.unmatched_before:
        console.print(f" only before: {escape(_name(console, name, 90))}")
    for name in diff.unmatched_after:
        console.print(f" only after:  {escape(_name(console, name, 90))}")
    _findings(console, diff.findings)
