"""Terminal and Markdown renderings of the quantisation lab (``iotrace quant``).

They draw the lab's JSON document (``iotrace.quant/1``, :meth:`iotrace.model.quant_lab.QuantLabResult.to_dict`)
and the list of formats; every number was computed elsewhere. Rows keep the order the formats were asked for: a
table, not a ranking.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["print_formats", "print_quant", "quant_header", "quant_markdown", "quant_rows"]

_QUALITY = ("KL mean (nats)", "KL p99", "top-1 agreement", "ppl", "ppl change")


def quant_header(data: dict[str, Any]) -> list[str]:
    """The lines above the table: what the baseline is, the text, the windows, what was quantised."""
    window = "one window" if data["window"] is None else f"windows of {data['window']} tokens"
    head = "the tied embedding/LM head quantised too" if data["include_head"] else \
        "the tied embedding/LM head kept at the file's Q8_0 (8.5 bits)"
    return [f"Baseline: {data['baseline']}.",
            f"{data['model']}: {data['params'] / 1e6:,.1f} M weights streamed per decode token; every layer matrix "
            f"quantised, {head}; norms at 16 bits.",
            f"Quality: teacher-forced over {data['tokens']} tokens of {data['text']}, {window}, fp32 on the CPU "
            "(KL(baseline ‖ format) per position; top-1: same argmax).",
            "Decode wall: identity 1, B / (N · q) at batch 1 with the card's CardBook bandwidth (KV reads not "
            "counted). A table, not a ranking: rows in the order asked for."]


def quant_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and cells shared by the terminal and Markdown tables."""
    cards = data["cards"]
    header = ["format", "bits/weight", "head bits", "MB/token",
              *(f"{c['key']} tok/s" for c in cards), *_QUALITY]
    rows = []
    for r in data["rows"]:
        q = r["quality"]
        quality = ["— (baseline)"] * len(_QUALITY) if q is None else [
            f"{q['kl_mean']:.4f}", f"{q['kl_p99']:.4f}", f"{q['top1_agreement']:.3f}", f"{q['ppl']:.3f}",
            f"{q['ppl_change_pct']:+.2f}%"]
        rows.append([r["key"], f"{r['bits_per_weight']:.3f}", f"{r['head_bits']:.3f}",
                     f"{r['weight_bytes_per_token'] / 1e6:.1f}",
                     *(f"{r['decode_tok_s'][c['key']]:,.0f}" for c in cards), *quality])
    return header, rows


def _footer(data: dict[str, Any]) -> list[str]:
    rows = [r for r in data["rows"] if r["quality"] is not None]
    lines = [f"Baseline perplexity {rows[0]['quality']['ppl_reference']:.3f}" if rows else ""]
    for r in rows:
        if r["key"] == "q4_1" and r["quality"]["kl_mean"] < 1e-6:
            lines.append("q4_1 re-quantises the baseline (itself Q4_1 in 32-blocks) to the same values: KL "
                         f"{r['quality']['kl_mean']:.2g}. Expected, not a bug: those blocks already hold 16 levels "
                         "between their min and max.")
    lines.append(f"quant took {data['seconds']:.1f} s (wall time: quantising and scoring every format; loading the "
                 "model not counted).")
    return [line for line in lines if line]


def print_quant(console: Console, data: dict[str, Any]) -> None:
    for line in quant_header(data):
        console.print(escape(line))
    header, rows = quant_rows(data)
    table = Table(title_justify="left")
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(escape(c) for c in row))
    console.print(table)
    for line in _footer(data):
        console.print(escape(line))


def quant_markdown(data: dict[str, Any]) -> str:
    header, rows = quant_rows(data)
    lines = [*(f"{line}  " for line in quant_header(data)), "",
             "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join([*lines, "", *_footer(data)]) + "\n"


def print_formats(console: Console, formats: list[dict[str, Any]]) -> None:
    """The format families (``iotrace quant --list-formats``)."""
    table = Table(title="weight formats (N: elements per group along a row; must divide every input dimension)",
                  title_justify="left")
    for col in ("format", "bits/weight", "what", "source"):
        table.add_column(col)
    for f in formats:
        table.add_row(escape(f["key"]), escape(f["bits_per_weight"]), escape(f["description"]), escape(f["source"]))
    console.print(table)
