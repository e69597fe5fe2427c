"""The built-in kernels against their references under the Triton interpreter, on fresh random inputs.

Outputs are poisoned (NaN) before every launch so an element a kernel forgets to write fails the check.
Shapes are ragged on purpose: no size is a multiple of any block. bf16 runs through the interpreter's
upcast path (its bf16 tl.dot multiplies raw bits; env-probe.md); on a GPU the native path runs.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.kernels.backend import interpreting
from iotrace.kernels.gemm import GemmSpec, gemm
from iotrace.kernels.rmsnorm import RMSNormSpec, rmsnorm
from iotrace.runner import check_outputs
from tests.conftest import check_kernel

GEMM, NORM = GemmSpec(), RMSNormSpec()

pytestmark = pytest.mark.skipif(not interpreting(), reason="these checks run the Triton interpreter on the CPU; "
                                                           "bench/gpu_validate.sh runs them on a GPU")


SMALL = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4, "num_stages": 2}


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8e4m3"])
@pytest.mark.parametrize("bias", [0, 1])
@pytest.mark.parametrize(("M", "N", "K"), [(97, 83, 71), (1, 45, 130), (130, 1, 33), (33, 65, 1)])
def test_gemm_matches_reference_on_ragged_shapes(dtype: str, bias: int, M: int, N: int, K: int) -> None:
    check_kernel(GEMM, {"M": M, "N": N, "K": K, "bias": bias}, dtype, SMALL)


@pytest.mark.parametrize("config", [
    {**SMALL, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8},   # the decode default's tile
    {**SMALL, "BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 1},    # no grouping
    {**SMALL, "GROUP_M": 3},                                                  # a group that does not divide the rows
])
def test_gemm_tile_orders_cover_the_output(config: dict) -> None:
    check_kernel(GEMM, {"M": 150, "N": 99, "K": 40, "bias": 1}, "fp16", config)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gemm_tma_variant(dtype: str) -> None:
    # Tensor descriptors need 16-byte aligned rows: K and N multiples of 8 for 2-byte types; M may be ragged.
    check_kernel(GEMM, {"M": 77, "N": 40, "K": 56, "bias": 1}, dtype, {**SMALL, "USE_TMA": True})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70), st.sampled_from(["fp16", "bf16"]),
       st.integers(0, 2**31 - 1))
def test_gemm_hypothesis_small_shapes(M: int, N: int, K: int, dtype: str, seed: int) -> None:
    check_kernel(GEMM, {"M": M, "N": N, "K": K, "bias": seed % 2}, dtype, SMALL, seed)


def test_gemm_tma_refuses_misaligned_rows() -> None:
    shape = GEMM.check_shape({"M": 8, "N": 8, "K": 71})  # 71 fp16 = 142 bytes per row of A: not 16-byte aligned
    inputs = GEMM.make_inputs(shape, "fp16", "cpu", 0)
    with pytest.raises(InvalidValueError, match="the TMA gemm needs contiguous, 16-byte aligned rows"):
        gemm(inputs["a"], inputs["b"], GEMM.make_outputs(inputs)["c"], None, {**SMALL, "USE_TMA": True})


@pytest.mark.parametrize(("spec", "shape"), [
    (GEMM, {"M": 2**40, "N": 64, "K": 64, "bias": 0}),
    (GEMM, {"M": 1, "N": 73728, "K": 4608, "bias": 0}),
    (NORM, {"rows": 4_000_000_000, "hidden": 4096, "residual": 1}),
])
def test_reduced_shapes_fit_the_interpreter_budget(spec, shape: dict) -> None:
    small = spec.reduce_shape(shape, spec.interpreter_budget)
    dims = [v for k, v in small.items() if k not in spec.shape_flags]
    assert math.prod(dims) <= spec.interpreter_budget * 4 and small.keys() == shape.keys()


def test_gemm_refuses_mismatched_operands() -> None:
    a, b, c = torch.zeros(4, 8, dtype=torch.float16), torch.zeros(9, 5, dtype=torch.float16), torch.zeros(4, 5)
    with pytest.raises(InvalidValueError, match=r"gemm shapes do not agree: A \(4, 8\), B \(9, 5\)"):
        gemm(a, b, c, None, SMALL)


def test_gemm_cost_by_hand() -> None:
    cost = GEMM.cost(GEMM.check_shape({"M": 4096, "N": 4096, "K": 4096}), "fp16")
    assert cost.flops == 2 * 4096**3 == 137_438_953_472
    assert cost.bytes == 3 * 4096 * 4096 * 2 == 100_663_296
    assert cost.peak == "fp16_tensor"
    with_bias = GEMM.cost(GEMM.check_shape({"M": 2, "N": 3, "K": 5, "bias": 1}), "fp8e4m3")
    # FLOPs 2·2·3·5 + 2·3; bytes (2·5 + 5·3)·1 (fp8 in) + 2·3·2 (bf16 out) + 3·2 (bias).
    assert (with_bias.flops, with_bias.bytes) == (66.0, 25 + 12 + 6)


def test_gemm_space_and_defaults_per_card() -> None:
    shape = GEMM.check_shape(GEMM.presets["square-4096"])
    h100, a10g, t4 = lookup("h100"), lookup("a10g"), lookup("t4")
    assert any(c["USE_TMA"] for c in GEMM.space(shape, "fp16", h100))
    assert not any(c["USE_TMA"] for c in GEMM.space(shape, "fp16", a10g))
    assert GEMM.default_config(shape, "fp16", h100)["num_stages"] == 3
    with pytest.raises(InvalidValueError, match="no fp8 tensor cores"):
        GEMM.default_config(shape, "fp8e4m3", t4)


def test_gemm_presets_come_from_real_models() -> None:
    # Llama-3-8B fused QKV: (32 + 2·8) heads × 128 = 6144 outputs over hidden 4096 (config.json).
    assert GEMM.presets["llama-3-8b-qkv-decode-b1"] == {"M": 1, "N": 6144, "K": 4096, "bias": 0}
    assert GEMM.presets["gemma-2-27b-mlp-down-prefill-8k"] == {"M": 8192, "N": 4608, "K": 36864, "bias": 0}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("residual", [0, 1])
@pytest.mark.parametrize(("rows", "hidden"), [(37, 1000), (1, 4097), (5, 33), (3, 1)])
def test_rmsnorm_matches_reference(dtype: str, residual: int, rows: int, hidden: int) -> None:
    config = NORM.default_config(NORM.check_shape({"rows": rows, "hidden": hidden}), dtype, lookup("h100"))
    check_kernel(NORM, {"rows": rows, "hidden": hidden, "residual": residual}, dtype, config)


def test_rmsnorm_default_config_is_in_its_space() -> None:
    for hidden in (1, 33, 64, 1000, 8192, 65536):
        shape = NORM.check_shape({"rows": 2, "hidden": hidden})
        default = NORM.default_config(shape, "fp16", lookup("h100"))
        assert default in NORM.space(shape, "fp16", lookup("h100")), hidden


def test_rmsnorm_residual_returns_the_sum() -> None:
    _, out = check_kernel(NORM, {"rows": 4, "hidden": 64, "residual": 1}, "fp16", {"num_warps": 2}, seed=7)
    inputs = NORM.make_inputs({"rows": 4, "hidden": 64, "residual": 1}, "fp16", "cpu", 7)
    assert torch.equal(out["s"], (inputs["x"].float() + inputs["r"].float()).half())


def test_rmsnorm_cost_by_hand() -> None:
    plain = NORM.cost(NORM.check_shape({"rows": 4096, "hidden": 8192}), "bf16")
    # Read x, write y (2 bytes each), read w once.
    assert plain.bytes == 2 * 4096 * 8192 * 2 + 8192 * 2
    fused = NORM.cost(NORM.check_shape({"rows": 4096, "hidden": 8192, "residual": 1}), "bf16")
    # Plus read r and write s.
    assert fused.bytes == 4 * 4096 * 8192 * 2 + 8192 * 2
    assert fused.flops == 5 * 4096 * 8192 and plain.flops == 4 * 4096 * 8192
    assert plain.intensity < 1.1 and plain.peak == "fp32"


def test_rmsnorm_refuses_bad_shapes() -> None:
    x, w = torch.zeros(2, 8, dtype=torch.float16), torch.zeros(9, dtype=torch.float16)
    with pytest.raises(InvalidValueError, match=r"x \(2, 8\), w \(9,\)"):
        rmsnorm(x, w, torch.empty_like(x))
    with pytest.raises(InvalidValueError, match="exceeds the Triton kernel's 65536"):
        NORM.space(NORM.check_shape({"rows": 1, "hidden": 70000}), "fp16", lookup("h100"))


def test_poisoned_outputs_catch_an_unwritten_element() -> None:
    shape = GEMM.check_shape({"M": 40, "N": 40, "K": 8})
    inputs = GEMM.make_inputs(shape, "fp16", "cpu", 1)
    outputs = GEMM.make_outputs(inputs)
    outputs["c"].fill_(math.nan)
    gemm(inputs["a"][:39], inputs["b"], outputs["c"][:39], None, SMALL)  # leaves the last row unwritten
    found = check_outputs(GEMM, "fp16", outputs, GEMM.reference(inputs))
    assert not found.ok and found.unwritten == 40 and found.where.startswith("40 output elements never written")
    assert "c[39, 0]" in found.where and found.max_abs_err < 0.01  # the written rows are right


@pytest.mark.parametrize("spec", [GEMM, NORM], ids=lambda s: s.name)
def test_shape_checks_name_the_problem(spec) -> None:
    with pytest.raises(InvalidValueError, match="lacks"):
        spec.check_shape({})
    key = spec.shape_keys[0]
    with pytest.raises(InvalidValueError, match=f"{key}=0 must be"):
        spec.check_shape({**spec.default_shape, key: 0})
    with pytest.raises(InvalidValueError, match="does not support dtype 'fp64'"):
        spec.check_dtype("fp64")
