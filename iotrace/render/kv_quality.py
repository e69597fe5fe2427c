"""Terminal rendering of the INT8 KV quality measurement (``iotrace.kv_quality/1``, the dict
:meth:`iotrace.model.kv_quality.KVQualityResult.to_dict` returns), and its table as columns and rows for a note.

Every number was computed elsewhere; this module only lays them out, the 16-bit cache first as the reference row.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["KV_COLUMNS", "kv_layer_rows", "kv_section_rows", "print_kv_quality"]

#: The summary table's columns, one row per cache.
KV_COLUMNS = ("cache", "bytes/token", "saved", "context at budget", "min layer cosine (layer)", "KL mean nats",
              "top-1 agree", "ppl", "ppl change", "key values clipped")


def _clipped(s: dict[str, Any]) -> str:
    if not s["checked_values"]:
        return "none (per-token scales)"
    return f"{s['clipped_values']:,} of {s['checked_values']:,} ({s['clipped_values'] / s['checked_values']:.2%})"


def kv_section_rows(data: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(columns, rows) of the summary: the 16-bit cache, then each INT8 scheme with its bytes saved beside its
    quality figures (a note's table or the terminal's)."""
    ref_bytes, ref_ctx = data["reference_bytes_per_token"], data["reference_context_tokens"]
    schemes = data["schemes"]
    ppl_ref = schemes[0]["quality"]["ppl_reference"] if schemes else None
    rows = [(f"{data['cache_dtype']} (reference)", f"{ref_bytes:,.0f}", "—", f"{ref_ctx:,}", "1 (itself)", "0", "100%",
             "n/a" if ppl_ref is None else f"{ppl_ref:.4f}", "—", "—")]
    for s in schemes:
        q = s["quality"]
        rows.append((
            f"int8 {s['scheme']} (key_scales={s['key_scales']})", f"{s['bytes_per_token']:,.0f}",
            f"{1 - s['bytes_per_token'] / ref_bytes:.1%} ({s['bytes_ratio']:.2f}x)",
            f"{s['context_tokens']:,} ({s['context_tokens'] / ref_ctx:.2f}x)",
            f"{s['min_cosine']:.6f} ({s['min_cosine_layer']})", f"{q['kl_mean']:.2e}", f"{q['top1_agreement']:.2%}",
            f"{q['ppl']:.4f}", f"{q['ppl_change_pct']:+.3f}%", _clipped(s)))
    return KV_COLUMNS, rows


def kv_layer_rows(data: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(columns, rows) of the per-layer cosines: each scheme's local cosine and, after the slash, end to end."""
    schemes = data["schemes"]
    columns = ("layer", *(f"{s['scheme']} local / end to end" for s in schemes))
    layers = len(schemes[0]["layer_cosine"]) if schemes else 0
    rows = [(str(i), *(f"{s['layer_cosine'][i]:.6f} / {s['layer_cosine_end_to_end'][i]:.6f}" for s in schemes))
            for i in range(layers)]
    return columns, rows


def print_kv_quality(console: Console, data: dict[str, Any], layers: bool = False) -> None:
    """The summary table (and with ``layers`` the per-layer cosines) with the run's conditions above it."""
    console.print(f"[bold]{escape(data['model'])}[/]: INT8 KV cache against the {data['cache_dtype']} cache, "
                  f"{data['tokens']:,} tokens of {escape(data['text'])} as one context, teacher forced")
    console.print(f"per-channel scales and kept channels ({data['kept_channels']} per KV head) calibrated on the first "
                  f"{data['calibration']} tokens; context at a budget of {data['budget_bytes'] / 2**30:g} GiB of KV "
                  f"cache (identity 3); cosine: attention outputs against the 16-bit cache on the same q, k, v")
    columns, rows = kv_section_rows(data)
    table = Table(title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if layers:
        columns, rows = kv_layer_rows(data)
        table = Table(title="attention-output cosine per layer", title_justify="left")
        for i, col in enumerate(columns):
            table.add_column(col, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    console.print(f"quant --kv took {data['seconds']:.0f} s (wall time: the long context with each scheme; loading the "
                  "model not counted)")
