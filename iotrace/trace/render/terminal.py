"""The report for a person at a terminal: rich tables readable at 100 columns.

Every name from a trace is escaped for rich markup (a kernel called ``[bold]x[/]`` prints as typed). A long kernel
name is shown as its base name and a key (``cutlass::Kernel [1]``; the rule: :mod:`iotrace.trace.render.names`), its
full name listed once below the table or list that first shows it; ``names="full"`` (``--names full``) keeps names
whole in the tables. On a console at natural width (a pipe, a file, ``--wide``; see
:func:`iotrace.render.console.is_natural`) nothing is cut: no column is capped or ellipsised and the full names are
listed whole, one a line. In a terminal, cells and the listed names are cut to fit its width.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from iotrace.render.console import is_natural
from iotrace.trace.info import counts_text
from iotrace.trace.render.amd import amd_card, amd_occupancy_text
from iotrace.trace.render.fmt import (
    STORED_TITLE,
    WHERE_TITLE,
    bytes_,
    duration,
    finding_where,
    gain_text,
    num,
    pct,
    short,
)
from iotrace.trace.render.names import NAMES, NameKeys
from iotrace.trace.render.range_table import HEADERS as RANGE_HEADERS
from iotrace.trace.render.range_table import TERMINAL as RANGE_TERMINAL
from iotrace.trace.render.range_table import cells as range_cells
from iotrace.trace.render.range_table import legend as range_legend
from iotrace.trace.reports.diff import TRAFFIC, Diff
from iotrace.trace.reports.records import Finding
from iotrace.trace.reports.report import KernelReport, Report
from iotrace.trace.reports.stall_reasons import reason
from iotrace.trace.reports.stalls import primary

__all__ = ["DETAILS", "NAMES", "print_diff", "print_report"]

#: Kernels shown with their full stall, roofline and occupancy detail; the rest appear in the summary table.
DETAILS = 5


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                 pad_edge=False, padding=(0, 1))


def _name(console: Console, name: object, width: int) -> str:
    """A trace name cut to ``width`` for a terminal; whole (whitespace collapsed) at natural width."""
    return " ".join(str(name).split()) if is_natural(console) else short(str(name), width)


def _kernel(console: Console, keys: NameKeys, name: object, width: int) -> str:
    """A kernel name for a table or a line: its base name and key when long (see :class:`NameKeys`), cut to ``width``
    for a terminal; never cut at natural width."""
    cell = keys.cell(name)
    return cell if is_natural(console) else short(cell, width)


def _legend(console: Console, keys: NameKeys) -> None:
    """The full names keyed since the last legend, one a line (``  [1] void cutlass::Kernel<...>(Params)``): whole at
    natural width (each its own line, however long), cut to the width in a terminal."""
    natural = is_natural(console)
    for key, name in keys.take():
        line = f"[{key}] {name}"
        console.print("  " + escape(line if natural else short(line, max(console.width - 2, 20))), soft_wrap=natural,
                      highlight=False)


def _column(console: Console, table: Table, header: str, **options: Any) -> None:
    """``table.add_column``; at natural width without the caps (``max_width``, ellipsis) that fit it to a terminal."""
    if is_natural(console):
        options.pop("max_width", None)
        if options.get("overflow") == "ellipsis":
            options["overflow"] = "fold"  # never reached at natural width; a cut cell would lose data
    table.add_column(header, **options)


def _rule(console: Console, title: str) -> None:
    """A left-aligned rule: the terminal's width, or at natural width the design width or its title's, where that is
    longer, so the title is never cut (iotrace's console sizes a rule so: :mod:`iotrace.render.console`)."""
    if not is_natural(console):
        console.rule(title, align="left")
        return
    console.print(Rule(title, align="left"))


def _header(console: Console, report: Report) -> None:
    meta = report.meta
    console.print(f"[bold]{escape(str(meta.get('source')))}[/]")
    console.print(f"  {escape(str(meta.get('format')))} ({escape(str(meta.get('tool')))}, version "
                  f"{escape(str(meta.get('version') or 'not stated'))})")
    card = report.card.name if report.card is not None else "none"
    console.print(f"  card: {escape(card)} — {escape(report.card_source)}")
    console.print(f"  counts: {escape(counts_text(report.counts))}")


def _summary(console: Console, report: Report, keys: NameKeys) -> None:
    table = _table(report.kernels_title())
    _column(console, table, "# kernel", ratio=1, overflow="ellipsis", no_wrap=True, min_width=16, max_width=30)
    # Widths that fit 100 columns with the kernel name taking what is left.
    for col, width in (("time", 8), ("n", 4), ("occ th/ach", 10), ("limiter", 9), ("top stall", 19), ("bound", 7)):
        _column(console, table, col, justify="right" if col in ("time", "n", "occ th/ach") else "left",
                no_wrap=True, min_width=width, max_width=width + 3, overflow="ellipsis")
    for k in report.kernels:
        if not k.profiled:
            table.add_row(escape(f"{k.kernel_id} {_kernel(console, keys, k.name, 60)}"), "—", str(k.launches),
                          "not profiled", "—", "—", "—")
            continue
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
        table.add_row(escape(f"{k.kernel_id} {_kernel(console, keys, k.name, 60)}"), duration(k.duration_ns),
                      str(k.launches),
                      f"{theo}/{ach}",
                      escape(", ".join(occ.limiters) if occ is not None and occ.limiters else "—"),
                      escape(stall), bound)
    console.print(table)
    _legend(console, keys)


def _kernel_detail(console: Console, report: Report, k: KernelReport, keys: NameKeys) -> None:
    console.print()
    _rule(console, f"[bold]#{k.kernel_id}[/] {escape(_kernel(console, keys, k.name, 84))}")
    _legend(console, keys)
    grid = "×".join("?" if v is None else str(v) for v in k.grid)
    block = "×".join("?" if v is None else str(v) for v in k.block)
    amd = amd_card(k)  # an AMD kernel: VGPRs, SGPRs, LDS and wave size instead of registers and shared memory
    launch = escape(amd) if amd is not None else (
        f"grid {grid}, block {block}, {k.registers if k.registers is not None else '?'} registers/thread, "
        f"shared memory/block {k.smem_text()}")
    console.print(f"  {launch}, {duration(k.duration_ns)} per launch, {k.launches_text()}"
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
    if roof is not None and roof.levels:
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
    if roof is not None:
        derived = "derived" if roof.basis == "measured" else roof.basis  # arithmetic on counters, or a model
        if roof.bound_basis == "speed of light":
            console.print(f"  bound: [bold]{roof.bound}[/] (measured speed of light: SM "
                          f"{pct(roof.sol['sm_throughput_pct'])}, memory {pct(roof.sol['memory_throughput_pct'])} "
                          "of peak; ncu's SOLBottleneck rule)" + ("" if roof.levels else
                                                                  "; no DRAM bytes or FLOPs for a roofline"))
        if roof.levels and roof.pct_of_attainable is not None:
            console.print(f"  roofline ({derived}): {pct(roof.pct_of_attainable)} of attainable at DRAM; ridge "
                          f"{num(roof.ridge)} FLOP/byte; achieved {num(roof.achieved_flop_per_s)}FLOP/s"
                          + ("" if roof.bound_basis == "speed of light" else f"; bound [bold]{roof.bound or '—'}[/]"))
        if roof.model is not None:
            m = roof.model
            console.print(f"  model ({escape(m.plugin)}, modelled): {num(m.flops)} FLOPs, {bytes_(m.bytes)} — "
                          f"counters/model: DRAM {num(m.dram_ratio)}×, FLOPs {num(m.flops_ratio)}×")
    occ = k.occupancy
    amd_occ = amd_occupancy_text(occ)
    if amd_occ is not None and occ is not None and occ.amd_result is not None:
        console.print(f"  occupancy: {escape(amd_occ)}")
        for step in occ.amd_result.steps:
            console.print(f"  [dim]  {escape(step)}[/]")
    elif occ is not None and (occ.theoretical_pct is not None or occ.achieved_pct is not None):
        file_part = (f", file {pct(occ.theoretical_pct_file, 2)} ({escape(occ.theoretical_file_source)})"
                     if occ.theoretical_pct_file is not None else "")
        console.print(f"  occupancy: theoretical {pct(occ.theoretical_pct, 2)} (iotrace, CC {occ.cc}){file_part}; "
                      f"achieved {pct(occ.achieved_pct, 1)} ({escape(occ.achieved_source or 'not in the file')}); "
                      f"limited by {escape(', '.join(occ.limiters) or '—')}")
        if occ.assumptions:
            console.print(f"  [dim]{escape(occ.assumptions)}[/]")
    if k.origin is not None and k.origin.family != "user":
        console.print(f"  origin: {escape(k.origin.label)} ({escape(k.origin.evidence)})"
                      + (f", built for compute capability {k.origin.built_for}" if k.origin.built_for else ""))
    _stored_rules(console, k)


def _findings(console: Console, findings: list[Finding], title: str = "Findings",
              keys: NameKeys | None = None) -> None:
    """Findings in the order given (a report's are ranked by the time they can save), numbered, each with its kernel,
    its gain, the evidence and the next step; the long kernel names they key listed after them."""
    if not findings:
        return
    keys = keys if keys is not None else NameKeys()
    console.print()
    console.print(f"[bold]{escape(title)}[/]")
    for number, f in enumerate(findings, 1):
        mark = "!" if f.severity == "warning" else "·"
        where = finding_where(f, lambda name: _kernel(console, keys, name, 60))
        console.print(f" {number:>2}. {mark} {escape(f'[{f.report}]')} {escape(where + ': ' if where else '')}"
                      f"{escape(f.text)} [dim]({f.basis})[/]")
        if f.try_next:
            console.print(f"     next: {escape(f.try_next)}")
        console.print(f"     {escape(gain_text(f))}" + (f"[dim]: {escape(f.gain.reasoning)}[/]" if f.gain and
                                                         f.gain.reasoning else ""))
        if f.evidence:
            console.print("     evidence: " + escape("; ".join(e.text() for e in f.evidence)), style="dim")
    _legend(console, keys)


def _where_time_goes(console: Console, report: Report) -> None:
    """The span of each device split into compute, exposed communication, copies and idle, and its busiest streams."""
    split = None if report.timeline is None else report.timeline.split
    if split is None:
        return
    console.print()
    console.print(f"[bold]{WHERE_TITLE[0]}[/] ({WHERE_TITLE[1]})")
    for row in split.devices.to_dict("records"):
        streams = split.streams[split.streams["device"] == row["device"]].head(3)
        busiest = ", ".join(f"{'?' if r['stream'] is None or r['stream'] != r['stream'] else int(r['stream'])} "
                            f"{pct(r['share'] * 100, 0)}" for r in streams.to_dict("records"))
        console.print(f"  GPU {row['device']}: span {duration(row['span_ns'])} = compute "
                      f"{pct(row['compute_share'] * 100)}, communication {pct(row['communication_share'] * 100)}, "
                      f"copies and sets {pct(row['copies_share'] * 100)}, idle {pct(row['idle_share'] * 100)}; "
                      f"busiest streams {busiest}")


def _top_findings(console: Console, report: Report, keys: NameKeys) -> None:
    if not report.findings:
        console.print()
        console.print("[bold]Top findings[/]: none (no rule's condition holds here; docs/findings.md lists the rules)")
    _findings(console, report.findings, report.findings_title(), keys)
    stored = report.stored_ranked()
    if stored:
        console.print()
        console.print(f"[bold]{escape(STORED_TITLE[0])}[/] ({STORED_TITLE[1]})")
        for number, row in enumerate(stored, 1):
            saves = "" if row["saves_ns"] is None else f"~{duration(row['saves_ns'])} "
            console.print(f" {number:>2}. #{row['kernel_id']} {escape(_kernel(console, keys, row['kernel'], 40))}: "
                          f"{saves}{escape(row['text'])}")
        _legend(console, keys)


def _stored_rules(console: Console, k: KernelReport) -> None:
    """Nsight Compute's own rule results for this row, as the file stores them."""
    if not k.stored_rules:
        return
    console.print("  [bold]Nsight Compute's own analysis[/] (rule results stored in the file):")
    for rule in k.stored_rules:
        console.print(f"   - {escape(rule.text())}")


def _timeline(console: Console, report: Report, keys: NameKeys) -> None:
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
                      escape(_kernel(console, keys, row["name"], 70)))
    if line.top_kernels.empty:
        console.print("Timeline (measured)", style="bold")
    else:
        console.print(table)
        _legend(console, keys)
    if len(line.ranges):
        # Kineto's ranges are record_function annotations (user_annotation), not NVTX: name them as the file has them.
        kineto = str(report.meta.get("format") or "").startswith("kineto")
        table = _table("Time per record_function range" if kineto else "Time per NVTX range")
        for col, width in (("range", 20), ("count", 5), ("wall", 9), ("kernel time (incl.)", 11)):
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
                          escape(_kernel(console, keys, row["before"], 34)),
                          escape(_kernel(console, keys, row["after"], 34)))
        console.print(table)
        _legend(console, keys)
    memcpy = line.memcpy
    if memcpy.get("share") is not None:
        console.print(f"  copies: {duration(memcpy['copy_ns'])} vs kernels {duration(memcpy['kernel_ns'])} "
                      f"({pct(memcpy['share'] * 100)} of GPU busy time)")
    if memcpy.get("by_kind"):
        table = _table("Copies and sets by kind and memory (measured; GB/s = bytes / their time; the CardBook states "
                       "no PCIe/NVLink ceiling)")
        for col in ("kind", "memory", "count", "time", "bytes", "GB/s"):
            _column(console, table, col, justify="left" if col in ("kind", "memory") else "right", no_wrap=True)
        for row in memcpy["by_kind"][:8]:
            memory = " → ".join(str(row[k]) for k in ("src_kind", "dst_kind") if row.get(k)) or "—"
            table.add_row(escape(str(row["kind"])), escape(memory), str(int(row["count"])), duration(row["total_ns"]),
                          bytes_(row["bytes"]), num(row["bandwidth_gbs"]))
        console.print(table)
    split = line.launches
    if split is not None:
        console.print(f"  launches: the API call {duration(split.api['median_ns'])} median over {split.api['count']}; "
                      f"queueing behind other work {duration(split.queueing['median_ns'])} median "
                      f"({split.queueing['count']} launches, not a cost in itself); launch latency on an idle GPU "
                      f"{duration(split.latency['median_ns'])} median ({split.latency['count']} launches, "
                      f"{duration(split.latency['total_ns'])} in all)")
    elif line.launch_latency is not None:
        lat = line.launch_latency
        console.print(f"  API call start → kernel start (call, queueing and latency together): median "
                      f"{duration(lat['median'])}, p90 {duration(lat['p90'])}, max {duration(lat['max'])} over "
                      f"{lat['count']} launches")
    graphs = line.graph_launches
    if graphs is not None:
        of = "" if graphs.graphs is None else f" of {graphs.graphs} graph{'s' * (graphs.graphs != 1)}"
        share = "" if graphs.kernel_share is None else f", {pct(graphs.kernel_share * 100)} of kernel time"
        console.print(f"  CUDA graphs: {graphs.launches} launches{of} ran {graphs.kernels} kernels "
                      f"({duration(graphs.kernel_ns)}{share}); first kernel {duration(graphs.first_kernel_latency_ns)}"
                      " after its graph launch call (median)")
        if graphs.launch_cpu_ns is not None:
            direct = "" if graphs.direct_cpu_ns_per_kernel is None else \
                f" vs {duration(graphs.direct_cpu_ns_per_kernel)} per ordinary launch call"
            console.print(f"  graph launch calls: {duration(graphs.launch_cpu_ns)} of CPU time, "
                          f"{duration(graphs.cpu_ns_per_kernel)} per kernel they ran{direct}")


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


def _range_rooflines(console: Console, report: Report) -> None:
    """Per-range rooflines: kernel time, FLOPs, bytes, % of attainable and occupancy per NVTX/annotation range."""
    ranges = report.range_rooflines
    if ranges is None:
        return
    console.print()
    table = _table(escape(ranges.title()))
    keep = [RANGE_HEADERS.index(col) for col in RANGE_TERMINAL]
    rows = [[range_cells(row)[i] for i in keep] for row in ranges.table.to_dict("records")]
    # Each number column as wide as its widest cell; the name gets what they leave of the terminal (each also takes
    # two cells of padding and one of the box's column divider), and at natural width no cap.
    widths = [max([Text(header).cell_len, width, *(Text(r[i]).cell_len for r in rows)])
              for i, (header, width) in enumerate(RANGE_TERMINAL.values())]
    for i, (col, (header, _)) in enumerate(RANGE_TERMINAL.items()):
        _column(console, table, header, justify="left" if col == "range" else "right", no_wrap=True,
                overflow="ellipsis", min_width=widths[i] if i else 12,
                max_width=max(12, console.width - sum(w + 3 for w in widths[1:])) if i == 0 else None)
    for first, *rest in rows:
        table.add_row(escape(_name(console, first, 60)), *rest)
    console.print(table)
    console.print("  [dim]share, FLOPs, bytes, B/s and their coverage per range: --format json, md or html[/]")
    for line in range_legend(ranges):
        console.print(f"  [dim]{escape(line)}[/]")


def _source_lines(console: Console, report: Report, detailed: set[int], keys: NameKeys) -> None:
    """Per launch shown in detail, its top source lines (or SASS addresses) by stall samples and their top reason."""
    natural = is_natural(console)
    for k in report.source_lines:
        if k.kernel_id not in detailed:
            continue
        console.print()
        table = _table(f"#{k.kernel_id} {escape(_kernel(console, keys, k.kernel, 40))}: {escape(k.title())}")
        # Fixed widths that fit 100 columns; a long file name loses its start, never the line number.
        for col, low, high in (("where", 14, 22), ("samples", 7, 9), ("share", 5, 5), ("top reason", 16, 16),
                               ("of it", 5, 5), ("instruction / source", 12, 30)):
            _column(console, table, col, justify="right" if col in ("samples", "share", "of it") else "left",
                    no_wrap=True, overflow="ellipsis", min_width=low, max_width=high)
        for line in k.lines:
            where = line.location
            if not natural and len(where) > 22:
                where = "…" + where[-21:]
            table.add_row(escape(where), f"{line.samples:,}", pct(line.share * 100, 0),
                          escape(reason(line.reason).label), pct(line.reason_share * 100, 0),
                          escape(_name(console, line.text or line.sass or "—", 30)))
        console.print(table)
        _legend(console, keys)
        if k.advice:
            console.print(f"  [dim]{escape(k.advice)}[/]")

def print_report(console: Console, report: Report, details: int = DETAILS, names: str | NameKeys = "short") -> None:
    """The whole report: header, kernel summary, the top kernels in detail, timeline, findings, what is missing.
    ``names``: how kernel names are shown (:data:`NAMES`)."""
    keys = NameKeys.of(names)
    _header(console, report)
    _where_time_goes(console, report)
    _top_findings(console, report, keys)
    if report.steps is not None:  # an engine's steps against the wall: the question the trace was recorded for
        from iotrace.trace.render.steps import print_steps

        print_steps(console, report.steps)
    console.print()
    if report.kernels:
        _summary(console, report, keys)
    else:
        gap = next((n for n in report.notes if n.startswith(("GPU activity was not captured",
                                                            "the export has no CUDA trace"))), None)
        host = report.tables.rows("host_ops")
        cpu_only = f": a CPU-only trace ({host} CPU ops, no GPU activity)" if host and not gap else ""
        console.print("  no kernels in this trace" + (f": {escape(gap)}" if gap else cpu_only))
    for k in report.kernels[:details]:
        _kernel_detail(console, report, k, keys)
    if len(report.kernels) > details:
        more = report.row_unit(len(report.kernels) - details, more=True)
        console.print(f"\n  [dim]{more} in the table above, not detailed here; --kernel REGEX selects one, "
                      "--format json details every one in the table[/]")
    _timeline(console, report, keys)
    _ops(console, report)
    _range_rooflines(console, report)
    _source_lines(console, report, {k.kernel_id for k in report.kernels[:details]}, keys)
    if report.unavailable:
        console.print()
        for item in report.unavailable:
            count = f" ({report.row_unit(item['kernels'])})" if item["kernels"] > 1 else ""
            console.print(f" [yellow]{escape(item['line'])}{count}[/]")
    for note in report.notes:
        console.print(f" [dim]note: {escape(note)}[/]")


def print_diff(console: Console, diff: Diff, names: str | NameKeys = "short") -> None:
    """Per kernel pair: the quantities and warp stalls before and after, then the kernels left unmatched and the
    findings. ``names``: how kernel names are shown (:data:`NAMES`)."""
    keys = NameKeys.of(names)
    console.print(f"[bold]before[/] {escape(str(diff.before.meta.get('source')))}")
    console.print(f"[bold]after [/] {escape(str(diff.after.meta.get('source')))}")
    for row in diff.kernels.to_dict("records"):
        console.print()
        same = row["before"] == row["after"]
        before, after = (_kernel(console, keys, row[side], 90 if same else 44) for side in ("before", "after"))
        _rule(console, escape(after) if same else f"{escape(before)} → {escape(after)}")
        _legend(console, keys)
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
        console.print(f" only before: {escape(_kernel(console, keys, name, 90))}")
    for name in diff.unmatched_after:
        console.print(f" only after:  {escape(_kernel(console, keys, name, 90))}")
    _legend(console, keys)
    _findings(console, diff.findings, keys=keys)
