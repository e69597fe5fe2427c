"""INT8 KV cache: the append kernel quantises exactly as the torch reference (contiguous and paged), decode over
the int8 cache matches attention over the dequantised cache, and the quality against the unquantised K and V is
measured and held to cosine >= 0.9999 on Gaussian keys and on keys with outlier channels."""

from __future__ import annotations

import math

import pytest
import torch

from iotrace import identities as ident
from iotrace.errors import InvalidValueError
from iotrace.kernels.backend import interpreting
from iotrace.kernels.int8_kv import (
    KEY_MIXED,
    KEY_TOKEN_KEPT,
    PAGE,
    Int8DecodeSpec,
    append_int8,
    channel_scales_for,
    decode_int8,
    kept_values,
    outlier_channels_for,
    quantize_reference,
)
from iotrace.runner import check_outputs

SPEC = Int8DecodeSpec()
CONFIG = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 1}

pytestmark = pytest.mark.skipif(not interpreting(), reason="interpreter checks; bench/gpu_validate.sh runs the GPU")


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("scheme", [0, 1, 2, 3])
def test_append_quantises_like_the_reference(paged: bool, scheme: int) -> None:
    gen = torch.Generator().manual_seed(5)
    batch, heads, d, capacity = 3, 2, 64, 40
    lens = torch.tensor([0, 7, 33], dtype=torch.int32)
    x = (torch.randn(batch, 5, heads, d, generator=gen) * 3).half()
    x[..., [3, 40]] *= 20  # two outlier channels, which the mixed scheme keeps in 16 bits
    per_channel = scheme in (1, KEY_MIXED)
    channel = channel_scales_for(x) if per_channel else None
    kept = outlier_channels_for(channel_scales_for(x)) if scheme in (KEY_MIXED, KEY_TOKEN_KEPT) else None
    slots = (batch * math.ceil(capacity / PAGE), PAGE) if paged else (batch, capacity)
    table = torch.randperm(slots[0], generator=gen).reshape(batch, -1).int() if paged else None
    cache = torch.full((*slots, heads, d), 99, dtype=torch.int8)
    if scheme == KEY_TOKEN_KEPT:  # one token whose outliers dwarf the rest: its scale must come from the rest
        x[1, 2, :, [3, 40]] *= 50
    scales = torch.full((*slots, heads), math.nan)
    kept_cache = torch.full((*slots, heads, 4), math.nan, dtype=torch.half) if kept is not None else None
    append_int8(x, cache, None if per_channel else scales, lens, table, channel, kept, kept_cache)
    want_q, want_s = quantize_reference(x, channel, kept)
    written = torch.zeros(cache.shape[:2], dtype=torch.bool)
    for b in range(batch):
        for t in range(5):
            pos = int(lens[b]) + t
            page, slot = (int(table[b, pos // PAGE]), pos % PAGE) if paged else (b, pos)
            written[page, slot] = True
            assert torch.equal(cache[page, slot], want_q[b, t]), (b, t)
            if not per_channel:
                assert torch.allclose(scales[page, slot], want_s[b, t], rtol=1e-7)
            if kept is not None:  # the outliers sit in the side store, bit for bit, and as 0 in the int8 cache
                assert torch.equal(kept_cache[page, slot], kept_values(x, kept)[b, t]), (b, t)
                assert bool((cache[page, slot].gather(-1, kept.long()) == 0).all())
    if kept is not None:
        assert {3, 40} <= set(kept[0].tolist()) and {3, 40} <= set(kept[1].tolist())
    if scheme == KEY_TOKEN_KEPT:  # the scale is the absmax of the channels left in int8, over 127
        rest = x[1, 2].float().clone()
        rest[:, kept[0].long()] = 0
        pos = int(lens[1]) + 2
        page, slot = (int(table[1, pos // PAGE]), pos % PAGE) if paged else (1, pos)
        assert torch.allclose(scales[page, slot], rest.abs().amax(-1) / 127, rtol=1e-6)
    # Nothing outside the appended positions was touched.
    assert int(written.sum()) == batch * 5 and bool((cache[~written] == 99).all())


def test_append_refuses_overflow_and_bad_pages() -> None:
    x = torch.zeros(1, 4, 2, 64, dtype=torch.half)
    cache, scales = torch.zeros(1, 10, 2, 64, dtype=torch.int8), torch.zeros(1, 10, 2)
    with pytest.raises(InvalidValueError, match="appending 4 tokens to a sequence of 8 overflows the cache of 10"):
        append_int8(x, cache, scales, torch.tensor([8], dtype=torch.int32))
    paged = torch.zeros(2, PAGE, 2, 64, dtype=torch.int8)
    with pytest.raises(InvalidValueError, match=r"block table names pages outside 0\.\.1"):
        append_int8(x, paged, torch.zeros(2, PAGE, 2), torch.tensor([0], dtype=torch.int32),
                    torch.tensor([[5]], dtype=torch.int32))


def _run(shape: dict, dtype: str, splits: int, seed: int):
    shape = SPEC.check_shape({**SPEC.default_shape, **shape})
    inputs = SPEC.make_inputs(shape, dtype, "cpu", seed)
    outputs = SPEC.make_outputs(inputs)
    for out in outputs.values():
        out.fill_(math.nan)
    SPEC.launch(inputs, outputs, {**CONFIG, "NUM_SPLITS": splits})
    found = check_outputs(SPEC, dtype, outputs, SPEC.reference(inputs))
    assert found.ok, found.where
    return SPEC.quality(inputs, outputs)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("paged", [0, 1])
@pytest.mark.parametrize("key_scales", [0, 1, 2, 3])
@pytest.mark.parametrize("splits", [1, 5])
def test_decode_matches_attention_over_the_dequantised_cache(dtype: str, paged: int, key_scales: int,
                                                             splits: int) -> None:
    _run({"paged": paged, "key_scales": key_scales, "heads": 8, "kv_heads": 2}, dtype, splits, seed=splits + paged)


@pytest.mark.parametrize("key_scales", [0, 1, 2, 3])
def test_gaussian_keys_meet_the_quality_target(key_scales: int) -> None:
    """The issue's target, cosine >= 0.9999 against fp32 attention over the unquantised cache: met on Gaussian
    keys by every scheme (measured 0.99994-0.99997 over seeds 0-3 at context 500)."""
    quality = _run({"key_scales": key_scales, "outliers": 0, "context": 500}, "fp16", 4, seed=11)
    assert quality["cosine"] >= 0.9999 and quality["rel_err"] < 0.012, quality


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_mixed_keys_meet_the_quality_target_on_outlier_channels() -> None:
    """Keys with four 20x channels, the three schemes measured at context 500 over seeds 0-3 (cosine / rel. err):
    per token 0.9973-0.9990 / 0.045-0.073 (one scale spreads the outliers' range over every channel); per channel
    0.99958-0.99986 / 0.017-0.029 (each outlier channel keeps only 1/127 of its range, and those channels dominate
    the scores); per channel with the four widest channels in 16 bits 0.99997-0.99998 / 0.0066-0.0078; per token
    with them kept (key_scales=3, the scheme real keys need: iotrace/model/kv_quality.py) 0.99998 / 0.0062-0.0068
    (the default shape, context 333, seeds 0-3), level with the per-channel mixed scheme."""
    per_token, per_channel, mixed, token_kept = (
        _run({"key_scales": scheme, "outliers": 1, "context": 500}, "fp16", 4, seed=11) for scheme in (0, 1, 2, 3))
    assert mixed["cosine"] >= 0.9999 and mixed["rel_err"] < 0.01, mixed
    assert token_kept["cosine"] >= 0.9999 and token_kept["rel_err"] < 0.012, token_kept
    assert per_channel["cosine"] < 0.9999 <= mixed["cosine"], (per_channel, mixed)
    assert per_token["cosine"] < 0.9995 and per_channel["rel_err"] < per_token["rel_err"] / 2


def test_decode_refuses_lengths_past_the_cache() -> None:
    q = torch.zeros(1, 2, 64, dtype=torch.half)
    cache = torch.zeros(1, 10, 2, 64, dtype=torch.int8)
    scales = torch.ones(1, 10, 2)
    with pytest.raises(InvalidValueError, match=r"context lengths 12\.\.12 fall outside the cache of 10"):
        decode_int8(q, cache, cache, scales, scales, torch.tensor([12], dtype=torch.int32), torch.empty_like(q),
                    torch.empty(1, 2), {**CONFIG, "NUM_SPLITS": 1})


def test_kept_channels_must_come_whole() -> None:
    x = torch.zeros(1, 1, 2, 64, dtype=torch.half)
    cache, lens = torch.zeros(1, 10, 2, 64, dtype=torch.int8), torch.tensor([0], dtype=torch.int32)
    channel, kept = torch.ones(2, 64), torch.tensor([[0, 1, 2, 3], [4, 5, 6, 64]], dtype=torch.int32)
    with pytest.raises(InvalidValueError, match="kept channels need the channel indices, their 16-bit store"):
        append_int8(x, cache, None, lens, None, channel, kept)
    with pytest.raises(InvalidValueError, match="kept channels need the channel indices, their 16-bit store"):
        append_int8(x, cache, None, lens, None, None, kept, torch.zeros(1, 10, 2, 4, dtype=torch.half))
    with pytest.raises(InvalidValueError, match=r"does not match the cache \(1, 10, 2\) with 4 kept channels"):
        append_int8(x, cache, None, lens, None, channel, kept, torch.zeros(1, 10, 2, 4))
    with pytest.raises(InvalidValueError, match=r"kept channels name channels outside 0\.\.63"):
        append_int8(x, cache, None, lens, None, channel, kept, torch.zeros(1, 10, 2, 4, dtype=torch.half))


def test_cache_bytes_per_token_against_fp16() -> None:
    """Identity 3 with scales: Llama-3-8B per token, fp16 = 2·32·8·128·2 = 131072 B; int8 with fp32 per-token-head
    scales for K and V = 32·8·(2·128 + 8) = 67584 B: 1.94x fewer, the decode speedup's ceiling."""
    fp16 = ident.kv_cache_bytes(32, 8, 128, 1, 2)
    int8 = ident.kv_cache_bytes(32, 8, 128, 1, 1, scale_bytes=8)
    assert (fp16, int8) == (131072, 67584) and fp16 / int8 == pytest.approx(1.939, abs=1e-3)
    cost = SPEC.cost(SPEC.check_shape({**SPEC.presets["llama-3-8b-ctx32k-b1"], "key_scales": 0}), "bf16")
    assert cost.bytes == 32768 * 8 * (2 * 128 + 8) + 32 * (2 * 128 * 2 + 4)
    # Mixed keys: the V scale (4 B) and four bf16 key channels (8 B) per token and head: 1.91x fewer than bf16.
    mixed = SPEC.cost(SPEC.check_shape({**SPEC.presets["llama-3-8b-ctx32k-b1"], "key_scales": 2}), "bf16")
    assert mixed.bytes == 32768 * 8 * (2 * 128 + 12) + 32 * (2 * 128 * 2 + 4)
    assert fp16 / (32 * 8 * (2 * 128 + 12)) == pytest.approx(1.910, abs=1e-3)
    # Per-token keys with four kept channels (the presets' scheme): both fp32 scales and 8 B of bf16 channels, 16 B
    # per token and head: 1.88x fewer than bf16 at d = 128 (1.78x at SmolLM2's d = 64).
    token_kept = SPEC.cost(SPEC.check_shape(SPEC.presets["llama-3-8b-ctx32k-b1"]), "bf16")
    assert token_kept.bytes == 32768 * 8 * (2 * 128 + 16) + 32 * (2 * 128 * 2 + 4)
    assert fp16 / (32 * 8 * (2 * 128 + 16)) == pytest.approx(1.882, abs=1e-3)
