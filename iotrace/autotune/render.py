"""How a tune is shown: a progress bar while it runs, then a rich table, the chosen config and why, and an HTML
chart of time against occupancy and against the predicted time. Renderers only draw; the tuner computed it all.

Measured and modelled never share a column: ``predicted µs`` is the cost model, ``meas µs``, ``TFLOP/s`` and
``% roofline`` are GPU measurements (blank without one).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from iotrace.render.console import is_natural

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from iotrace.autotune.result import ConfigResult, TuneResult

__all__ = ["BarProgress", "print_tune", "tune_figure", "write_figure"]

#: Rows the terminal table shows by default (the JSON and the chart hold every config).
TABLE_ROWS = 15


class BarProgress:
    """The tuner's :class:`~iotrace.autotune.tuner.Progress` as a rich progress bar (one task at a time)."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._bar: Progress | None = None
        self._task: Any = None

    def start(self, description: str, total: int) -> None:
        self.stop()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=self._console, transient=True)
        self._bar.start()
        self._task = self._bar.add_task(escape(description), total=total)

    def advance(self, steps: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, steps)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _num(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.{digits}g}"


_SHORT = {"num_warps": "w", "num_stages": "s", "GROUP_M": "G"}
_LIMITERS = {"registers": "regs", "shared_mem": "smem"}


def compact(config: dict[str, Any], skip: frozenset[str] = frozenset()) -> str:
    """``BM=128 BN=256 BK=64 w=8 s=3 TMA`` in short: names shortened, switches shown only when on."""
    parts = []
    for key, value in config.items():
        if key in skip:
            continue
        short = _SHORT.get(key, key.replace("BLOCK_", "B"))
        if isinstance(value, bool):
            if value:
                parts.append(short.replace("USE_", ""))
        else:
            parts.append(f"{short}={value}")
    return " ".join(parts)


def _constant_keys(result: TuneResult) -> dict[str, Any]:
    """Parameters with one value across the whole space (fixed by the kernel or by --fix): shown once, not per row."""
    values: dict[str, set[str]] = {}
    for row in result.results:
        for key, value in row.config.items():
            values.setdefault(key, set()).add(repr(value))
    first = result.results[0].config if result.results else {}
    return {k: first[k] for k, v in values.items() if len(v) == 1 and len(result.results) > 1}


def _plain(value: float) -> str:
    """3 significant figures without an exponent up to 99,999 (TFLOP/s and percentages read better so)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _measured_columns(result: TuneResult, row: ConfigResult) -> list[str]:
    if row.measured_us is None:
        return ["—", "—", "—"]
    seconds = row.measured_us * 1e-6
    roof = row.entry.prediction.roofline_us if row.entry.prediction else None
    return [_num(row.measured_us), _plain(result.cost.flops / seconds / 1e12),
            _plain(100 * roof / row.measured_us) if roof else "—"]


def _natural(console: Console) -> bool:
    """Whether the table keeps every column: iotrace's console says so itself (a pipe, a file, ``--wide``); any other
    counts when it is not a terminal and ``COLUMNS`` is unset (no width was chosen)."""
    return is_natural(console) or (not console.is_terminal and "COLUMNS" not in os.environ)


def print_tune(console: Console, result: TuneResult, rows: int = TABLE_ROWS) -> None:
    """The ranked table, the counts, the chosen config and why."""
    static = result.static
    timed = result.mode in ("gpu", "replay")
    constant = _constant_keys(result)
    title = (f"tune {result.kernel} {result.dtype} {','.join(f'{k}={v}' for k, v in result.shape.items())} on "
             f"{result.card.name} (CC {result.card.cc}, {result.card.sm_count} SMs), {result.mode} mode"
             + (f"; every config has {compact(constant)}" if constant else ""))
    ranked = result.ranked()
    shown = [r for r in ranked if r.entry.pruned is None][:rows]
    checked = result.mode != "static"
    skip = frozenset(constant)
    cells: dict[str, list[str]] = {name: [] for name in ("#", "config", "regs", "smem KB", "spill B",
                                                          "occ % limiter", "pred µs", "meas µs", "TFLOP/s",
                                                          "% roof", "ok")}
    ties = 0
    for row in shown:
        main, occ = row.entry.main, row.entry.occupancy
        measured = _measured_columns(result, row)
        tie = result.tie(row)
        ties += tie is not None
        for name, text in (("#", f"{tie[0]}=" if tie else str(row.rank or "")),
                           ("config", escape(compact(row.config, skip))),
                           ("regs", str(main.registers) if main else "—"),
                           ("smem KB", _num(main.shared_mem_bytes / 1024, 3) if main else "—"),
                           ("spill B", f"[yellow]{row.entry.spills}[/yellow]" if row.entry.spills else "0"),
                           ("occ % limiter", f"{_num(occ.occupancy_pct, 3)} "
                                             f"{','.join(_LIMITERS.get(x, x) for x in occ.limiters)}" if occ else "—"),
                           ("pred µs", _num(row.entry.predicted_us)), ("meas µs", measured[0]),
                           ("TFLOP/s", measured[1]), ("% roof", measured[2]),
                           ("ok", {True: "yes", False: "[red]WRONG[/red]", None: "—"}[row.verified])):
            cells[name].append(text)
    columns = ["#", "config", "regs", "smem KB", "spill B", "occ % limiter", "pred µs"]
    columns += ["meas µs", "TFLOP/s", "% roof", "ok"] if timed else (["ok"] if checked else [])
    if not any(r.entry.spills for r in shown):
        columns.remove("spill B")  # the column only when a shown config spills
    # On a terminal the table must fit its width (80 columns, as in docs/commands/kernels.md) with each config on one
    # line: when it would not, the columns a reader needs least go first (--json always holds every field). In a pipe
    # or a file with COLUMNS unset there is no width to fit: every column is kept at its natural width, no cell cut.
    def width(names: list[str]) -> int:
        return sum(max([len(n), *(len(Text.from_markup(c).plain) for c in cells[n])]) + 2 for n in names)
    natural = _natural(console)
    dropped = []
    for name in () if natural else ("spill B", "regs", "TFLOP/s", "smem KB"):
        if width(columns) <= console.width:
            break
        if name in columns:
            columns.remove(name)
            dropped.append(name)
    captions = [f"(narrow terminal: {', '.join(dropped)} left out)"] if dropped else []
    if ties:
        captions.append("n= : tied with another config on predicted time (the model cannot tell them apart)")
    table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=False, collapse_padding=True, caption="\n".join(captions) or None,
                  caption_justify="left")
    header = {"meas µs": "replay µs"} if result.mode == "replay" else {}  # a replayed time is not measured here
    for name in columns:
        table.add_column(header.get(name, name), justify="left" if name in ("config", "occ % limiter") else "right",
                         no_wrap=True)
    for i in range(len(shown)):
        table.add_row(*(cells[name][i] for name in columns))
    if natural and width(columns) > console.width:
        # Rendered at the width it needs and written uncropped: a plain console in a pipe would cut it to 80.
        lines = console.render_lines(table, console.options.update_width(max(width(columns), len(title))))
        console.print(Segments([seg for line in lines for seg in (*line, Segment.line())]), crop=False,
                      soft_wrap=True)
    else:
        console.print(table)
    pruned = [r for r in result.results if r.entry.pruned]
    launchable = len(result.results) - len(pruned)
    hidden = launchable - len(shown)
    lines = [f"{len(result.results)} configs: {launchable} launchable, {len(pruned)} pruned statically"
             + (f" ({len(pruned) / len(result.results):.0%})" if result.results else "")
             + (f"; {hidden} more launchable not shown (--json lists all)" if hidden > 0 else "")]
    if pruned:
        reasons: dict[str, int] = {}
        for row in pruned:
            reason = (row.entry.pruned or "").split(": ", 1)[-1]
            reason = "shared memory over the limit" if "shared memory" in reason else (
                "registers over the limit" if "registers" in reason else reason[:80])
            reasons[reason] = reasons.get(reason, 0) + 1
        lines.append("pruned: " + "; ".join(f"{n} × {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])))
    if static is not None and static.cached_units + static.compiled_units:
        lines.append(f"static phase {static.seconds:.1f} s: {static.compiled_units} compiled, {static.cached_units} "
                     f"from the compile cache")
    if result.evaluations:
        where = f" {result.cache_path}" if result.cache_path else ""
        lines.append(f"{result.evaluations} evaluated ({result.measured} new, {result.evaluations - result.measured} "
                     f"from the tuning cache{where})")
    for line in lines:
        console.print(escape(line))
    for note in result.notes:
        console.print(f"[dim]{escape(note)}[/dim]")
    if result.best is not None:
        console.print(f"[bold]best ({result.label}):[/bold] {escape(compact(result.best.config))}")
    console.print(f"why: {escape(result.why)}")


def tune_figure(result: TuneResult) -> go.Figure:
    """Two panels: time against occupancy, and measured against predicted time (a perfect model is the diagonal).

    Without measurements (no GPU) the first panel plots the predicted time, labelled modelled, and the second is
    left empty with a note.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for r in result.results if r.entry.prediction is not None and r.entry.occupancy is not None]
    measured = [r for r in rows if r.measured_us is not None]
    timed = bool(measured)
    # A replay's times come from its sweep: never called measured (and called synthesised when the sweep says so).
    word = ("synthesised" if result.synthesised else "replayed") if result.mode == "replay" else "measured"
    y_label = f"{word} µs" if timed else "predicted µs (modelled)"
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{y_label} vs occupancy",
                                                        f"{word} vs predicted µs ({word})" if timed else
                                                        "measured vs predicted: no GPU measurements in this run"])
    points = measured if timed else rows
    groups = (("verified", "seagreen", [r for r in points if r.verified]),
              ("WRONG output (rejected)", "crimson", [r for r in points if r.verified is False]),
              ("not checked", "steelblue", [r for r in points if r.verified is None]))
    for name, colour, group in groups:
        if not group:
            continue
        labels = [compact(r.config) for r in group]
        fig.add_trace(go.Scatter(x=[r.entry.occupancy.occupancy_pct for r in group],  # type: ignore[union-attr]
                                 y=[r.measured_us if timed else r.entry.predicted_us for r in group],
                                 mode="markers", text=labels, marker={"color": colour, "size": 8}, name=name,
                                 legendgroup=name,
                                 hovertemplate="%{text}<br>occupancy %{x:.1f}%<br>%{y:.4g} µs<extra></extra>"),
                      row=1, col=1)
        if timed:
            fig.add_trace(go.Scatter(x=[r.entry.predicted_us for r in group], y=[r.measured_us for r in group],
                                     mode="markers", text=labels, marker={"color": colour, "size": 8},
                                     legendgroup=name, showlegend=False,
                                     hovertemplate="%{text}<br>predicted %{x:.4g} µs<br>" + word + " %{y:.4g} µs"
                                                   "<extra></extra>"), row=1, col=2)
    floor = rows[0].entry.prediction.roofline_us if rows and rows[0].entry.prediction else None
    if floor:
        fig.add_hline(y=floor, line={"dash": "dash", "color": "grey"}, row=1, col=1,  # type: ignore[arg-type]
                      annotation_text=f"roofline floor {floor:.4g} µs (modelled)")
    if timed:
        top = max(max(r.entry.predicted_us or 0 for r in measured), max(r.measured_us or 0 for r in measured))
        fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", line={"dash": "dot", "color": "grey"},
                                 name=f"{word} = predicted"), row=1, col=2)
    if result.best is not None and result.best.entry.occupancy is not None:
        best_y = result.best.measured_us if timed else result.best.entry.predicted_us
        fig.add_trace(go.Scatter(x=[result.best.entry.occupancy.occupancy_pct], y=[best_y], mode="markers",
                                 marker={"symbol": "star", "size": 16, "color": "gold",
                                         "line": {"width": 1, "color": "black"}},
                                 name=f"best ({result.label})"), row=1, col=1)
    fig.update_xaxes(title_text="occupancy % (static)", row=1, col=1)
    fig.update_yaxes(title_text=y_label, row=1, col=1)
    fig.update_xaxes(title_text="predicted µs (modelled)", row=1, col=2)
    fig.update_yaxes(title_text=f"{word} µs", row=1, col=2)
    fig.update_layout(title=f"{result.kernel} {result.dtype} on {result.card.name}: {len(rows)} launchable configs "
                            f"({result.mode} mode)", template="plotly_white", height=460, width=1200)
    return fig


def write_figure(result: TuneResult, path: Path) -> None:
    from iotrace.render.html_figure import write_html

    write_html(tune_figure(result), path)
