"""Note: weight quantisation formats on the pinned model — bits, bytes, the decode wall and the quality drop — and
the INT8 KV cache on the same model.

Every weight figure comes from one :func:`iotrace.model.quant_lab.run_lab` over the first NOTE_TOKENS tokens of the
shipped text, every KV-cache figure from one :func:`iotrace.model.kv_quality.kv_quality` over KV_TOKENS, fp32 on the
CPU (deterministic on one machine; figures are rounded to the digits a re-run on another CPU keeps). The baseline is
the dequantised Q4_1 file, and the note says so wherever a quality figure appears.
"""

from __future__ import annotations

from typing import Any

from iotrace.cards import lookup
from iotrace.derivations import num
from iotrace.kernels.int8_kv import KEY_MIXED, KEY_PER_CHANNEL, KEY_PER_TOKEN, KEY_TOKEN_KEPT
from iotrace.model.quant_formats import DEFAULT_FORMATS, parse_formats
from iotrace.model.quant_lab import BASELINE, QuantLabResult, load_baseline, run_lab
from iotrace.model.weights import LlamaWeights
from iotrace.notes.document import Note, table

__all__ = ["CARDS", "NOTE_TOKENS", "NOTE_WINDOW", "build"]

CARDS = ("rtx3090", "h100-sxm", "gb10")
#: Tokens of the shipped text the note scores: 128 keeps the whole note (load, 11 prefills of 128 tokens, the
#: quantisation of every format) near a minute on a 2-core CPU; `iotrace quant` with no --tokens scores all 3,669.
NOTE_TOKENS = 128
NOTE_WINDOW = 128
_COMMAND = f"iotrace quant --tokens {NOTE_TOKENS} --window {NOTE_WINDOW} --card {','.join(CARDS)}"

#: The INT8 KV section: every key scheme over one context of KV_TOKENS tokens, calibrated on the first
#: KV_CALIBRATION (the issue's target is a text of at least 2,000 tokens).
KV_SCHEMES = (KEY_PER_TOKEN, KEY_PER_CHANNEL, KEY_MIXED, KEY_TOKEN_KEPT)
KV_TOKENS = 2048
KV_CALIBRATION = 128


def _sig(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}"


def _formats_table(result: QuantLabResult) -> str:
    rows = []
    for f in parse_formats(",".join(DEFAULT_FORMATS)):
        d = f.to_dict()
        rows.append([f.key, d["bits_per_weight"], d["description"], d["source"]])
    return table(["format", "bits/weight (scales included)", "rule", "definition"], rows)


def _bytes_table(result: QuantLabResult) -> str:
    cards = [lookup(key) for key in CARDS]
    rows = []
    for r in result.rows:
        rows.append([r.key, f"{r.bits_per_weight:.3f}", f"{r.head_bits:g}", f"{r.weight_bytes_per_token / 1e6:.1f}",
                     *(f"{r.decode_tok_s[c.key]:,.0f}" for c in cards)])
    return table(["format", "layer bits/weight", "head bits/weight", "MB per token (N·q)",
                  *(f"{c.name} tok/s ({num(c.memory_bandwidth_gbs)} GB/s)" for c in cards)], rows)


def _quality_table(result: QuantLabResult) -> str:
    rows = []
    for r in result.rows:
        q = r.quality
        if q is None:
            rows.append([r.key, "0 (baseline)", "0", "1", "—", "—"])
            continue
        same = round(q.top1_agreement * q.tokens)
        rows.append([r.key, _sig(q.kl_mean), _sig(q.kl_p99), f"{same}/{q.tokens} ({q.top1_agreement:.3f})",
                     f"{q.ppl:.2f}", f"{q.ppl_change_pct:+.1f}%"])
    return table(["format", "KL mean (nats)", "KL p99", "top-1 agreement", "perplexity", "vs baseline"], rows)


def build() -> Note:
    """The note: the weight formats, then the INT8 KV cache on the same model."""
    weights, tokenizer = load_baseline()
    result = run_lab(weights, tokenizer, parse_formats(",".join(DEFAULT_FORMATS)), CARDS, tokens=NOTE_TOKENS,
                     window=NOTE_WINDOW)
    q4_1 = next(r for r in result.rows if r.key == "q4_1")
    ppl_ref = next(r.quality.ppl_reference for r in result.rows if r.quality is not None)
    note = Note("quantisation", "Weight quantisation formats on SmolLM2-135M: bits, bytes, decode wall, quality", {
        "model": f"{result.model}, the pinned Q4_1 GGUF (`iotrace bench`'s model)",
        "baseline": BASELINE,
        "text": f"{result.text}; the first {result.tokens} tokens, windows of {NOTE_WINDOW}",
        "kind": "bits, bytes and walls computed (identity 1, modelled); quality measured in fp32 on the CPU"})
    note.add("formats", "The formats and their definitions",
             "Each format is a quantise → dequantise round trip in torch that follows its definition "
             "(`iotrace/model/quant_formats.py`; the GGUF types match the `gguf` package's own quantiser bit for "
             "bit, and each format's exactly representable values come back exactly: `tests/test_quant_formats.py`). "
             "Scales run along a row (the input dimension) in blocks that must divide it: 576 and 1,536 here, so "
             "128-element groups are refused (576 / 128 = 4.5) and the int4 rows use 32 and 64.",
             _formats_table(result),
             "Reproduce: `iotrace quant --list-formats`.")
    note.add("bytes", "Bits, bytes per token and the decode wall",
             f"A decode step at batch 1 streams every weight once: N = {result.params / 1e6:,.1f} M weights, of which "
             "the tied embedding/LM head (28.3 M) stays at the file's Q8_0 (8.5 bits) in every row, as llama.cpp "
             "keeps `token_embd` above the layers' precision; norms count at 16 bits. The wall is identity 1, "
             "B / (N · q), with the CardBook bandwidth: a ceiling, not a measurement (KV-cache reads not counted). "
             "The first two rows are the baseline's own values: stored at 16 bits, and as the file stores them.",
             _bytes_table(result),
             f"Reproduce: `{_COMMAND}` (the bytes and walls do not depend on --tokens).")
    note.add("quality", "Quality drop against the baseline (the dequantised Q4_1 file)",
             f"Teacher-forced over {result.tokens} tokens of the shipped text in windows of {NOTE_WINDOW} (each "
             "from an empty cache): KL(baseline ‖ format) per position in nats, its 99th percentile, the share of "
             "positions whose most likely next token is the same, and the perplexity of the true next tokens "
             f"(the baseline's: {ppl_ref:.2f}). The baseline is the dequantised Q4_1 file, not the original bf16 "
             "checkpoint: a format's drop is measured from an already 5-bit model. A table, not a ranking.",
             _quality_table(result),
             f"Reproduce: `{_COMMAND} --json` (the whole text: `iotrace quant`).")
    kl = q4_1.quality.kl_mean if q4_1.quality else float("nan")
    note.add("q4-1", "Re-quantising Q4_1 as Q4_1",
             f"The baseline's layers are Q4_1 in 32-element blocks, so quantising them again as q4_1 gives KL "
             f"{_sig(kl)}: each block already holds values on 16 levels between its min and max, which the same "
             "rule maps back to the same levels. It is the expected result of the baseline's own format, not a "
             "bug, and the reason the drops of the other formats are drops from a 5-bit model.")
    _kv_section(note, weights, tokenizer)
    return note


def _kv_section(note: Note, weights: LlamaWeights, tokenizer: Any) -> None:
    """The INT8 KV cache on the same model: every key scheme against the 16-bit cache over one long context."""
    from iotrace.model.kv_quality import kv_quality
    from iotrace.render.kv_quality import kv_section_rows

    data = kv_quality(weights, tokenizer, schemes=KV_SCHEMES, tokens=KV_TOKENS, calibration=KV_CALIBRATION).to_dict()
    columns, rows = kv_section_rows(data)
    fixed = next(s for s in data["schemes"] if s["key_scales"] == KEY_TOKEN_KEPT)
    note.add("kv-int8", "The INT8 KV cache on the model's own keys and values",
             f"The same weights (the dequantised Q4_1 file) read the first {data['tokens']:,} tokens of the shipped "
             f"text as one context, teacher forced, with the {data['cache_dtype']} cache (K and V rounded to it, as a "
             "GPU run keeps them; attention in fp32) and with each INT8 key scheme of the `attention-decode-int8` "
             "plugin, quantised by the plugin's own quantiser; V is per token and KV head in every scheme. "
             f"Per-channel scales and the kept channels are calibrated on the first {data['calibration']} tokens "
             "(the prompt a cache is created with) and reused for every later token, which clamps. The cosine is "
             "each layer's attention output against the 16-bit cache on the same q, k and v (the layer's own "
             "error); the minimum over the layers is shown. KL, top-1 and perplexity are the model's next-token "
             f"distributions against the 16-bit cache; bytes per token are identity 3 (int8 values, fp32 scales, "
             f"16-bit kept channels), and the context is what a {data['budget_bytes'] / 2**30:g} GiB KV budget holds.",
             table(list(columns), [list(r) for r in rows]),
             "Static per-channel key scales clip on real keys (RoPE turns each channel pair through angles the "
             "calibration prompt has not reached), and per-token scales let a few outlier channels set the whole "
             f"row's step. Per-token scales with the {data['kept_channels']} widest calibrated channels kept in 16 "
             f"bits (`key_scales={KEY_TOKEN_KEPT}`, the plugin's default) hold every layer at "
             f"{fixed['min_cosine']:.6f} or above with perplexity {fixed['quality']['ppl_change_pct']:+.3f}% against "
             f"the 16-bit cache, at {fixed['bytes_per_token']:,.0f} bytes per token against "
             f"{data['reference_bytes_per_token']:,.0f}.",
             f"Reproduce: `iotrace quant --kv --tokens {KV_TOKENS} --calibration {KV_CALIBRATION} --layers`.")
