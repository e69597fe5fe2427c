"""The INT8 KV cache on the real model's keys and values (SmolLM2-135M, fp32 on the CPU, the shipped text).

The teacher-forced prefill over the quantised-then-dequantised cache is what decoding from the int8 cache computes:
each row of its attention equals the plugin's decode reference (what the Triton kernel is held to) over a cache
into which the tokens were appended one at a time, and Decoder.decode token by token with the int8 ops gives the
same next tokens. So the prefill's figures describe the cache the decode kernel reads.

On a 384-token slice of the text, as one context, per-token keys with the 4 widest calibrated channels kept in 16
bits (key_scales=3) hold attention-output cosine >= 0.9999 in every layer and perplexity within 0.5% of the 16-bit
cache, where per-token scales alone miss 0.9999 and static per-channel scales, calibrated on the first 128 tokens,
clip later keys and fall far below it (the full 2,048-token figures: iotrace/model/kv_quality.py's README text).
Bytes per token are identity 3's, checked against the formula written out.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("gguf", reason="the model tests need iotrace[model] (make setup installs it)")
pytest.importorskip("transformers", reason="the model tests need iotrace[model]")

from iotrace.errors import InvalidValueError
from iotrace.kernels.int8_kv import (
    KEY_MIXED,
    KEY_PER_CHANNEL,
    KEY_PER_TOKEN,
    KEY_TOKEN_KEPT,
    Int8DecodeSpec,
    channel_scales_for,
    kept_values,
    outlier_channels_for,
    quantize_reference,
)
from iotrace.model.decoder import Decoder
from iotrace.model.gguf_file import open_gguf
from iotrace.model.kv_quality import KVCacheOps, kv_quality, parse_schemes, scheme_key
from iotrace.model.quality import teacher_forced_logits, text_ids
from iotrace.model.tokenizer import gguf_tokenizer
from iotrace.model.weights import from_gguf
from iotrace.render.kv_quality import kv_layer_rows, kv_section_rows
from tests.conftest import pinned_model

pytestmark = pytest.mark.slow

#: Prefill and decode of the same fp32 model differ by summation order only (tests/test_model_decoder.py's bound).
LOGIT_ATOL = 2e-3
INT8_SPEC = Int8DecodeSpec()
SLICE, CALIBRATION = 384, 128


@pytest.fixture(scope="module")
def model():
    path = pinned_model()
    return from_gguf(open_gguf(path), torch.float32, "cpu"), gguf_tokenizer(path)


@pytest.fixture(scope="module")
def result(model) -> dict:
    weights, tokenizer = model
    return kv_quality(weights, tokenizer, schemes=(KEY_PER_TOKEN, KEY_PER_CHANNEL, KEY_TOKEN_KEPT), tokens=SLICE,
                      calibration=CALIBRATION).to_dict()


class _Capture(KVCacheOps):
    """The int8 ops that also keep each layer's q, k, v and attention output of the prefill."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: dict[int, tuple[torch.Tensor, ...]] = {}

    def _prefill_attention(self, q, k, v, cu_seqlens, max_len, out, config) -> None:
        layer = self._calls % self.layers
        super()._prefill_attention(q, k, v, cu_seqlens, max_len, out, config)
        self.seen[layer] = (q.clone(), k.clone(), v.clone(), out.clone())


@pytest.mark.parametrize("scheme", [KEY_PER_CHANNEL, KEY_TOKEN_KEPT])  # clamped static scales; the fix
def test_prefill_attention_is_decode_over_the_appended_int8_cache(model, scheme: int) -> None:
    """Row t of the prefill's attention equals the plugin's decode reference (what the Triton kernel is held to)
    for query t over an int8 cache into which tokens 0..t were appended one at a time by the plugin's quantiser,
    per-channel scales and kept channels calibrated on the first 16 tokens."""
    weights, tokenizer = model
    ids = text_ids(tokenizer, tokens=48)
    ops = _Capture(weights.config.layers, scheme, calibration=16)
    teacher_forced_logits(weights, ops, ids)
    for layer in (0, 19):
        q, k, v, out = ops.seen[layer]
        k16, v16 = k.half(), v.half()
        calibrated = channel_scales_for(k16[:16])
        channel = calibrated if scheme in (KEY_PER_CHANNEL, KEY_MIXED) else None
        kept = outlier_channels_for(calibrated) if scheme in (KEY_MIXED, KEY_TOKEN_KEPT) else None
        cache: dict[str, list[torch.Tensor]] = {"k_q": [], "k_scale": [], "v_q": [], "v_scale": [], "k_kept": []}
        for t in range(len(ids)):  # append token t, then decode query t over the cache so far
            for name, x, scales, kept_at in (("k", k16[t], channel, kept), ("v", v16[t], None, None)):
                codes, row_scales = quantize_reference(x, scales, kept_at)
                cache[f"{name}_q"].append(codes)
                if row_scales is not None:
                    cache[f"{name}_scale"].append(row_scales)
            if kept is not None:
                cache["k_kept"].append(kept_values(k16[t], kept))
            inputs = {name: torch.stack(rows)[None] for name, rows in cache.items() if rows}
            inputs.update(q=q[t][None], context_lens=torch.tensor([t + 1], dtype=torch.int32))
            if channel is not None:
                inputs["k_channel_scale"] = channel
            if kept is not None:
                inputs["k_kept_channels"] = kept
            want = INT8_SPEC.reference(inputs)["out"][0]
            assert torch.allclose(out[t].double(), want.double(), atol=2e-5, rtol=0), (layer, t)


def test_decoding_from_the_int8_cache_follows_the_teacher_forced_prefill(model) -> None:
    """Decoder.decode token by token with the int8 ops (each step's K and V quantised when appended) against the
    teacher-forced prefill: the same next tokens, and logits apart by far less than the int8 cache moves them (the
    two paths' fp32 keys differ in the last bits, which can move a code by one step)."""
    weights, tokenizer = model
    ids = text_ids(tokenizer, tokens=32)
    layers, prompt = weights.config.layers, 24
    forced = teacher_forced_logits(weights, KVCacheOps(layers, KEY_TOKEN_KEPT, calibration=16), ids)
    decoder = Decoder(weights, KVCacheOps(layers, KEY_TOKEN_KEPT, calibration=16), batch=1, capacity=len(ids))
    stepped = [decoder.prefill(torch.tensor([ids[:prompt]]), all_logits=True)[0]]
    for token in ids[prompt:-1]:
        stepped.append(decoder.decode(torch.tensor([token]))[0].clone())
    stepped = torch.cat([stepped[0], torch.stack(stepped[1:])])[:len(ids) - 1]
    sixteen = teacher_forced_logits(weights, KVCacheOps(layers, None), ids)
    assert torch.equal(stepped.argmax(-1), forced.argmax(-1))
    assert (stepped[:prompt] - forced[:prompt]).abs().max() < LOGIT_ATOL
    assert (stepped - forced).abs().max() < (forced - sixteen).abs().max() / 3


def test_kept_outlier_channels_meet_the_targets_on_real_keys(result: dict) -> None:
    per_token, per_channel, token_kept = result["schemes"]
    assert result["tokens"] == SLICE and len(token_kept["layer_cosine"]) == 30
    assert min(token_kept["layer_cosine"]) >= 0.9999, token_kept["layer_cosine"]
    assert abs(token_kept["quality"]["ppl_change_pct"]) < 0.5, token_kept["quality"]
    assert token_kept["quality"]["top1_agreement"] > 0.98 and token_kept["checked_values"] == 0
    # Per-token scales alone: one outlier channel sets each row's step, and some layer misses the target.
    assert per_token["min_cosine"] < 0.9999 < token_kept["min_cosine"]
    assert per_token["quality"]["kl_mean"] > token_kept["quality"]["kl_mean"]
    # Static per-channel scales: RoPE turns the channel pairs past the calibrated range, so later keys clip.
    assert per_channel["clipped_values"] > 0.005 * per_channel["checked_values"]
    assert per_channel["min_cosine"] < 0.999
    # The end-to-end cosine includes the lower layers' errors: never far above the local one at the worst layer.
    worst = token_kept["min_cosine_layer"]
    assert token_kept["layer_cosine_end_to_end"][worst] <= token_kept["layer_cosine"][worst] + 1e-4


def test_bytes_per_token_are_identity_3(result: dict) -> None:
    """SmolLM2: 30 layers, 3 KV heads, head_dim 64. fp16: 2·30·3·64·2 = 23,040 B per token; int8 per-token keys:
    30·3·(2·64 + 4 + 4) = 12,240 B; with 4 kept fp16 key channels 30·3·(2·64 + 4 + 4 + 8) = 12,960 B."""
    per_token, per_channel, token_kept = result["schemes"]
    assert result["reference_bytes_per_token"] == 2 * 30 * 3 * 64 * 2 == 23040
    assert (per_token["bytes_per_token"], per_channel["bytes_per_token"], token_kept["bytes_per_token"]) == (
        12240, 30 * 3 * (2 * 64 + 4), 12960)
    assert token_kept["context_tokens"] == math.floor(2**30 / 12960)
    assert result["reference_context_tokens"] == math.floor(2**30 / 23040)
    assert token_kept["bytes_ratio"] == pytest.approx(23040 / 12960)


def test_rows_carry_the_figures(result: dict) -> None:
    columns, rows = kv_section_rows(result)
    assert len(rows) == 4 and len(columns) == len(rows[0])
    kept = rows[3]
    s = result["schemes"][2]
    assert kept[0] == "int8 per-token+kept (key_scales=3)" and kept[1] == "12,960"
    assert kept[4] == f"{s['min_cosine']:.6f} ({s['min_cosine_layer']})"
    assert kept[8] == f"{s['quality']['ppl_change_pct']:+.3f}%"
    layer_columns, layer_rows = kv_layer_rows(result)
    assert len(layer_rows) == 30 and len(layer_columns) == 4


def test_bad_requests_name_the_value(model) -> None:
    weights, tokenizer = model
    with pytest.raises(InvalidValueError, match="calibration on 64 tokens of a 32-token text"):
        kv_quality(weights, tokenizer, tokens=32, calibration=64)
    with pytest.raises(InvalidValueError, match="unknown INT8 KV scheme 'per-row'"):
        scheme_key("per-row")
    assert scheme_key("per-token+kept") == KEY_TOKEN_KEPT == scheme_key("3")
    assert parse_schemes("per-token, 3,per-token") == (KEY_PER_TOKEN, KEY_TOKEN_KEPT) and len(parse_schemes(None)) == 4
    with pytest.raises(InvalidValueError, match="no INT8 KV scheme in ' , '"):
        parse_schemes(" , ")
