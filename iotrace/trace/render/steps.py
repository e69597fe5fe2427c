"""The step report ("Where the tok/s went") as text: per phase its figures beside the wall, then each phase's
waterfall, one row per category, summing to the step. One function builds the rows, so the terminal and Markdown say
the same thing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.trace.reports.step_roles import CATEGORIES

if TYPE_CHECKING:
    from rich.console import Console

    from iotrace.trace.reports.step_report import StepReport

__all__ = ["PHASE_COLUMNS", "WATERFALL_COLUMNS", "phase_rows", "print_steps", "steps_markdown", "waterfall_rows"]

PHASE_COLUMNS = ("phase", "steps", "median ms", "p90 ms", "tokens/step", "tok/s", "wall tok/s", "% of wall")
WATERFALL_COLUMNS = ("where the time went", "ms/step", "% of step", "against its floor")


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def title(report: StepReport) -> str:
    n = len(report.steps)
    phases = ", ".join(f"{count} {phase}" for phase, count in report.steps.phases().items())
    return f"Where the tok/s went: {n} engine step{'s' * (n != 1)} ({phases}), from {report.steps.source}"


def phase_rows(report: StepReport) -> list[tuple[str, ...]]:
    """One row per phase (:data:`PHASE_COLUMNS`)."""
    return [(p.phase, str(p.steps), _num(p.median_ms), _num(p.p90_ms), _num(p.tokens_per_step), _num(p.tok_s),
             _num(p.wall_tok_s), "—" if p.pct_of_wall is None else f"{p.pct_of_wall:.0f}%") for p in report.phases]


def waterfall_rows(report: StepReport, phase_index: int) -> list[tuple[str, ...]]:
    """One phase's waterfall (:data:`WATERFALL_COLUMNS`): every category with time, in the waterfall's order, and the
    step's total last."""
    phase = report.phases[phase_index]
    rows = []
    for category in CATEGORIES:
        ns = phase.categories_ns[category]
        if not ns:
            continue
        floor = ""
        if category == "gemm" and phase.gemm_floor_pct is not None:
            floor = _floor(phase.gemm_floor_pct, "the weights' byte floor")
        elif category == "attention" and phase.attention_floor_pct is not None:
            floor = _floor(phase.attention_floor_pct, "the KV bytes' floor")
        rows.append((report.labels[category], _num(ns / 1e6 / phase.steps), f"{100 * phase.share(category):.1f}%",
                     floor))
    rows.append(("the step (sum)", _num(phase.span_ns / 1e6 / phase.steps), "100.0%", ""))
    return rows


def _floor(pct: float, what: str) -> str:
    """A category's time against its byte floor; never above 100%: faster than the floor means the bandwidth given
    is below what the machine reached (a copy loop on a loaded machine, or weights that stay in cache)."""
    if pct > 100:
        return f"faster than {what} at this bandwidth: the bandwidth is understated"
    return f"{pct:.2g}% of {what}" if pct < 1 else f"{pct:.0f}% of {what}"


def _footer(report: StepReport) -> list[str]:
    lines = [f"{p.phase} wall: {p.wall_basis}" for p in report.phases if p.wall_basis]
    if report.waterfall.other_names:
        named = ", ".join(f"{name[:70]} ({ns / 1e6:.3g} ms)" for name, ns in report.waterfall.other_names[:5])
        lines.append(f"{report.labels['other']}: {named}")
    return lines + [f"note: {note}" for note in [*report.steps.notes, *report.notes]]


def print_steps(console: Console, report: StepReport) -> None:
    """The step report in the terminal."""
    from rich.markup import escape
    from rich.table import Table

    console.print()
    console.print(f"[bold]{escape(title(report))}[/]")
    table = Table(box=None, pad_edge=False)
    for column in PHASE_COLUMNS:
        table.add_column(column, justify="left" if column == "phase" else "right", no_wrap=True)
    for row in phase_rows(report):
        table.add_row(*row)
    console.print(table)
    for index, phase in enumerate(report.phases):
        console.print(f"  [bold]{phase.phase}[/]: each step, {_num(phase.span_ns / 1e6 / phase.steps)} ms on average")
        flow = Table(box=None, pad_edge=False)
        for column in WATERFALL_COLUMNS:
            flow.add_column(column, justify="left" if column in (WATERFALL_COLUMNS[0], WATERFALL_COLUMNS[3])
                            else "right", no_wrap=True)
        for row in waterfall_rows(report, index):
            flow.add_row(*(escape(cell) for cell in row))
        console.print(flow)
    for line in _footer(report):
        console.print(f"  [dim]{escape(line)}[/]")


def steps_markdown(report: StepReport) -> list[str]:
    """The step report as Markdown lines."""
    def table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
        return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows), ""]

    lines = [f"## {title(report)}", "", *table(PHASE_COLUMNS, phase_rows(report))]
    for index, phase in enumerate(report.phases):
        lines += [f"**{phase.phase}**: each step, {_num(phase.span_ns / 1e6 / phase.steps)} ms on average", ""]
        lines += table(WATERFALL_COLUMNS, waterfall_rows(report, index))
    return lines + [f"- {line}" for line in _footer(report)] + [""]
