"""FlashAttention prefill and split-KV decode against the fp64 reference under the Triton interpreter.

Fresh random inputs, outputs poisoned before each launch, the log-sum-exp checked as well as the output.
Lengths are ragged (97, 333: no multiple of any block) and vary within a batch.
"""

from __future__ import annotations

import pytest
import torch

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.kernels.attention_common import lengths, reference_attention
from iotrace.kernels.attention_decode import DecodeSpec, default_splits, flash_decode
from iotrace.kernels.attention_prefill import PrefillSpec, flash_prefill
from iotrace.kernels.backend import interpreting
from tests.conftest import check_kernel

PREFILL, DECODE = PrefillSpec(), DecodeSpec()

pytestmark = pytest.mark.skipif(not interpreting(), reason="these checks run the Triton interpreter on the CPU; "
                                                           "bench/gpu_validate.sh runs them on a GPU")


PREFILL_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "USE_TMA": False}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (8, 2), (8, 1)])  # GQA ratios 1, 4 and 8
def test_prefill_causal_gqa_varlen(dtype: str, causal: int, heads: int, kv_heads: int) -> None:
    shape = {"batch": 3, "heads": heads, "kv_heads": kv_heads, "head_dim": 64, "seqlen": 75, "causal": causal,
             "varlen": 1}
    check_kernel(PREFILL, shape, dtype, PREFILL_CONFIG)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_prefill_head_dim_128_ragged(dtype: str) -> None:
    check_kernel(PREFILL, {"batch": 1, "heads": 2, "kv_heads": 1, "head_dim": 128, "seqlen": 97, "causal": 1},
           dtype, {**PREFILL_CONFIG, "BLOCK_M": 64})


@pytest.mark.parametrize("config", [
    {**PREFILL_CONFIG, "BLOCK_M": 64, "BLOCK_N": 16},
    {**PREFILL_CONFIG, "BLOCK_M": 16, "BLOCK_N": 64},
    {**PREFILL_CONFIG, "USE_TMA": True},
])
def test_prefill_tiles_and_tma(config: dict) -> None:
    shape = {"batch": 2, "heads": 4, "kv_heads": 2, "head_dim": 64, "seqlen": 90, "causal": 1, "varlen": 1}
    check_kernel(PREFILL, shape, "fp16", config)


def test_prefill_lse_is_the_row_logsumexp() -> None:
    inputs, outputs = check_kernel(PREFILL, {"batch": 1, "heads": 2, "kv_heads": 2, "head_dim": 64, "seqlen": 40,
                                       "causal": 1}, "fp16", PREFILL_CONFIG, seed=5)
    # Row 0 of a causal sequence sees only key 0: lse = q0·k0 / sqrt(d).
    q0, k0 = inputs["q"][0, 0].double(), inputs["k"][0, 0].double()
    assert outputs["lse"][0, 0].item() == pytest.approx((q0 @ k0).item() / 8.0, abs=1e-2)
    # And the first output row is exactly v0.
    assert torch.allclose(outputs["out"][0, 0].float(), inputs["v"][0, 0].float(), atol=1e-3)


DECODE_CONFIG = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 1}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("splits", [1, 3, 8, 32])  # 32 splits of a 100-token context leaves some empty
@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (8, 2), (8, 1)])
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_decode_splits_gqa_varlen(dtype: str, splits: int, heads: int, kv_heads: int) -> None:
    shape = {"batch": 3, "heads": heads, "kv_heads": kv_heads, "head_dim": 64, "context": 201, "varlen": 1}
    check_kernel(DECODE, shape, dtype, {**DECODE_CONFIG, "NUM_SPLITS": splits})


@pytest.mark.parametrize("splits", [1, 5])
def test_decode_head_dim_128(splits: int) -> None:
    check_kernel(DECODE, {"batch": 2, "heads": 4, "kv_heads": 1, "head_dim": 128, "context": 97}, "bf16",
           {**DECODE_CONFIG, "NUM_SPLITS": splits})


def test_decode_equals_prefill_last_row() -> None:
    """Decode of token t is the last row of a causal prefill over t+1 tokens: the two kernels agree."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(50, h, 64, generator=gen).half() for h in (4, 2, 2))
    ref_out, ref_lse = reference_attention(q, k, v, causal=True)
    out, lse = torch.empty(1, 4, 64, dtype=torch.half), torch.empty(1, 4)
    flash_decode(q[-1:], k[None], v[None], torch.tensor([50], dtype=torch.int32), out, lse,
                 {**DECODE_CONFIG, "NUM_SPLITS": 4})
    assert torch.allclose(out[0].float(), ref_out[-1], atol=4e-3)
    assert torch.allclose(lse[0], ref_lse[:, -1], atol=1e-3)


def test_lengths_are_ragged_and_deterministic() -> None:
    assert lengths(4, 8192, 0) == [8192] * 4
    varied = lengths(8, 8192, 1)
    assert varied == lengths(8, 8192, 1) and len(set(varied)) == 8 and min(varied) > 4096 and max(varied) == 8192


def test_default_splits_fill_the_card() -> None:
    # Batch 1, 8 KV heads on 132 SMs: 33 programs per split wanted -> 64 splits (a power of two).
    assert default_splits(1, 8, 32768, 64, 132) == 64
    # Batch 32: 256 programs already, 2 splits reach two per SM; a short context never splits below 4 key blocks.
    assert default_splits(32, 8, 32768, 64, 132) == 2
    assert default_splits(1, 8, 300, 64, 132) == 1


def test_costs_by_hand() -> None:
    shape = PREFILL.check_shape(PREFILL.presets["b4-h32-s4096-d128"])
    cost = PREFILL.cost(shape, "bf16")
    assert cost.flops == 4 * 4 * 32 * 4096**2 * 128  # 4·B·H·S²·d
    causal = PREFILL.cost({**shape, "causal": 1}, "bf16")
    assert causal.flops == cost.flops / 2
    assert cost.bytes == 4 * 4096 * (2 * 32 * 128 * 2 + 2 * 32 * 128 * 2 + 4 * 32)
    decode = DECODE.cost(DECODE.check_shape(DECODE.presets["llama-3-8b-ctx32k-b1"]), "bf16")
    # K and V of 32768 tokens, 8 KV heads, d 128, 2 bytes: 134 MB dominate; Q, O and lse are 16.5 KB.
    assert decode.bytes == 2 * 32768 * 8 * 128 * 2 + 32 * (2 * 128 * 2 + 4)
    assert decode.flops == 4 * 32768 * 32 * 128 and decode.intensity < 8


def test_presets_from_real_models() -> None:
    assert PREFILL.presets["llama-3-8b-prefill-8k"] == {"batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128,
                                                         "seqlen": 8192, "causal": 1, "varlen": 0}
    assert DECODE.presets["gemma-2-27b-ctx32k-b32"]["kv_heads"] == 16
    assert set(DECODE.presets) >= {"llama-3-8b-ctx8k-b1", "llama-3-8b-ctx32k-b32", "llama-3-8b-ctx8k-b32-varlen"}


def test_reduced_shapes_keep_gqa_and_head_dim() -> None:
    big = PREFILL.check_shape(PREFILL.presets["llama-3-8b-prefill-8k"])
    small = PREFILL.reduce_shape(big, PREFILL.interpreter_budget)
    assert small["head_dim"] == 128 and small["heads"] // small["kv_heads"] == 4 and small["seqlen"] % 2 == 1
    assert small["batch"] * small["heads"] * small["seqlen"] ** 2 <= PREFILL.interpreter_budget * 1.1


@pytest.mark.parametrize(("shape", "message"), [
    ({"heads": 6, "kv_heads": 4}, "6 query heads are not a multiple of 4 KV heads"),
    ({"head_dim": 96}, "head_dim=96 is not supported"),
])
def test_bad_shapes(shape: dict, message: str) -> None:
    for spec in (PREFILL, DECODE):
        with pytest.raises(InvalidValueError, match=message):
            spec.check_shape({**spec.default_shape, **shape})


def test_decode_refuses_lengths_past_the_cache() -> None:
    q = torch.zeros(1, 2, 64, dtype=torch.half)
    cache = torch.zeros(1, 10, 2, 64, dtype=torch.half)
    with pytest.raises(InvalidValueError, match=r"context lengths 11\.\.11 fall outside the cache of 10"):
        flash_decode(q, cache, cache, torch.tensor([11], dtype=torch.int32), torch.empty_like(q),
                     torch.empty(1, 2), {**DECODE_CONFIG, "NUM_SPLITS": 1})


def test_prefill_refuses_mismatched_tensors() -> None:
    q, k = torch.zeros(5, 4, 64, dtype=torch.half), torch.zeros(5, 2, 128, dtype=torch.half)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(InvalidValueError, match="attention shapes do not agree"):
        flash_prefill(q, k, k, cu, cu, 5, torch.empty_like(q), torch.empty(4, 5), True, PREFILL_CONFIG)


def test_spaces_and_defaults() -> None:
    h100, a10g = lookup("h100"), lookup("a10g")
    shape = PREFILL.check_shape(PREFILL.presets["b4-h32-s4096-d128"])
    assert any(c["USE_TMA"] for c in PREFILL.space(shape, "bf16", h100))
    assert not any(c["USE_TMA"] for c in PREFILL.space(shape, "bf16", a10g))
    dshape = DECODE.check_shape(DECODE.presets["llama-3-8b-ctx32k-b1"])
    assert {c["NUM_SPLITS"] for c in DECODE.space(dshape, "bf16", h100)} == {1, 2, 4, 8, 16, 32, 64}
    assert DECODE.default_config(dshape, "bf16", h100)["NUM_SPLITS"] == 64


@pytest.mark.parametrize(("lq", "lk"), [(1100, 1100), (700, 1250), (512, 512)])  # ragged, a cached prefix, one block
def test_the_torch_paths_blocked_causal_attention_is_the_whole_squares(lq: int, lk: int) -> None:
    """TorchOps' causal prefill past CAUSAL_BLOCK_ROWS queries goes in blocks against the keys up to each block's last
    row: the same result as the fp64 reference over the whole masked square, grouped KV heads and a cached prefix
    (query i sees keys up to i + Lk - Lq) included, and within 1e-6 of the whole square computed at once."""
    from iotrace.model.ops import CAUSAL_BLOCK_ROWS, TorchOps, _attend_rows

    g = torch.Generator().manual_seed(lq + lk)
    q, k, v = (torch.randn(n, h, 64, generator=g) for n, h in ((lq, 9), (lk, 3), (lk, 3)))
    got = TorchOps._attend(q, k, v, causal=True)
    want, _ = reference_attention(q, k, v, causal=True)
    assert got.shape == (lq, 9, 64) and torch.allclose(got, want, atol=1e-5, rtol=0)
    whole = _attend_rows(q.transpose(0, 1), k.transpose(0, 1).repeat_interleave(3, 0),
                         v.transpose(0, 1).repeat_interleave(3, 0), True, lk - lq).transpose(0, 1)
    assert torch.allclose(got, whole, atol=1e-6, rtol=0)
    assert lq > CAUSAL_BLOCK_ROWS or torch.equal(got, whole)  # one block: the unblocked code itself
