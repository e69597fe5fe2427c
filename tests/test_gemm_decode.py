"""The decode GEMM (gemm-decode) against its fp64 reference under the Triton interpreter, on fresh random inputs.

Outputs are poisoned (NaN) before every launch so an element the kernel forgets to write fails the check. Shapes
are ragged on purpose (N = 83, K = 130: no multiple of any block, nor K of SPLIT_K · BLOCK_K), every M path is
covered (1, a few, past 32, the most) in every dtype, with each epilogue and with and without the split-K reduce.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.kernels.backend import interpreting
from iotrace.kernels.gemm_decode import (
    MAX_M,
    GemmDecodeSpec,
    _gemm_decode_launches,
    gemm_decode,
    interpreter_config,
    reference_decode,
)
from iotrace.runner import check_outputs
from tests.conftest import check_kernel

SPEC = GemmDecodeSpec()

pytestmark = pytest.mark.skipif(not interpreting(), reason="these checks run the Triton interpreter on the CPU; "
                                                           "bench/gpu_validate.sh runs them on a GPU")

SMALL = {"BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
_TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# (residual, swiglu): plain, the residual add, the SwiGLU gate/up epilogue.
EPILOGUES = [(0, 0), (1, 0), (0, 1)]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("split_k", [1, 4])  # 4 splits of 32: K = 130 is no multiple of 128
@pytest.mark.parametrize(("residual", "swiglu"), EPILOGUES)
@pytest.mark.parametrize("M", [1, 3, 33, 64])
def test_matches_reference_on_ragged_shapes(dtype: str, split_k: int, residual: int, swiglu: int, M: int) -> None:
    N = 82 if swiglu else 83  # swiglu: F = 41 gate and 41 up rows
    check_kernel(SPEC, {"M": M, "N": N, "K": 130, "residual": residual, "swiglu": swiglu}, dtype,
                 {**SMALL, "SPLIT_K": split_k})


@pytest.mark.parametrize(("split_k", "block_k"), [(8, 32), (16, 64), (2, 128)])
@pytest.mark.parametrize(("residual", "swiglu"), EPILOGUES)
def test_splits_left_without_k_write_zero_partials(split_k: int, block_k: int, residual: int, swiglu: int) -> None:
    # K = 130 in chunks of whole K blocks: 8 x 32 leaves splits 5..7 empty, 16 x 64 leaves 13 of them empty.
    check_kernel(SPEC, {"M": 5, "N": 98, "K": 130, "residual": residual, "swiglu": swiglu}, "fp16",
                 {**SMALL, "BLOCK_K": block_k, "SPLIT_K": split_k})


@pytest.mark.parametrize("config", [
    {**SMALL, "BLOCK_N": 128, "BLOCK_K": 256},                 # tiles wider than N and K
    {**SMALL, "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 2},
    {**SMALL, "BLOCK_N": 256, "BLOCK_K": 32, "SPLIT_K": 16},
])
def test_tiles_cover_the_output(config: dict) -> None:
    check_kernel(SPEC, {"M": 17, "N": 301, "K": 97, "residual": 1}, "bf16", config)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("split_k", [1, 4])
def test_residual_in_place(dtype: str, split_k: int) -> None:
    # The decoder's residual update: x += h · w_oᵀ, written as gemm_decode(h, w_o, x, residual=x).
    gen = torch.Generator().manual_seed(11)
    M, N, K, t = 7, 99, 150, _TORCH[dtype]
    h = (torch.randn(M, K, generator=gen) / K**0.25).to(t)
    w = (torch.randn(N, K, generator=gen) / K**0.25).to(t)
    x = torch.randn(M, N, generator=gen).to(t)
    expected = reference_decode(h, w, x)  # computed before x is overwritten
    gemm_decode(h, w, x, residual=x, config={**SMALL, "SPLIT_K": split_k})
    found = check_outputs(SPEC, dtype, {"out": x}, {"out": expected})
    assert found.ok, found.where


@pytest.mark.parametrize("split_k", [1, 2])
def test_row_views_of_bigger_buffers(split_k: int) -> None:
    # x is a row view with a row stride past K (rows of a wider buffer), out a column slice of a wider one.
    gen = torch.Generator().manual_seed(3)
    M, N, K = 4, 50, 70
    big_x = torch.randn(M, K + 30, generator=gen, dtype=torch.float32).to(torch.float16)
    x = big_x[:, 5:5 + K]
    w = (torch.randn(N, K, generator=gen) / K**0.25).to(torch.float16)
    res = torch.randn(M, N, generator=gen).to(torch.float16)
    big_out = torch.full((M, N + 20), float("nan"), dtype=torch.float16)
    out = big_out[:, 10:10 + N]
    gemm_decode(x, w, out, residual=res, config={**SMALL, "SPLIT_K": split_k})
    found = check_outputs(SPEC, "fp16", {"out": out}, {"out": reference_decode(x, w, res)})
    assert found.ok, found.where
    assert big_out[:, :10].isnan().all() and big_out[:, 10 + N:].isnan().all()  # nothing written outside out


def test_default_config_runs_when_none_is_given() -> None:
    # Under the interpreter a call without a config takes interpreter_config: no split, the widest tiles.
    for name in SPEC.presets:
        shape = SPEC.shape_for(name)
        assert interpreter_config(shape) in SPEC.space(shape, "fp32", lookup("h100")), name
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 40, generator=gen), torch.randn(66, 40, generator=gen) / 40**0.5
    out = torch.empty(2, 33)
    gemm_decode(x, w, out, swiglu=True)
    assert check_outputs(SPEC, "fp32", {"out": out}, {"out": reference_decode(x, w, swiglu=True)}).ok


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, MAX_M), st.integers(1, 70), st.integers(1, 200), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from(EPILOGUES), st.sampled_from(["fp16", "bf16", "fp32"]), st.integers(0, 2**31 - 1))
def test_hypothesis_small_shapes(M: int, F: int, K: int, split_k: int, epilogue: tuple[int, int], dtype: str,
                                 seed: int) -> None:
    residual, swiglu = epilogue
    shape = {"M": M, "N": 2 * F if swiglu else F, "K": K, "residual": residual, "swiglu": swiglu}
    check_kernel(SPEC, shape, dtype, {**SMALL, "SPLIT_K": split_k}, seed)


@pytest.mark.parametrize("card_key", ["h100", "a100-sxm4-80gb", "rtx3090"])
def test_default_configs_are_in_the_space_and_fill_the_card(card_key: str) -> None:
    card = lookup(card_key)
    for name in SPEC.presets:
        shape = SPEC.shape_for(name)
        for dtype in SPEC.dtypes:
            config = SPEC.default_config(shape, dtype, card)
            assert config in SPEC.space(shape, dtype, card), (name, dtype, config)
        config = SPEC.default_config(shape, "fp16", card)
        n_out = shape["N"] // (2 if shape["swiglu"] else 1)
        programs = -(-n_out // config["BLOCK_N"]) * config["SPLIT_K"]
        k_blocks = -(-shape["K"] // config["BLOCK_K"])
        # About two programs per SM, unless K has no more blocks to split (or 16 splits are reached).
        assert programs >= card.sm_count or config["SPLIT_K"] * 2 > min(k_blocks, 16), (name, config)
    small = SPEC.default_config(SPEC.shape_for("smollm2-135m-qkv-decode-b1"), "fp16", card)
    assert small["SPLIT_K"] > 1  # 960 outputs are too few programs for any of these cards
    assert SPEC.default_config(SPEC.shape_for("llama-3-8b-lm-head-decode-b1"), "fp16", card)["SPLIT_K"] == 1


def test_default_config_on_the_default_shape() -> None:
    shape = SPEC.shape_for()
    check_kernel(SPEC, shape, "fp16", SPEC.default_config(shape, "fp16", lookup("h100")))


@pytest.mark.parametrize(("split_k", "residual", "swiglu", "kernels"), [
    (1, 0, 0, ["_gemm_decode_kernel"]),
    (1, 0, 1, ["_gemm_decode_kernel"]),
    (4, 1, 0, ["_gemm_decode_kernel", "_gemm_decode_reduce_kernel"]),
    (8, 0, 1, ["_gemm_decode_kernel", "_gemm_decode_reduce_kernel"]),
])
def test_compile_units_one_per_launch(split_k: int, residual: int, swiglu: int, kernels: list[str]) -> None:
    shape = SPEC.check_shape({"M": 3, "N": 2048, "K": 576, "residual": residual, "swiglu": swiglu})
    config = {**SMALL, "SPLIT_K": split_k}
    units = SPEC.compile_units(shape, "bf16", config)
    assert [u.function for u in units] == kernels
    assert all(u.module == "iotrace.kernels.gemm_decode" for u in units)
    # Each unit came from TritonLaunch.unit(), which refuses arguments that do not name the kernel's parameters;
    # the launches the launcher makes on real tensors name the same arguments.
    x, w = torch.empty(3, 576, dtype=torch.bfloat16), torch.empty(2048, 576, dtype=torch.bfloat16)
    out = torch.empty(3, 1024 if swiglu else 2048, dtype=torch.bfloat16)
    real = _gemm_decode_launches(x, w, out, torch.empty(3, 2048, dtype=torch.bfloat16) if residual else None,
                                 bool(swiglu), config, interpreter=False)
    for unit, launch in zip(units, real, strict=True):
        assert unit == launch.unit()
    main = units[0]
    assert main.args["x_ptr"] == "*bf16" and main.args["K"] == 576 and main.args["N_OUT"] == out.shape[1]
    assert main.constexprs["SPLIT_K"] == split_k and main.constexprs["BLOCK_M"] == 16
    assert main.grid == (-(-out.shape[1] // 32), split_k, 1)
    if split_k > 1:
        assert units[1].args["part_ptr"] == "*fp32" and units[1].grid[1] == 3


def test_bad_inputs_name_the_values() -> None:
    x, w, out = torch.zeros(65, 8), torch.zeros(16, 8), torch.zeros(65, 16)
    with pytest.raises(InvalidValueError, match="at most 64 rows, got M=65 — use the tiled `gemm` kernel"):
        gemm_decode(x, w, out, config=SMALL)
    with pytest.raises(InvalidValueError, match="M=65"):
        SPEC.check_shape({"M": 65, "N": 16, "K": 8})
    x, out = torch.zeros(2, 8), torch.zeros(2, 16)
    with pytest.raises(InvalidValueError, match="both swiglu and a residual"):
        gemm_decode(x, w, torch.zeros(2, 8), residual=out, swiglu=True, config=SMALL)
    with pytest.raises(InvalidValueError, match="residual=1 and swiglu=1"):
        SPEC.check_shape({"M": 2, "N": 16, "K": 8, "residual": 1, "swiglu": 1})
    with pytest.raises(InvalidValueError, match=r"x \(2, 8\), w \(16, 9\), out \(2, 16\)"):
        gemm_decode(x, torch.zeros(16, 9), out, config=SMALL)
    with pytest.raises(InvalidValueError, match=r"out \(2, 16\)"):  # swiglu writes (M, N/2)
        gemm_decode(x, w, out, swiglu=True, config=SMALL)
    with pytest.raises(InvalidValueError, match=r"even N .* got N=15"):
        SPEC.check_shape({"M": 2, "N": 15, "K": 8, "swiglu": 1})
    with pytest.raises(InvalidValueError, match="float32, float16"):
        gemm_decode(x, w.half(), out, config=SMALL)
    with pytest.raises(InvalidValueError, match="contiguous last dimension"):
        gemm_decode(torch.zeros(8, 2).T, w, out, config=SMALL)
    with pytest.raises(InvalidValueError, match="out overlaps x"):
        square = torch.zeros(2, 8)
        gemm_decode(square, torch.zeros(8, 8), square, config=SMALL)


def test_cost_by_hand() -> None:
    cost = SPEC.cost(SPEC.shape_for("llama-3-8b-qkv-decode-b1"), "bf16")
    assert cost.flops == 2 * 6144 * 4096
    assert cost.bytes == (6144 * 4096 + 4096 + 6144) * 2  # w once, x, out
    assert cost.peak == "bf16_tensor"
    down = SPEC.cost(SPEC.check_shape({"M": 2, "N": 3, "K": 5, "residual": 1}), "fp32")
    # FLOPs 2·2·3·5 + 2·3; bytes (3·5 + 2·5 + 2·3 + 2·3)·4.
    assert (down.flops, down.bytes, down.peak) == (66.0, 148.0, "fp32")
    glu = SPEC.cost(SPEC.check_shape({"M": 2, "N": 6, "K": 5, "swiglu": 1}), "fp16")
    # FLOPs 2·2·6·5 + 5·2·3; bytes (6·5 + 2·5 + 2·3)·2: out is (M, F).
    assert (glu.flops, glu.bytes) == (150.0, 92.0)


def test_presets_come_from_real_models() -> None:
    # SmolLM2-135M: (9 + 2·3) heads × 64 = 960 QKV outputs over hidden 576; Llama-3-8B gate+up 2 × 14336.
    assert SPEC.presets["smollm2-135m-qkv-decode-b1"] == {"M": 1, "N": 960, "K": 576, "residual": 0, "swiglu": 0}
    assert SPEC.presets["llama-3-8b-gate-up-decode-b32"] == {"M": 32, "N": 28672, "K": 4096, "residual": 0,
                                                             "swiglu": 1}
    assert SPEC.presets["llama-3-8b-o-proj-decode-b1"]["residual"] == 1
    assert SPEC.presets["smollm2-135m-lm-head-decode-b32"]["N"] == 49152
    assert len(SPEC.presets) == 20


@pytest.mark.parametrize("name", ["llama-3-8b-gate-up-decode-b32", "llama-3-8b-lm-head-decode-b1"])
def test_reduced_shapes_fit_and_keep_swiglu_even(name: str) -> None:
    shape = SPEC.shape_for(name)
    small = SPEC.reduce_shape(shape, SPEC.interpreter_budget)
    SPEC.check_shape(small)  # an even N with swiglu
    assert small["M"] == shape["M"] and small["M"] * small["N"] * small["K"] <= SPEC.interpreter_budget * 4


def test_baselines_compute_the_same_on_the_cpu() -> None:
    for residual, swiglu in EPILOGUES:
        shape = SPEC.check_shape({"M": 3, "N": 40, "K": 24, "residual": residual, "swiglu": swiglu})
        inputs = SPEC.make_inputs(shape, "fp32", "cpu", 2)
        baselines = SPEC.baselines(inputs, shape, "fp32")
        assert len(baselines) == 2 and "copy of w" in baselines
        cublas = next(fn for label, fn in baselines.items() if label.startswith("F.linear"))
        torch.testing.assert_close(cublas().double(), SPEC.reference(inputs)["out"], atol=1e-4, rtol=1e-4)
