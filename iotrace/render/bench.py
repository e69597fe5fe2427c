"""Terminal and Markdown renderings of a model bench (``iotrace bench``) and of imported engine results.

They draw the bench's JSON document (``iotrace.bench/1``, :meth:`iotrace.model.measure.BenchResult.to_dict`) and the
import table; every number was computed elsewhere.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["bench_markdown", "print_bench", "print_imported"]


def _f(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _pm(spread: dict[str, Any], digits: int = 1) -> str:
    """``mean ± standard deviation``; one repetition has no spread (the sample deviation needs two), so its ± is
    n/a, not a 0.0 that reads as a perfectly steady figure."""
    if not spread["values"]:
        return "n/a"
    spread_text = f"{spread['stddev']:,.{digits}f}" if len(spread["values"]) > 1 else "n/a"
    return f"{spread['mean']:,.{digits}f} ± {spread_text}"


def _gb(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 1e9:.2f} GB"


def _of(wall: dict[str, Any] | None) -> str:
    """A wall's "of wall" cell: the fraction, or n/a (no wall, or a wall the run is not a fraction of)."""
    return "n/a" if not wall or wall.get("fraction") is None else f"{wall['fraction']:.1%}"


def _card_walls_dtype(data: dict[str, Any]) -> str | None:
    """The dtype the named card's walls are for (None: no card wall in the run)."""
    pre = data["prefill"]["prefill_wall"]
    card_walls = [w for d in data["decode"] for w in d.get("walls", [])[1:]]
    return (pre or {}).get("dtype") or (card_walls[0].get("dtype") if card_walls else None)


def print_bench(console: Console, data: dict[str, Any]) -> None:
    m, card = data["model"], data["card"]
    for label in data["labels"]:
        console.print(f"[bold yellow]{escape(label)}[/]")
    at = _card_walls_dtype(data)
    named = "none named (no card walls)" if not card else card["key"] + (f" (its walls at {at})" if at else "")
    console.print(f"[bold]{escape(m['name'])}[/]  {escape(m['source'])}  {m['params'] / 1e6:,.1f} M params, "
                  f"{_gb(m['weight_bytes'])} of weights read per step  ·  {escape(data['device'])}  ·  kernels "
                  f"{data['kernels']}, {data['dtype']}  ·  card {named}")
    gen = data["generated"]
    console.print(f"prompt {data['prompt']['tokens']} tokens, batch {data['batch']}; quality {m['quality']}")
    if gen["text"]:
        console.print(f"generated: {escape(repr(gen['text'][0]))}")
    elif gen["ids"]:
        console.print(f"generated ids: {gen['ids'][0][:16]}{' …' if len(gen['ids'][0]) > 16 else ''}")

    pre = data["prefill"]
    table = Table(title="prefill (depth 0)", title_justify="left")
    for col in ("tok/s", "TTFT ms", "wall tok/s (identity 2)", "of wall"):
        table.add_column(col, justify="right")
    wall = pre["prefill_wall"]
    table.add_row(_pm(pre["tok_s"]), _pm(pre["ttft_ms"], 2), _f(wall["tok_s"], 0) if wall else "n/a", _of(wall))
    console.print(table)
    if wall:
        console.print(f"prefill wall: {wall.get('card') or card['key']} at {wall['precision']}"
                      + (f"; of wall n/a: {escape(wall['no_fraction'])}" if wall.get("no_fraction") else ""))

    own = next((d["decode_wall"] for d in data["decode"] if d["decode_wall"]), None)
    title = "decode" + (f" (wall: {own['bandwidth_source']}, {own['dtype']})" if own and own.get("dtype") else "")
    table = Table(title=escape(title), title_justify="left")
    for col in ("depth", "context", "tok/s", "ITL p50 ms", "p90", "p99", "bytes/step", "wall tok/s (identity 1)",
                "of wall", "J/token", "mean W"):
        table.add_column(col, justify="right")
    for d in data["decode"]:
        w, e = d["decode_wall"], d["energy"]
        energy = ("n/a", "n/a") if not e else (
            (_f(e["j_per_token"], 3), _f(e["mean_w"], 0)) if e["trusted"] else ("too short", "too short"))
        table.add_row(str(d["depth"]), str(d["context_start"]), _pm(d["decode_tok_s"]), _f(d["itl_ms"]["p50"], 2),
                      _f(d["itl_ms"]["p90"], 2), _f(d["itl_ms"]["p99"], 2), _gb(d["bytes_per_step"]),
                      _f(w["tok_s"], 0) if w else "n/a", _of(w), *energy)
    console.print(table)
    _print_walls(console, data["decode"])
    if not card:
        console.print("card walls: none named - --card NAME puts a GPU's identities 1 and 2 beside the figures")
    for d in data["decode"]:
        if d["energy"] and d["energy"]["note"]:
            console.print(f"energy at depth {d['depth']}: {escape(d['energy']['note'])}")
    mem = data["memory"]
    console.print(f"memory: peak allocated {_gb(mem['peak_allocated_bytes'])}, device used "
                  f"{_gb(mem['device_used_bytes'])}{'  (' + mem['note'] + ')' if mem['note'] else ''}")
    _print_breakdown(console, data.get("breakdown"))
    console.print(f"argv: {escape(' '.join(data['manifest']['argv']))}")


def _print_walls(console: Console, depths: list[dict[str, Any]]) -> None:
    """Every decode wall of every depth: where its bandwidth came from, the dtype its bytes are costed at, and the
    run's fraction of it, or why there is none."""
    walls = [(d, w) for d in depths for w in d.get("walls") or []]
    if not walls:
        return
    table = Table(title="decode walls (identity 1: batch · bandwidth / bytes per step)", title_justify="left")
    for col in ("depth", "bandwidth from", "GB/s", "dtype", "weights", "bytes/step", "wall tok/s", "of wall"):
        table.add_column(col, justify="left" if col in ("bandwidth from", "dtype") else "right")
    for d, w in walls:
        table.add_row(str(d["depth"]), escape(w["bandwidth_source"]), _f(w["bandwidth_gbs"]), w.get("dtype") or "n/a",
                      _gb(w.get("weight_bytes")), _gb(w.get("bytes_per_step")), _f(w["tok_s"], 0), _of(w))
    console.print(table)
    for source, reason in dict.fromkeys((w["bandwidth_source"], w["no_fraction"]) for _, w in walls
                                        if w.get("no_fraction")):
        console.print(f"of wall n/a for {escape(source)}: {escape(reason)}")


def _print_breakdown(console: Console, b: dict[str, Any] | None) -> None:
    if not b:
        return
    floors = f"{b['card']} at {b['floor_dtype']}" if b["card"] and b.get("floor_dtype") else b["card"] or "no card"
    table = Table(title=f"one decode step at context {b['context']}, floors on {floors}", title_justify="left")
    for col in ("kernel", "launches", "floor µs", "measured µs"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for row in b["kernels"]:
        table.add_row(row["kernel"], "" if row["launches"] is None else str(row["launches"]), _f(row["floor_us"]),
                      _f(row["measured_us"]))
    console.print(table)
    console.print(f"sum of floors {_f(b['floor_sum_us'])} µs; measured step {_f(b['step_us'])} µs; gap "
                  f"{_f(b['gap_us'])} µs; eager step {_f(b['eager_step_us'])} µs, launch overhead "
                  f"{_f(b['launch_overhead_us'])} µs" + (f"  ({escape(b['note'])})" if b["note"] else ""))


def bench_markdown(data: dict[str, Any]) -> str:
    """A header and one row per depth, ready for a CardBook recipe's table."""
    head = ("| card | device | model | dtype | kernels | batch | prompt | pp tok/s | depth | tg tok/s | decode wall "
            "| of wall | command |")
    rule = "|" + "---|" * 13
    rows = [head, rule]
    card = data["card"]["key"] if data["card"] else "-"
    for d in data["decode"]:
        w = d["decode_wall"]
        fraction = _of(w)
        rows.append(f"| {card} | {data['device']} | {data['model']['name']} | {data['dtype']} | {data['kernels']} | "
                    f"{data['batch']} | {data['prompt']['tokens']} | {_pm(data['prefill']['tok_s'])} | {d['depth']} | "
                    f"{_pm(d['decode_tok_s'])} | {_f(w['tok_s'], 0) if w else 'n/a'} | "
                    f"{fraction} | `{' '.join(data['manifest']['argv'])}` |")
    return "\n".join(rows)


def print_imported(console: Console, table: Any) -> None:
    """The import table (a DataFrame) as a rich table, every column, every row."""
    out = Table(title="imported bench results", title_justify="left")
    for col in table.columns:
        # Folded, never cut with an ellipsis: a narrow terminal wraps a cell instead of losing its end.
        out.add_column(str(col), justify="right" if table[col].dtype.kind in "if" else "left", overflow="fold")
    for row in table.itertuples(index=False):
        out.add_row(*("n/a" if cell is None or cell != cell else
                      (f"{cell:,.2f}" if isinstance(cell, float) else str(cell)) for cell in row))
    console.print(out)
