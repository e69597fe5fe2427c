"""The six identities: the issue's known checks, hand-computed cases and hypothesis properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iotrace import identities as ident
from iotrace.errors import InvalidValueError

positive = st.floats(min_value=1e-3, max_value=1e15, allow_nan=False, allow_infinity=False)
rate = st.floats(min_value=0.0, max_value=0.999, allow_nan=False)
gammas = st.integers(min_value=1, max_value=16)


# --- known checks -------------------------------------------------------------------------------------------

def test_decode_wall_known_check() -> None:
    # 936 GB/s, 27e9 parameters at 0.5 byte/weight: 936e9 / 13.5e9 = 69.33 tok/s.
    assert ident.decode_tokens_per_s(936e9, 27e9, 0.5) == pytest.approx(69.333, abs=1e-3)
    assert round(ident.decode_tokens_per_s(936e9, 27e9, 0.5), 1) == 69.3


def test_decode_inverse_known_check() -> None:
    # 87 tok/s on the same card and model needs q = 936e9 / (27e9 * 87) = 0.39847 B/weight (3.19 bits).
    q = ident.decode_bytes_per_weight_for(87, 936e9, 27e9)
    assert q == pytest.approx(0.398467, rel=1e-5)
    assert q * 8 == pytest.approx(3.1877, rel=1e-4)


def test_kv_cache_llama3_8b_known_check() -> None:
    # 2 * 32 layers * 8 KV heads * 128 * 8192 tokens * 2 bytes = 2^30 bytes = 1.07 GB.
    assert ident.kv_cache_bytes(32, 8, 128, 8192, 2) == 1_073_741_824
    assert round(ident.kv_cache_bytes(32, 8, 128, 8192, 2) / 1e9, 2) == 1.07


def test_kv_cache_max_tokens_inverts() -> None:
    assert ident.kv_cache_max_tokens(1_073_741_824, 32, 8, 128, 2) == 8192
    assert ident.kv_cache_max_tokens(1_073_741_823, 32, 8, 128, 2) == 8191


def test_speculation_known_check() -> None:
    # (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616.
    assert ident.spec_expected_tokens(0.8, 4) == pytest.approx(3.3616, abs=1e-12)
    assert ident.spec_expected_tokens(1.0, 4) == 5.0
    assert ident.spec_expected_tokens(0.0, 4) == 1.0


def test_speculation_speedup_pays_for_the_draft() -> None:
    # 3.3616 / (4 * 0.05 + 1) = 2.80133; a free draft gives E itself.
    assert ident.spec_speedup(0.8, 4, 0.05) == pytest.approx(2.801333, rel=1e-6)
    assert ident.spec_speedup(0.8, 4, 0.0) == pytest.approx(3.3616)


def test_best_gamma() -> None:
    # α = 0.8, c = 0.05: (1 − 0.8^(γ+1)) / (0.2 · (0.05γ + 1)) is 2.801 at γ=4, 3.082 at 7, 3.092 at 8, 3.078 at 9.
    assert ident.spec_speedup(0.8, 8, 0.05) == pytest.approx((1 - 0.8**9) / (0.2 * 1.4))
    speedups = [ident.spec_speedup(0.8, g, 0.05) for g in range(1, 65)]
    assert ident.spec_best_gamma(0.8, 0.05) == 1 + speedups.index(max(speedups)) == 8
    # A free draft: longer is always better (up to the bound); an expensive one: one token.
    assert ident.spec_best_gamma(0.9, 0.0, max_gamma=16) == 16
    assert ident.spec_best_gamma(0.5, 1.0) == 1


def test_prefill_hand_computed() -> None:
    # Llama-3-8B (8.03e9) over 2048 tokens: 2 * 8.03e9 * 2048 = 3.289e13 FLOPs; at 989.4e12 FLOP/s: 61,606 tok/s.
    assert ident.prefill_flops(8.03e9, 2048) == pytest.approx(3.289088e13)
    assert ident.prefill_tokens_per_s(989.4e12, 8.03e9) == pytest.approx(61606.48, rel=1e-6)


def test_roofline_hand_computed() -> None:
    # 4096^3 fp16 GEMM: 2*4096^3 = 1.374e11 FLOPs over 3*4096^2*2 bytes = 1.007e8 B: I = 1365.3 FLOP/B.
    flops, nbytes = 2 * 4096**3, 3 * 4096**2 * 2
    assert ident.arithmetic_intensity(flops, nbytes) == pytest.approx(4096 / 3)
    # H100 SXM-like peak 989.4 TF and 3.35 TB/s: ridge 295.3 FLOP/B, so the GEMM is compute-bound...
    assert ident.ridge_intensity(989.4e12, 3.35e12) == pytest.approx(295.343, rel=1e-5)
    assert ident.roofline_bound(4096 / 3, 989.4e12, 3.35e12) == "compute"
    # ...and a GEMV at I ~ 1 FLOP/B is memory-bound at I * B.
    assert ident.roofline_bound(1.0, 989.4e12, 3.35e12) == "memory"
    assert ident.attainable_flop_per_s(1.0, 989.4e12, 3.35e12) == 3.35e12


# --- properties ---------------------------------------------------------------------------------------------

@given(positive, positive, positive)
def test_decode_and_its_inverse_round_trip(bandwidth: float, params: float, q: float) -> None:
    tok = ident.decode_tokens_per_s(bandwidth, params, q)
    assert ident.decode_bytes_per_weight_for(tok, bandwidth, params) == pytest.approx(q, rel=1e-9)


@given(positive, positive, positive, st.floats(min_value=1.01, max_value=100))
def test_decode_falls_as_weights_grow(bandwidth: float, params: float, q: float, factor: float) -> None:
    assert ident.decode_tokens_per_s(bandwidth, params, q * factor) < ident.decode_tokens_per_s(bandwidth, params, q)


@given(st.integers(1, 200), st.integers(1, 128), st.integers(1, 512), st.integers(1, 10**6), st.sampled_from([1, 2, 4]))
def test_kv_cache_is_linear_in_tokens(layers: int, kv_heads: int, head_dim: int, tokens: int, q: int) -> None:
    one = ident.kv_cache_bytes(layers, kv_heads, head_dim, 1, q)
    assert ident.kv_cache_bytes(layers, kv_heads, head_dim, tokens, q) == one * tokens
    assert ident.kv_cache_max_tokens(one * tokens, layers, kv_heads, head_dim, q) == tokens


@given(rate, gammas)
def test_expected_tokens_between_one_and_gamma_plus_one(alpha: float, gamma: int) -> None:
    e = ident.spec_expected_tokens(alpha, gamma)
    assert 1.0 <= e <= gamma + 1 + 1e-9
    # The closed form equals the sum of the geometric series 1 + α + ... + α^γ.
    assert e == pytest.approx(sum(alpha**i for i in range(gamma + 1)), rel=1e-9)


@given(rate, rate, gammas)
def test_expected_tokens_rise_with_alpha(a: float, b: float, gamma: int) -> None:
    lo, hi = sorted((a, b))
    assert ident.spec_expected_tokens(lo, gamma) <= ident.spec_expected_tokens(hi, gamma) + 1e-12


@given(positive, positive, positive)
def test_attainable_never_exceeds_either_roof(intensity: float, peak: float, bandwidth: float) -> None:
    attained = ident.attainable_flop_per_s(intensity, peak, bandwidth)
    assert attained <= peak and attained <= intensity * bandwidth * (1 + 1e-12)
    at_ridge = ident.ridge_intensity(peak, bandwidth)
    assert math.isclose(ident.attainable_flop_per_s(at_ridge, peak, bandwidth), peak, rel_tol=1e-9)


# --- bad input ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: ident.decode_tokens_per_s(0, 27e9, 0.5),
    lambda: ident.decode_tokens_per_s(936e9, -1, 0.5),
    lambda: ident.decode_tokens_per_s(936e9, 27e9, float("nan")),
    lambda: ident.kv_cache_bytes(0, 8, 128, 8192, 2),
    lambda: ident.spec_expected_tokens(1.5, 4),
    lambda: ident.spec_expected_tokens(0.8, 0),
    lambda: ident.spec_speedup(0.8, 4, -0.1),
    lambda: ident.arithmetic_intensity(1e9, 0),
])
def test_bad_values_raise_a_clear_error(call) -> None:
    with pytest.raises(InvalidValueError, match="must be"):
        call()


def test_kv_formula_states_the_scale_bytes_it_adds() -> None:
    """`math kv --scale-bytes 8`: the header formula names the scales the arithmetic adds (int8 K and V with an fp32
    scale each per token, layer and KV head: Llama-3-8B at 8k = 32 · 8 · (2 · 128 · 1 + 8) · 8192 bytes)."""
    from iotrace.derivations import kv_cache

    quantised = kv_cache(32, 8, 128, 8192, 1, scale_bytes=8)
    assert quantised.formula == "bytes = L · n_kv · (2 · d_h · q_kv + s) · S"
    assert quantised.result.value == 32 * 8 * (2 * 128 * 1 + 8) * 8192 == 553_648_128
    assert any(q.symbol == "s" and q.value == 8 for q in quantised.inputs)
    assert kv_cache(32, 8, 128, 8192, 2).formula == "bytes = 2 · L · n_kv · d_h · S · q_kv"


def test_time_beyond_floor_keeps_each_row_less_its_floor_and_drops_a_beaten_floor() -> None:
    rows = {"gemm": 100, "attention": 10, "idle": 30, "copy": 0}
    # The GEMMs at 80% of their floor keep 20 ns; attention beat its floor (150%): no gap; idle has no floor: all gap.
    assert ident.time_beyond_floor(rows, {"gemm": 80.0, "attention": 150.0}) == [("idle", 30), ("gemm", 20)]
    assert ident.time_beyond_floor(rows, {"gemm": 80.0, "attention": None}) == [("idle", 30), ("gemm", 20),
                                                                               ("attention", 10)]
