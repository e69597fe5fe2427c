"""RoPE and SwiGLU against their references under the Triton interpreter, on fresh random inputs.

Outputs are poisoned (NaN) before every launch so an element a kernel forgets to write fails the check. Shapes are
ragged on purpose (odd head counts, a head_dim whose half is not a power of two). RoPE is also checked against
Hugging Face's ``rotate_half`` formula written out here, and its two pairings against each other through the
de-interleaving permutation llama.cpp's GGUF conversion relies on.
"""

from __future__ import annotations

import pytest
import torch

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.kernels.backend import interpreting
from iotrace.kernels.rope import RopeSpec, apply_rope, rope_cache, rope_reference
from iotrace.kernels.swiglu import SwiGLUSpec, swiglu, swiglu_reference
from tests.conftest import check_kernel

ROPE, SWIGLU = RopeSpec(), SwiGLUSpec()
H100 = lookup("h100")

pytestmark = pytest.mark.skipif(not interpreting(), reason="these checks run the Triton interpreter on the CPU; "
                                                           "bench/gpu_validate.sh runs them on a GPU")


def _qkv(tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A random fused QKV buffer (T, (H + 2·H_kv)·d) and its q, k and v views."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen).to(dtype)
    q = qkv[:, :heads * head_dim].view(tokens, heads, head_dim)
    k = qkv[:, heads * head_dim:(heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    v = qkv[:, (heads + kv_heads) * head_dim:]
    return qkv, q, k, v


def _positions(tokens: int, limit: int, dtype: torch.dtype = torch.int64, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, limit, (tokens,), generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --- RoPE ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "head_dim"), [(37, 6, 2, 64), (1, 9, 3, 64), (5, 3, 1, 80),
                                                                        (3, 1, 1, 2)])
def test_rope_matches_reference(dtype: str, interleaved: int, tokens: int, heads: int, kv_heads: int,
                                head_dim: int) -> None:
    shape = {"tokens": tokens, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "interleaved": interleaved}
    check_kernel(ROPE, shape, dtype, ROPE.default_config(ROPE.check_shape(shape), dtype, H100))


@pytest.mark.parametrize("config", [{"BLOCK_H": 1, "num_warps": 1}, {"BLOCK_H": 2, "num_warps": 2},
                                    {"BLOCK_H": 16, "num_warps": 8}])
def test_rope_head_blocks_cover_q_and_k(config: dict) -> None:
    # 11 query heads and 3 KV heads: no block size divides both, and a block never straddles q and k.
    shape = ROPE.check_shape({"tokens": 7, "heads": 11, "kv_heads": 3, "head_dim": 64})
    assert config in ROPE.space(shape, "fp16", H100)
    check_kernel(ROPE, shape, "fp16", config)


def _hf_rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def test_rope_equals_hugging_face_rotate_half() -> None:
    tokens, heads, kv_heads, head_dim, theta = 13, 4, 2, 64, 500000.0
    _, q, k, _ = _qkv(tokens, heads, kv_heads, head_dim)
    positions = _positions(tokens, 2048)
    # Hugging Face LlamaRotaryEmbedding (default rope type) and apply_rotary_pos_emb, written out independently.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    want_q, want_k = q * cos + _hf_rotate_half(q) * sin, k * cos + _hf_rotate_half(k) * sin

    cos_sin = rope_cache(2048, head_dim, theta)
    torch.testing.assert_close(rope_reference(q, positions, cos_sin, False), want_q, atol=1e-5, rtol=1e-5)
    apply_rope(q, k, positions, cos_sin, interleaved=False)
    torch.testing.assert_close(q, want_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k, want_k, atol=1e-5, rtol=1e-5)


def _deinterleave(x: torch.Tensor) -> torch.Tensor:
    """Dims (0, 1, 2, 3, ...) -> (0, 2, 4, ..., 1, 3, 5, ...): pair (2i, 2i+1) becomes pair (i, i + d/2)."""
    d = x.shape[-1]
    return x.view(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(x.shape)


def test_interleaved_rope_is_half_split_rope_of_the_permuted_head() -> None:
    tokens, heads, kv_heads, head_dim = 9, 3, 1, 64
    _, q, k, _ = _qkv(tokens, heads, kv_heads, head_dim, seed=3)
    positions, cos_sin = _positions(tokens, 4096), rope_cache(4096, head_dim, 10000.0)
    q_perm, k_perm = _deinterleave(q).clone(), _deinterleave(k).clone()
    q_int, k_int = q.clone(), k.clone()
    apply_rope(q_int, k_int, positions, cos_sin, interleaved=True)
    apply_rope(q_perm, k_perm, positions, cos_sin, interleaved=False)
    torch.testing.assert_close(_deinterleave(q_int), q_perm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(_deinterleave(k_int), k_perm, atol=1e-5, rtol=1e-5)
    # The references obey the same identity.
    torch.testing.assert_close(_deinterleave(rope_reference(q, positions, cos_sin, True)),
                               rope_reference(_deinterleave(q), positions, cos_sin, False), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_in_place_on_fused_qkv_leaves_v_untouched(dtype: torch.dtype, interleaved: bool) -> None:
    tokens, heads, kv_heads, head_dim = 6, 9, 3, 64
    qkv, q, k, v = _qkv(tokens, heads, kv_heads, head_dim, dtype)
    positions, cos_sin = _positions(tokens, 100, torch.int32), rope_cache(100, head_dim, 10000.0)
    v_before = v.clone()
    want_q = rope_reference(q, positions, cos_sin, interleaved)
    want_k = rope_reference(k, positions, cos_sin, interleaved)
    apply_rope(q, k, positions, cos_sin, interleaved, validate=True)
    assert torch.equal(v, v_before)
    tol = ROPE.tolerance({torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype])
    torch.testing.assert_close(q.float(), want_q, atol=tol.atol, rtol=tol.rtol)
    torch.testing.assert_close(k.float(), want_k, atol=tol.atol, rtol=tol.rtol)
    assert q.data_ptr() == qkv.data_ptr()  # still views: rotated where they lie


def test_rope_of_no_tokens_is_a_no_op() -> None:
    q, k = torch.zeros(0, 2, 8), torch.zeros(0, 1, 8)
    apply_rope(q, k, torch.zeros(0, dtype=torch.int64), rope_cache(4, 8, 10000.0), interleaved=False)


@pytest.mark.parametrize(("q_shape", "k_shape", "positions", "cache", "match"), [
    ((4, 2, 64), (4, 1, 32), (4,), (16, 64), r"rope shapes do not agree: q \(4, 2, 64\), k \(4, 1, 32\)"),
    ((4, 2, 63), (4, 1, 63), (4,), (16, 63), r"rope shapes do not agree: q \(4, 2, 63\), cos_sin \(16, 63\)"),
    ((4, 2, 64), (4, 1, 64), (4,), (16, 128), r"rope shapes do not agree: q \(4, 2, 64\), cos_sin \(16, 128\)"),
    ((4, 2, 64), (4, 1, 64), (4, 1), (16, 64), r"rope positions \(4, 1\) torch.int64 do not fit q \(4, 2, 64\)"),
    ((4, 2, 64), (3, 1, 64), (4,), (16, 64), r"rope shapes do not agree: q \(4, 2, 64\), k \(3, 1, 64\)"),
])
def test_rope_refuses_bad_shapes(q_shape: tuple, k_shape: tuple, positions: tuple, cache: tuple, match: str) -> None:
    q, k = torch.zeros(q_shape), torch.zeros(k_shape)
    with pytest.raises(InvalidValueError, match=match):
        apply_rope(q, k, torch.zeros(positions, dtype=torch.int64), torch.zeros(cache), interleaved=False)


def test_rope_refuses_bad_positions_strides_and_dtypes() -> None:
    q, k, cache = torch.zeros(4, 2, 8), torch.zeros(4, 1, 8), rope_cache(16, 8, 10000.0)
    with pytest.raises(InvalidValueError, match=r"rope positions 0\.\.16 fall outside the cos_sin cache of 16 rows"):
        apply_rope(q, k, torch.tensor([0, 1, 2, 16]), cache, interleaved=False, validate=True)
    apply_rope(q, k, torch.tensor([0, 1, 2, 15]), cache, interleaved=False, validate=True)
    with pytest.raises(InvalidValueError, match="unit stride in the last dim"):
        apply_rope(torch.zeros(4, 2, 16)[..., ::2], k, torch.zeros(4, dtype=torch.int64), cache, False)
    with pytest.raises(InvalidValueError, match=r"rope positions \(4,\) torch.float32 do not fit q \(4, 2, 8\)"):
        apply_rope(q, k, torch.zeros(4), cache, False)
    with pytest.raises(InvalidValueError, match="cos_sin cache must be float32"):
        apply_rope(q, k, torch.zeros(4, dtype=torch.int64), cache.half(), False)
    with pytest.raises(InvalidValueError, match="one dtype"):
        apply_rope(q.half(), k, torch.zeros(4, dtype=torch.int64), cache, False)
    with pytest.raises(InvalidValueError, match="even head_dim"):
        rope_cache(16, 7, 10000.0)
    with pytest.raises(InvalidValueError, match="head_dim=63 is odd"):
        ROPE.check_shape({"tokens": 1, "heads": 1, "kv_heads": 1, "head_dim": 63})


def test_rope_cache_layout() -> None:
    cache = rope_cache(8, 4, 10000.0)
    assert cache.shape == (8, 4) and cache.dtype == torch.float32
    # θ = (1, 1/100) for d = 4, theta 10000: cos in the first half, sin in the second.
    p = torch.arange(8).float()
    torch.testing.assert_close(cache, torch.stack((p.cos(), (p / 100).cos(), p.sin(), (p / 100).sin()), dim=-1))


def test_rope_cost_presets_and_reduction() -> None:
    shape = ROPE.check_shape(ROPE.presets["llama-3-8b-decode-b32"])
    assert shape == {"tokens": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "interleaved": 0}
    assert ROPE.presets["smollm2-135m-prefill-2k-interleaved"] == {"tokens": 2048, "heads": 9, "kv_heads": 3,
                                                                    "head_dim": 64, "interleaved": 1}
    cost = ROPE.cost(shape, "bf16")
    elements = 32 * 40 * 128
    assert (cost.flops, cost.bytes) == (3.0 * elements, 2.0 * elements * 2 + 32 * 128 * 4 + 32 * 8)
    small = ROPE.reduce_shape(ROPE.check_shape(ROPE.presets["llama-3-8b-prefill-2k"]), ROPE.interpreter_budget)
    assert small["head_dim"] == 128 and small["tokens"] * 40 * 128 <= ROPE.interpreter_budget
    assert ROPE.default_config(shape, "bf16", H100) in ROPE.space(shape, "bf16", H100)


def test_rope_compile_unit_is_the_launch() -> None:
    shape = ROPE.check_shape(ROPE.presets["smollm2-135m-decode-b32"])
    (unit,) = ROPE.compile_units(shape, "fp16", {"BLOCK_H": 4, "num_warps": 2})
    assert unit.grid == (32, 3 + 1, 1) and unit.num_warps == 2
    assert unit.args["q_ptr"] == "*fp16" and unit.args["cs_ptr"] == "*fp32" and unit.args["pos_ptr"] == "*i64"
    assert unit.args["stride_qt"] == (9 + 6) * 64 and unit.args["stride_qot"] == 9 * 64  # fused in, dense out
    assert unit.constexprs == {"HEAD_DIM": 64, "HALF_PAD": 32, "INTERLEAVED": False, "BLOCK_H": 4}


# --- SwiGLU -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize(("tokens", "ffn"), [(37, 1000), (1, 1536), (5, 33), (3, 1)])
def test_swiglu_matches_reference(dtype: str, tokens: int, ffn: int) -> None:
    shape = {"tokens": tokens, "ffn": ffn}
    check_kernel(SWIGLU, shape, dtype, SWIGLU.default_config(SWIGLU.check_shape(shape), dtype, H100))


@pytest.mark.parametrize("config", [{"BLOCK": 128, "num_warps": 1}, {"BLOCK": 256, "num_warps": 8}])
def test_swiglu_column_blocks_cover_the_row(config: dict) -> None:
    check_kernel(SWIGLU, {"tokens": 3, "ffn": 517}, "fp16", config)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_swiglu_equals_torch_silu_times_up_on_strided_rows(dtype: torch.dtype) -> None:
    tokens, ffn = 5, 300
    gen = torch.Generator().manual_seed(7)
    wide = (3 * torch.randn(tokens, 2 * ffn + 24, generator=gen)).to(dtype)
    gate_up = wide[:, 8:8 + 2 * ffn]                      # row stride 2F + 24: a view, as a fused buffer gives
    out_buffer = torch.full((tokens, ffn + 5), 7.0, dtype=dtype)
    out = out_buffer[:, :ffn]
    swiglu(gate_up, out)
    gate, up = gate_up[:, :ffn].float(), gate_up[:, ffn:].float()
    want = torch.nn.functional.silu(gate) * up
    tol = SWIGLU.tolerance({torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype])
    torch.testing.assert_close(out.float(), want, atol=tol.atol, rtol=tol.rtol)
    torch.testing.assert_close(swiglu_reference(gate_up), want)
    assert torch.all(out_buffer[:, ffn:] == 7.0)          # nothing written past the view


def test_swiglu_refuses_bad_inputs() -> None:
    with pytest.raises(InvalidValueError, match=r"swiglu shapes do not agree: gate_up \(4, 10\), out \(4, 4\)"):
        swiglu(torch.zeros(4, 10), torch.zeros(4, 4))
    with pytest.raises(InvalidValueError, match=r"swiglu shapes do not agree: gate_up \(4, 9\), out \(4, 4\)"):
        swiglu(torch.zeros(4, 9), torch.zeros(4, 4))
    with pytest.raises(InvalidValueError, match="unit stride"):
        swiglu(torch.zeros(4, 20)[:, ::2], torch.zeros(4, 5))
    with pytest.raises(InvalidValueError, match="fp16, bf16 or fp32"):
        swiglu(torch.zeros(4, 10, dtype=torch.float64), torch.zeros(4, 5))
    with pytest.raises(InvalidValueError, match=r"gate_up \(3, 7\) has an odd last dim"):
        swiglu_reference(torch.zeros(3, 7))


def test_swiglu_cost_and_presets() -> None:
    shape = SWIGLU.check_shape(SWIGLU.presets["llama-3-8b-prefill-2k"])
    assert shape == {"tokens": 2048, "ffn": 14336}
    assert SWIGLU.presets["smollm2-135m-decode-b1"] == {"tokens": 1, "ffn": 1536}
    cost = SWIGLU.cost(shape, "fp16")
    assert (cost.flops, cost.bytes) == (5.0 * 2048 * 14336, 3.0 * 2048 * 14336 * 2)
    assert SWIGLU.default_config(shape, "fp16", H100) in SWIGLU.space(shape, "fp16", H100)
    (unit,) = SWIGLU.compile_units(shape, "bf16", {"BLOCK": 1024, "num_warps": 4})
    assert unit.grid == (2048, 14, 1) and unit.args["F"] == 14336 and unit.args["stride_gu"] == 2 * 14336


def test_partial_configs_fall_back_to_the_defaults() -> None:
    _, q, k, _ = _qkv(3, 5, 1, 16)
    positions, cos_sin = _positions(3, 10), rope_cache(10, 16, 10000.0)
    want_q = rope_reference(q, positions, cos_sin, True)
    apply_rope(q, k, positions, cos_sin, True, {"num_warps": 1})
    torch.testing.assert_close(q, want_q, atol=1e-5, rtol=1e-5)
    gate_up, out = torch.randn(2, 40), torch.empty(2, 20)
    swiglu(gate_up, out, {"BLOCK": 128})
    torch.testing.assert_close(out, swiglu_reference(gate_up), atol=1e-5, rtol=1e-5)
