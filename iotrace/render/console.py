"""Terminal renderings of iotrace's records (cards, worked identities, occupancy) with rich.

Renderers only draw; every number they show was computed elsewhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from iotrace.cards import Card
from iotrace.derivations import Derivation, num
from iotrace.errors import IotraceError
from iotrace.occupancy import LIMIT_NAMES, OccupancyResult

__all__ = ["NATURAL_WIDTH", "PROSE_WIDTH", "RULE_WIDTH", "TABLE_WIDTH", "is_natural", "make_console", "natural_output",
           "print_card", "print_cards", "print_derivation", "print_occupancy"]

#: The width a console draws prose at in natural-width mode (a pipe, a file, ``--wide``): a sentence up to this long
#: stays on one line (so it can be grepped whole); a longer one wraps between words, never cut.
NATURAL_WIDTH = 200
#: A table is drawn at the width its cells need, up to this; a wider one wraps its prose columns between words to fit,
#: the other columns whole, so no cell is ever cut (see :meth:`_PipeSafeConsole.table_width`). Tables do not expand
#: (none sets ``expand``), so a narrow table stays narrow: no row is padded out to the console's width.
TABLE_WIDTH = 200
#: A prose column of a table wider than :data:`TABLE_WIDTH` wraps down to this width, not narrower (nor below its
#: longest word): a paragraph a few words wide reads worse than a wider table.
PROSE_WIDTH = 40
#: What fills the whole width at natural width (a rule) is drawn this wide instead, or as wide as its title needs: the
#: reports' design width.
RULE_WIDTH = 100
#: The width a table is measured at before it is fitted: wider than any real table, so nothing is squeezed.
_UNBOUNDED = 1_000_000


class _PipeSafeConsole(Console):
    """A console that lets a closed pipe (``iotrace cards | head``) end the command quietly, not with exit 1; at natural
    width it draws each table and rule as wide as it needs (see :data:`NATURAL_WIDTH`), so no cell or title is cut."""

    #: Drawn at natural width (a pipe, a file, ``--wide``): renderers then cut no cell and no name.
    natural: bool = False

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    def print(self, *objects: Any, **options: Any) -> None:
        if not self.natural or options.get("width") is not None:
            super().print(*objects, **options)
            return
        options.pop("width", None)
        if len(objects) > 1 and any(isinstance(o, (Table, Rule)) for o in objects):
            for obj in objects:  # each table or rule at its own width
                self.print(obj, **options)
            return
        width = None
        if objects and isinstance(objects[0], Table):
            width = self.table_width(objects[0])
        elif objects and isinstance(objects[0], Rule):
            # A rule spans the console's width: drawn at the design width, or wider where its title needs it (rich
            # would cut the title with an ellipsis: `iotrace tour | cat`).
            title = objects[0].title
            size = title.cell_len if isinstance(title, Text) else Text.from_markup(str(title)).cell_len
            width = max(RULE_WIDTH, size + 6) if size else RULE_WIDTH
        if width is None or width == self.width:
            super().print(*objects, **options)
        elif width < self.width:
            super().print(*objects, width=width, **options)
        else:
            # Console.print clamps ``width`` to the console's: widen the console for this one renderable.
            saved = self.width
            self.width = width
            try:
                super().print(*objects, **options)
            finally:
                self.width = saved

    def table_width(self, table: Table) -> int:
        """The width ``table`` is drawn at here: its natural width up to :data:`TABLE_WIDTH`. A wider table is fitted
        to that by wrapping its prose columns between words, widest first, never below :data:`PROSE_WIDTH` or their
        longest word; every other column keeps its natural width, so no cell is cut or folded mid-word (rich's own
        fitting shrinks every wrappable column alike, folding file and kernel names). Where that is not enough the
        table is wider than :data:`TABLE_WIDTH`. The fitted widths are set on the table's columns."""
        options = self.options.update_width(_UNBOUNDED)
        natural = Measurement.get(self, options, table).maximum
        if natural <= TABLE_WIDTH:
            return natural
        try:  # rich's per-column measure (private, stable since rich 10)
            measures = [table._measure_column(self, options, column) for column in table.columns]
            padding = [table._get_padding_width(column._index) for column in table.columns]
        except AttributeError:  # a rich without it: draw the table whole
            return natural
        widths = [m.maximum for m in measures]
        floors = [max(m.minimum, min(m.maximum, PROSE_WIDTH)) if not c.no_wrap and c.width is None else m.maximum
                  for c, m in zip(table.columns, measures, strict=True)]
        excess = natural - TABLE_WIDTH
        while excess > 0:
            shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
            if not shrinkable:
                break
            top = max(widths[i] for i in shrinkable)
            widest = [i for i in shrinkable if widths[i] == top]
            below = max([widths[i] for i in shrinkable if widths[i] < top] + [max(floors[i] for i in widest)])
            step = max(1, min(top - below, -(-excess // len(widest))))
            for i in widest:
                cut = min(step, widths[i] - floors[i], excess)
                widths[i] -= cut
                excess -= cut
        for column, width, measure, pad in zip(table.columns, widths, measures, padding, strict=True):
            if width < measure.maximum:
                column.width = max(1, width - pad)
        return natural - sum(m.maximum for m in measures) + sum(widths)


def natural_output(wide: bool = False) -> bool:
    """Whether output is drawn at natural width: with ``--wide``, or when stdout is not a terminal and ``COLUMNS``
    is unset. Rich would otherwise fall back to 80 columns in a pipe or file and cut cells to fit; an explicit
    ``COLUMNS`` is a width the user chose, so it is kept."""
    if wide:
        return True
    try:
        terminal = sys.stdout is not None and sys.stdout.isatty()
    except ValueError:  # a closed stdout
        terminal = False
    return not terminal and "COLUMNS" not in os.environ


def make_console(*, wide: bool = False, file: IO[str] | None = None, record: bool = False) -> Console:
    """The console iotrace draws on: at natural width when :func:`natural_output` (or a ``file`` is given, which is
    never a terminal); else at the terminal's width, as rich finds it."""
    natural = file is not None or natural_output(wide)
    console = _PipeSafeConsole(highlight=False, width=NATURAL_WIDTH if natural else None, file=file, record=record,
                               color_system=None if file is not None else "auto")
    console.natural = natural
    return console


def is_natural(console: Console) -> bool:
    """Whether ``console`` draws at natural width, so a renderer must cut no cell, name or rule title."""
    return isinstance(console, _PipeSafeConsole) and console.natural


def _opt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else num(value, digits)


def print_cards(console: Console, cards: Iterable[Card]) -> None:
    table = Table(title="CardBook (dense peaks, FP32 accumulate)", title_justify="left")
    table.add_column("key", no_wrap=True)
    table.add_column("name", ratio=1)
    for column in ("CC", "SMs", "mem GB", "BW GB/s", "FP32 TF", "FP16 TC TF", "FP8 TC TF"):
        table.add_column(column, justify="right", no_wrap=True)
    for card in cards:
        peaks = card.peak_tflops
        table.add_row(card.key, card.name, card.cc or "—", str(card.sm_count),
                      _opt(card.memory_gb), _opt(card.memory_bandwidth_gbs), _opt(peaks.get("fp32")),
                      _opt(peaks.get("fp16_tensor")), _opt(peaks.get("fp8_tensor")))
    console.print(table)


def print_card(console: Console, card: Card) -> None:
    table = Table(title=f"{card.name}  ({card.key}; {card.origin})", title_justify="left", show_header=True)
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_column("source")
    rows: list[tuple[str, str, str]] = [
        ("vendor / architecture", f"{card.vendor} {card.architecture} {card.chip}".strip(),
         card.source("architecture")),
        ("segment", card.segment or "—", card.source("segment")),
        ("compute capability", card.cc or "—", card.source("cc")),
        ("SMs", str(card.sm_count), card.source("sm_count")),
        ("boost clock", f"{_opt(card.boost_clock_mhz)} MHz", card.source("boost_clock_mhz")),
        ("memory", f"{_opt(card.memory_gb)} GB {card.memory_type}".strip(), card.source("memory_gb")),
        ("bandwidth", f"{_opt(card.memory_bandwidth_gbs)} GB/s", card.source("memory_bandwidth_gbs")),
        ("L2 cache", f"{_opt(card.l2_cache_mb)} MB", card.source("l2_cache_mb")),
        ("TDP", f"{_opt(card.tdp_w)} W", card.source("tdp_w")),
    ]
    for precision, tflops in card.peak_tflops.items():
        unit = "TOPS" if precision.startswith("int") else "TFLOP/s"
        rows.append((f"peak {precision}", f"{num(tflops)} {unit}", card.source(precision)))
    if card.cc is not None:
        try:
            limits = card.sm_limits
            rows.append(("per SM", f"{limits.max_warps_per_sm} warps, {limits.max_blocks_per_sm} blocks, "
                         f"{limits.regs_per_sm} regs, {limits.smem_per_sm // 1024} KB smem",
                         "sm_limits.toml"))
        except IotraceError as exc:  # an unknown CC on a detected card: say so rather than hide the card
            rows.append(("per SM", "unknown", str(exc)))
    for name, value, source in rows:
        table.add_row(name, value, source)
    console.print(table)
    console.print("[bold]sources[/bold]")
    for source in sorted({row[2] for row in rows} & set(card.citations)):
        console.print(f"  [cyan]{source}[/cyan]: {card.citations[source]}")


def print_derivation(console: Console, d: Derivation) -> None:
    console.print(f"[bold]{d.identity}[/bold]   {d.formula}   [dim]({d.kind})[/dim]")
    for q in d.inputs:
        source = f"   [dim]{q.source}[/dim]" if q.source and q.source != "given" else ""
        console.print(f"  {q.symbol:>6} = {num(q.value)} {q.unit}".rstrip() + f"   {q.meaning}{source}")
    for step in d.steps:
        console.print(f"  → {escape(step)}")
    console.print(f"  [bold green]{d.result.symbol} = {num(d.result.value)} {d.result.unit}[/bold green]"
                  f"   {d.result.meaning}")
    for q in d.also:
        console.print(f"    {q.symbol} = {num(q.value)} {q.unit}   {q.meaning}")
    for note in d.notes:
        console.print(f"  [dim]{escape(note)}[/dim]")


def print_occupancy(console: Console, r: OccupancyResult) -> None:
    console.print("[bold]occupancy (identity 6)[/bold]   occ = active warps / max warps   [dim](modelled)[/dim]")
    console.print(f"  CC {r.cc}: {r.threads_per_block} threads ({r.warps_per_block} warps) per block, "
                  f"{r.registers_per_thread} registers/thread, shared memory {r.smem_static} static + "
                  f"{r.smem_dynamic} dynamic + {r.smem_reserved} reserved = {r.allocated_smem_per_block} B allocated, "
                  f"SM carveout {r.smem_config // 1024} KB, {r.barriers} barrier(s)")
    table = Table(show_header=True, box=None, padding=(0, 2))
    table.add_column("limit")
    table.add_column("blocks/SM", justify="right")
    table.add_column("")
    for name in LIMIT_NAMES:
        mark = "◀ binds" if name in r.limiters else ("not used" if name in r.unlimited else "")
        table.add_row(name, str(r.limits[name]), mark)
    console.print(table)
    for step in r.steps:
        console.print(f"  → {escape(step)}")
    console.print(f"  [bold green]occupancy = {num(r.occupancy_pct, 4)} %[/bold green]   limited by "
                  f"{', '.join(r.limiters) or '—'}")
    if r.reason:
        console.print(f"  [bold red]cannot launch:[/bold red] {r.reason}")


def print_kernels(console: Console, rows: list[dict]) -> None:
    if not rows:
        console.print("No kernels installed: built-ins failed to register (see `iotrace kernels --json`).")
        return
    table = Table(title=f"Kernels (space sizes for the default shape on {rows[0]['space_card']})",
                  title_justify="left")
    for column in ("kernel", "summary", "dtypes", "backends: configs", "presets"):
        table.add_column(column)
    # Every preset at natural width (a pipe, a file, --wide: the column wraps, nothing is cut); a terminal gets the
    # first three and the count, so each kernel stays a row or two.
    whole = is_natural(console)
    for row in rows:
        spaces = ", ".join(f"{b}: {n}" for b, n in row["space_size"].items())
        presets = list(row["presets"])
        shown = presets if whole or len(presets) <= 3 else [*presets[:3], "…"]
        table.add_row(row["name"], row["summary"], " ".join(row["dtypes"]), spaces,
                      f"{len(presets)}: " + ", ".join(shown))
    console.print(table)


def print_run(console: Console, result, card: Card) -> None:
    """A kernel run: what was checked, the cost and roofline (modelled), resources and occupancy (static), timing."""
    shape = ",".join(f"{k}={v}" for k, v in result.shape.items())
    config = ",".join(f"{k}={v}" for k, v in result.config.items())
    console.print(f"[bold]{result.kernel}[/bold] ({result.backend}, {result.dtype}) shape {shape} on {card.name}")
    console.print(f"  config {config}")
    check = result.check
    if check.ran:
        verdict = "[bold green]correct[/bold green]" if check.correct else "[bold red]WRONG[/bold red]"
        console.print(f"  check: {verdict} against the reference (max |err| {num(check.max_abs_err)}, "
                      f"{num(check.max_err_over_tolerance)} of tolerance; seed {check.seed})"
                      + (f" — {escape(check.where)}" if check.where else ""))
    if check.note:
        console.print(f"  [dim]check: {escape(check.note)}[/dim]")
    if check.quality:
        console.print("  quality [dim](measured against the exact answer)[/dim]: "
                      + ", ".join(f"{k} {num(v, 6)}" for k, v in check.quality.items()))
    cost, roof = result.cost, result.roofline
    console.print(f"  cost [dim](modelled)[/dim]: {num(cost.flops)} FLOP, {num(cost.bytes)} B, "
                  f"I = {num(cost.intensity)} FLOP/B   [dim]{escape(cost.formula)}[/dim]")
    console.print(f"  roofline [dim](modelled)[/dim]: {roof.bound}-bound on {card.key} "
                  f"(ridge {num(roof.ridge)} FLOP/B, {roof.peak} {num(roof.peak_flop_per_s / 1e12)} TFLOP/s, "
                  f"{num(roof.bandwidth_bytes_per_s / 1e9)} GB/s) → floor {num(roof.floor_us)} µs")
    for res in result.resources:
        console.print(f"  resources [dim](static, {res.compiler} for {res.target})[/dim]: {res.kernel}: "
                      f"{res.registers} registers, {res.shared_mem_bytes} B shared memory, "
                      f"{res.spill_stores} B spill stores + {res.spill_loads} B spill loads, "
                      f"{res.barriers} barrier(s), {res.threads_per_block} threads × "
                      f"{'×'.join(map(str, res.grid))} blocks")
    occ = result.occupancy
    console.print(f"  occupancy [dim](static)[/dim]: {num(occ.occupancy_pct)} % ({occ.active_blocks_per_sm} blocks, "
                  f"{occ.active_warps_per_sm}/{occ.max_warps_per_sm} warps per SM), limited by "
                  f"{', '.join(occ.limiters)}; {num(result.waves, 3)} waves over {card.sm_count} SMs")
    if result.timing:
        t = result.timing
        console.print(f"  time [dim](measured, {t.method})[/dim]: {num(t.median_us)} µs "
                      f"(p20 {num(t.p20_us)}, p80 {num(t.p80_us)}) → {num(t.tflops)} TFLOP/s, {num(t.gbps)} GB/s, "
                      f"{num(t.pct_of_roofline)} % of the roofline floor")
    for note in result.notes:
        console.print(f"  [dim]{escape(note)}[/dim]")


def print_selfcheck(console: Console, result, out) -> None:
    """The self-check's steps and, per kernel, the verdict and (on a GPU) the time and speedups."""
    steps = Table(title=f"iotrace self-check ({result.mode}{', quick' if result.quick else ''}) on "
                        f"{escape(result.ran_on)}")
    for column in ("step", "status", "s", "why"):
        steps.add_column(column)
    for number, step in enumerate(result.steps, 1):
        steps.add_row(f"{number}. {escape(step.name)}", step.status, f"{step.seconds:.1f}", escape(step.reason))
    console.print(steps)
    rows = next((s.rows for s in result.steps if s.name.startswith("kernels")), [])
    if rows:
        table = Table(title="kernels")
        for column in ("kernel", "preset", "correct", "µs", "TFLOP/s", "GB/s", "speedup vs baselines"):
            table.add_column(column)
        for row in rows:
            speedups = ", ".join(f"{escape(name)} {b['speedup']}×" if "speedup" in b else
                                 f"{escape(name)} {b['us']} µs" if "us" in b else f"{escape(name)}: error"
                                 for name, b in row.get("baselines", {}).items())
            table.add_row(escape(row["kernel"]), escape(str(row["preset"])), str(row["correct"]),
                          *(num(row[k]) if row.get(k) is not None else "—" for k in ("us", "tflops", "gbps")),
                          speedups or "—")
        console.print(table)
    console.print(f"results: {escape(str(out / 'results.md'))}, {escape(str(out / 'results.json'))}")
