"""The quantisation lab: each weight format applied to the pinned model, beside its bytes, its decode wall and its
quality drop.

The baseline is the pinned GGUF as loaded: Q4_1 layer matrices and a Q8_0 embedding (tied to the LM head),
dequantised by the ``gguf`` package to fp32 on the CPU. Every "16-bit model" figure here is that dequantised
file, not the original bf16 checkpoint (which is not shipped). A format re-quantises the baseline's values.

Which tensors: every layer matrix (fused QKV, O, fused gate/up, down). The tied embedding / LM head keeps the
file's Q8_0 values unless ``include_head``, as llama.cpp's ``llama-quantize`` keeps ``token_embd`` / ``output`` at
a higher precision than the layers; it is 28.3M of the model's 134.5M streamed weights, so the choice moves the
bytes a lot. Norms stay fp32 and are counted at 16 bits (0.03% of the bytes).

Per format: bits per weight of the quantised matrices (scales included); weight bytes per decode token (identity
1's N · q: every streamed weight once); the decode wall B / (N · q) on named cards; and
:class:`~iotrace.model.quality.QualityDrop` against the baseline over the shipped text in windows.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from iotrace import identities as ident
from iotrace.cards import lookup
from iotrace.model.gguf_file import LlamaConfig
from iotrace.model.quality import EVAL_TEXT_SOURCE, QualityDrop, quality_drop, teacher_forced_logits, text_ids
from iotrace.model.quant_formats import QuantFormat
from iotrace.model.weights import LayerWeights, LlamaWeights

__all__ = ["BASELINE", "QuantLabResult", "QuantRow", "check_formats", "head_bits", "load_baseline", "matrix_shapes",
           "quantise_weights", "run_lab", "step_bytes"]

#: How every output names the reference the quality drop is measured against.
BASELINE = ("the pinned GGUF dequantised to fp32 (Q4_1 layer matrices, Q8_0 tied embedding/LM head): the baseline "
            "'16-bit model' is the dequantised Q4_1 file")
#: The file's own layer format and head format (their bits per weight: ggml's block sizes, 20 and 34 bytes per 32).
FILE_LAYER_BITS, FILE_HEAD_BITS = 5.0, 8.5
_MATRICES = ("wqkv", "wo", "w_gate_up", "w_down")
_NORM_BYTES = 2  # norms counted at 16 bits

#: progress(done, total, what)
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class QuantRow:
    """One format (or a reference row) on the model."""

    key: str
    description: str
    #: bits per weight of the quantised matrices, scales included
    bits_per_weight: float
    #: bits per weight of the LM head as streamed (8.5: the file's Q8_0, unless the head is quantised too)
    head_bits: float
    #: identity 1's N · q: every weight a decode step streams, in bytes
    weight_bytes_per_token: float
    #: card key → decode wall B / (N · q) in tok/s (batch 1, KV reads not counted)
    decode_tok_s: dict[str, float]
    #: None for the reference rows (they are the baseline's own values)
    quality: QualityDrop | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["quality"] = None if self.quality is None else self.quality.to_dict()
        return d


@dataclass(frozen=True)
class QuantLabResult:
    model: str
    baseline: str
    text: str
    tokens: int
    window: int | None
    include_head: bool
    params: int
    cards: list[dict[str, Any]]
    rows: list[QuantRow]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "iotrace.quant/1", "model": self.model, "baseline": self.baseline, "text": self.text,
                "tokens": self.tokens, "window": self.window, "include_head": self.include_head,
                "params": self.params, "cards": self.cards, "rows": [r.to_dict() for r in self.rows],
                "seconds": self.seconds}


def _streamed(weights: LlamaWeights) -> tuple[int, int, int]:
    """(matrix params, head params, norm params) a decode step streams."""
    matrices = sum(getattr(layer, m).numel() for layer in weights.layers for m in _MATRICES)
    norms = sum(layer.attn_norm.numel() + layer.ffn_norm.numel() for layer in weights.layers) + weights.norm.numel()
    return matrices, weights.lm_head.numel(), norms


def _matrix_bits(weights: LlamaWeights, fmt: QuantFormat) -> float:
    """Mean bits per weight over the layer matrices (the per-row and per-tensor scales depend on each shape)."""
    bits = n = 0.0
    for layer in weights.layers:
        for m in _MATRICES:
            t = getattr(layer, m)
            bits += fmt.bits_per_weight((t.shape[0], t.shape[1])) * t.numel()
            n += t.numel()
    return bits / n


def head_bits(weights: LlamaWeights, fmt: QuantFormat | None, include_head: bool) -> float:
    h = weights.lm_head
    return fmt.bits_per_weight((h.shape[0], h.shape[1])) if include_head and fmt else FILE_HEAD_BITS


def step_bytes(weights: LlamaWeights, matrix_bits: float, head_bits_per_weight: float) -> float:
    """Bytes of weights one decode step streams (identity 1's N · q)."""
    matrices, head, norms = _streamed(weights)
    return matrices * matrix_bits / 8 + head * head_bits_per_weight / 8 + norms * _NORM_BYTES


def matrix_shapes(config: LlamaConfig, include_head: bool = False) -> dict[str, tuple[int, int]]:
    """The (out, in) shape of each matrix a format is applied to, by name (the same for every layer)."""
    c = config
    shapes = {"wqkv (attn_q/k/v)": ((c.heads + 2 * c.kv_heads) * c.head_dim, c.hidden),
              "wo (attn_output)": (c.hidden, c.heads * c.head_dim),
              "w_gate_up (ffn_gate/up)": (2 * c.intermediate, c.hidden),
              "w_down (ffn_down)": (c.hidden, c.intermediate)}
    if include_head:
        shapes["the LM head (token_embd)"] = (c.vocab, c.hidden)
    return shapes


def check_formats(config: LlamaConfig, formats: Sequence[QuantFormat], include_head: bool = False) -> None:
    """Refuse, before any weight is touched, a format whose block does not divide a matrix's input dimension."""
    for fmt in formats:
        for name, shape in matrix_shapes(config, include_head).items():
            fmt.check(shape, name)


def quantise_weights(weights: LlamaWeights, fmt: QuantFormat, include_head: bool = False) -> LlamaWeights:
    """A copy of ``weights`` with every layer matrix (and the tied embedding/LM head with ``include_head``) rounded
    to ``fmt``; norms unchanged. Checks every shape before quantising any.

    The fused matrices (QKV, gate/up) are quantised as one matrix: block and per-row scales are the same as for the
    separate tensors, while a per-tensor scale (fp8-tensor, NVFP4's fp32 scale) is shared by the fused parts."""
    check_formats(weights.config, [fmt], include_head)
    layers = []
    for i, layer in enumerate(weights.layers):
        q = {m: fmt.quantise(getattr(layer, m), f"blk.{i}.{m}").to(weights.dtype) for m in _MATRICES}
        layers.append(LayerWeights(attn_norm=layer.attn_norm, ffn_norm=layer.ffn_norm, **q))
    head = fmt.quantise(weights.lm_head, "the LM head").to(weights.dtype) if include_head else weights.lm_head
    tied = weights.lm_head is weights.embed
    return dataclasses.replace(weights, layers=layers, lm_head=head, embed=head if tied else weights.embed,
                               source=f"{weights.source}, layers{' and head' if include_head else ''} as {fmt.key}")


def _walls(bytes_per_token: float, params: int, cards: Sequence[str]) -> dict[str, float]:
    return {key: ident.decode_tokens_per_s(lookup(key).bandwidth_bytes_per_s, params, bytes_per_token / params)
            for key in cards}


def _span(ids: Sequence[int], window: int | None) -> int:
    """The tokens each teacher-forced window holds (None and any window past the text score it as one)."""
    return min(window or len(ids), len(ids))


#: QualityDrop per (format definition, head, ids, window span) on the cached :func:`load_baseline` weights only: the
#: quantisation note, tests/test_quant_lab.py and the docs' `quant` examples (xdist_group "quant-lab") score the same
#: formats on the same text, once per process. A QualityDrop is frozen.
_DROPS: dict[tuple[Any, ...], QualityDrop] = {}


def _drop_key(weights: LlamaWeights, fmt: QuantFormat, include_head: bool, ids: Sequence[int],
              window: int | None) -> tuple[Any, ...] | None:
    if not (load_baseline.cache_info().currsize and weights is load_baseline()[0]):
        return None  # weights of the caller's own: measured every time
    definition = (fmt.key, fmt.family, fmt.block, fmt.element_bits, fmt.scale_bits, fmt.scale_per)
    return definition, include_head, tuple(ids), _span(ids, window)


def run_lab(weights: LlamaWeights, tokenizer: Any, formats: Sequence[QuantFormat], cards: Sequence[str],
            tokens: int | None = None, window: int | None = 512, include_head: bool = False,
            progress: Progress | None = None) -> QuantLabResult:
    """Every format in ``formats`` on ``weights`` (the baseline, fp32 on the CPU) over the shipped text."""
    from iotrace.model.ops import TorchOps

    started = time.perf_counter()
    check_formats(weights.config, formats, include_head)  # a format that cannot apply fails before any model runs
    cards = [lookup(key).key for key in cards]  # aliases (h100) to CardBook keys
    ids = text_ids(tokenizer, tokens=tokens)
    matrices, head, norms = _streamed(weights)
    params = matrices + head + norms
    ops = TorchOps()
    total = len(formats) + 1
    say = progress or (lambda done, total, what: None)
    keys = [_drop_key(weights, fmt, include_head, ids, window) for fmt in formats]

    say(0, total, "baseline logits")
    t0 = time.perf_counter()
    measured = [key is None or key not in _DROPS for key in keys]
    reference = teacher_forced_logits(weights, ops, ids, window) if any(measured) else None
    rows = []
    for key, bits, head_b, what in (("16-bit", 16.0, 16.0, "the baseline's values stored at 16 bits per weight"),
                                    ("gguf file", FILE_LAYER_BITS, FILE_HEAD_BITS,
                                     "the pinned file as stored: Q4_1 layers, Q8_0 head (the baseline's values)")):
        size = step_bytes(weights, bits, head_b)
        rows.append(QuantRow(key, what, bits, head_b, size, _walls(size, params, cards), None,
                             time.perf_counter() - t0 if key == "16-bit" else 0.0))
    for n, (fmt, key, measure) in enumerate(zip(formats, keys, measured, strict=True), start=1):
        say(n, total, fmt.key)
        t0 = time.perf_counter()
        if measure:
            candidate = quantise_weights(weights, fmt, include_head)
            drop = quality_drop(reference, teacher_forced_logits(candidate, ops, ids, window), ids)
            del candidate
            if key is not None:
                _DROPS[key] = drop
        else:
            drop = _DROPS[key]
        bits, hb = _matrix_bits(weights, fmt), head_bits(weights, fmt, include_head)
        size = step_bytes(weights, bits, hb)
        rows.append(QuantRow(fmt.key, fmt.description, bits, hb, size, _walls(size, params, cards), drop,
                             time.perf_counter() - t0))
    say(total, total, "done")
    card_rows = [{"key": k, "name": lookup(k).name, "bandwidth_gbs": lookup(k).memory_bandwidth_gbs} for k in cards]
    return QuantLabResult(weights.config.name, BASELINE, EVAL_TEXT_SOURCE, len(ids), window, include_head, params,
                          card_rows, rows, time.perf_counter() - started)


@functools.cache  # loaded once per process by the note, tests/test_quant_lab.py, the docs (xdist_group quant-lab)
def load_baseline() -> tuple[LlamaWeights, Any]:
    """The pinned model's weights (fp32, CPU) and its tokenizer (the same objects on every call in a process: callers
    must not change them; :func:`quantise_weights` returns a copy)."""
    from iotrace.model.gguf_file import open_gguf, pinned_gguf
    from iotrace.model.tokenizer import gguf_tokenizer
    from iotrace.model.weights import from_gguf

    path = pinned_gguf()
    return from_gguf(open_gguf(path), torch.float32, "cpu"), gguf_tokenizer(path)
