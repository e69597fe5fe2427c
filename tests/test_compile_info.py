"""Every built-in kernel compiles for sm_80/86/89/90 on the CPU, and its resources feed occupancy.

Real compilers run here: Triton (with its bundled ptxas) in worker processes, and nvcc for CUDA C++.
"""

from __future__ import annotations

import shutil
import time

import pytest

from iotrace.cards import lookup
from iotrace.compiler import compile_resources, parse_ptxas_log
from iotrace.kernel_call import KernelCall
from iotrace.kernels.attention_decode import DecodeSpec
from iotrace.kernels.attention_prefill import PrefillSpec
from iotrace.kernels.draft_verify import DraftVerifySpec
from iotrace.kernels.gemm import GemmSpec
from iotrace.kernels.int8_kv import Int8DecodeSpec
from iotrace.kernels.rmsnorm import RMSNormSpec
from iotrace.runner import ConfigError, static_analysis

GEMM, NORM, PREFILL, DECODE, VERIFY = GemmSpec(), RMSNormSpec(), PrefillSpec(), DecodeSpec(), DraftVerifySpec()
INT8 = Int8DecodeSpec()
CARDS = {"8.0": "a100", "8.6": "a10g", "8.9": "rtx4090", "9.0": "h100"}

# A real ptxas -v block, as nvcc 13.0 printed it for rmsnorm.cu on sm_90.
PTXAS_LOG = """ptxas info    : Compiling entry function 'rmsnorm_f16_residual' for 'sm_90'
ptxas info    : Function properties for rmsnorm_f16_residual
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 15 registers, used 1 barriers, 128 bytes smem
"""


def test_parse_ptxas_log() -> None:
    assert parse_ptxas_log(PTXAS_LOG) == {"registers": 15, "barriers": 1, "static_smem": 128, "stack_bytes": 0,
                                          "spill_stores": 8, "spill_loads": 12}


@pytest.mark.slow
@pytest.mark.parametrize("cc", sorted(CARDS))
def test_triton_kernels_compile_for_every_target(cc: str) -> None:
    card = lookup(CARDS[cc])
    gemm_shape = GEMM.check_shape(GEMM.presets["square-4096"])
    norm_shape = NORM.check_shape(NORM.presets["4096x8192-residual"])
    gemm_config = GEMM.default_config(gemm_shape, "fp16", card)
    units = [*GEMM.compile_units(gemm_shape, "fp16", gemm_config),
             *NORM.compile_units(norm_shape, "bf16", NORM.default_config(norm_shape, "bf16", card))]
    prefill_shape = PREFILL.check_shape(PREFILL.presets["b4-h32-s4096-d128-causal"])
    decode_shape = DECODE.check_shape(DECODE.presets["llama-3-8b-ctx32k-b1"])
    prefill_config = PREFILL.default_config(prefill_shape, "bf16", card)
    verify_shape = VERIFY.check_shape(VERIFY.presets["llama-3-b64-g4"])
    units += [*PREFILL.compile_units(prefill_shape, "bf16", prefill_config),
              *DECODE.compile_units(decode_shape, "bf16", DECODE.default_config(decode_shape, "bf16", card)),
              *VERIFY.compile_units(verify_shape, "fp32", VERIFY.default_config(verify_shape, "fp32", card))]
    int8_shape = INT8.check_shape(INT8.presets["llama-3-8b-ctx32k-b1-paged"])
    units += INT8.compile_units(int8_shape, "bf16", INT8.default_config(int8_shape, "bf16", card))
    if cc == "9.0":
        units += GEMM.compile_units(gemm_shape, "fp16", {**gemm_config, "USE_TMA": True})
        units += PREFILL.compile_units(prefill_shape, "bf16", {**prefill_config, "USE_TMA": True})
    resources = compile_resources(units, cc)
    assert [r.target for r in resources] == [f"sm_{cc.replace('.', '')}"] * len(units)
    for res in resources:
        assert 0 < res.registers <= 255 and res.compiler.startswith("triton 3.9")
    gemm_res, norm_res = resources[0], resources[1]
    one_stage = (gemm_config["BLOCK_M"] + gemm_config["BLOCK_N"]) * gemm_config["BLOCK_K"] * 2
    assert gemm_res.shared_mem_bytes >= one_stage, "the GEMM stages its A and B tiles through shared memory"
    assert gemm_res.grid == (32 * 4096 // gemm_config["BLOCK_N"] * 4096 // gemm_config["BLOCK_M"] // 32, 1, 1)
    assert norm_res.threads_per_block == 32 * 16 and norm_res.grid == (4096, 1, 1)
    assert norm_res.spills == 0
    prefill_res, split_res, combine_res = resources[2], resources[3], resources[4]
    assert prefill_res.kernel == "_prefill_kernel" and prefill_res.grid == (128, 4096 // prefill_config["BLOCK_M"], 1)
    # K and V blocks are staged through shared memory: at least one BLOCK_N x d tile of each.
    assert prefill_res.shared_mem_bytes >= 2 * prefill_config["BLOCK_N"] * 128 * 2
    assert split_res.kernel == "_decode_split_kernel" and split_res.grid[0] == 8
    assert combine_res.kernel == "_decode_combine_kernel" and combine_res.grid == (32, 1, 1)
    assert resources[5].kernel == "_verify_kernel" and resources[5].grid == (64, 1, 1) and resources[5].spills == 0
    assert resources[6].kernel == "_decode_int8_kernel" and resources[6].grid[0] == 8


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed: CUDA C++ resources need it")
@pytest.mark.parametrize("cc", sorted(CARDS))
def test_cuda_kernel_compiles_for_every_target(cc: str) -> None:
    shape = NORM.check_shape({"rows": 4096, "hidden": 8192, "residual": 1})
    (res,) = compile_resources(list(NORM.compile_units(shape, "fp16", {"BLOCK_THREADS": 256}, "cuda")), cc)
    assert res.kernel == "rmsnorm_f16_residual" and res.compiler.startswith("nvcc")
    assert 0 < res.registers <= 64 and res.barriers == 1
    assert res.static_smem == 128  # 32 per-warp partial sums of 4 bytes
    assert res.threads_per_block == 256 and res.grid == (4096, 1, 1)


def test_compile_results_are_cached(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOTRACE_CACHE_DIR", str(tmp_path))
    shape = NORM.check_shape({"rows": 8, "hidden": 300})
    units = list(NORM.compile_units(shape, "fp16", {"num_warps": 2}))
    start = time.perf_counter()
    first = compile_resources(units, "8.6")
    cold = time.perf_counter() - start
    start = time.perf_counter()
    second = compile_resources(units, "8.6")
    warm = time.perf_counter() - start
    assert first == second and len(list((tmp_path / "compile").glob("*.json"))) == 1
    assert warm < cold / 10, f"cache hit took {warm:.3f}s against {cold:.3f}s cold"


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_static_analysis_gives_occupancy_and_waves() -> None:
    card = lookup("h100")
    shape = NORM.check_shape({"rows": 4096, "hidden": 8192, "residual": 1})
    config = NORM.default_config(shape, "bf16", card)
    resources, occ, waves = static_analysis(KernelCall(NORM, shape, "bf16", card), config)
    assert occ.threads_per_block == 512 and occ.registers_per_thread == resources[0].registers
    assert occ.active_blocks_per_sm >= 1
    assert waves == pytest.approx(4096 / (occ.active_blocks_per_sm * 132))


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_config_that_cannot_launch_is_refused() -> None:
    card = lookup("a10g")  # 99 KB of shared memory per block
    shape = GEMM.check_shape(GEMM.presets["square-4096"])
    config = {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 5,
              "USE_TMA": False}
    with pytest.raises(ConfigError, match=r"cannot launch on NVIDIA A10G: .* bytes of shared memory per block exceed"):
        static_analysis(KernelCall(GEMM, shape, "fp16", card), config)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_spilling_config_is_named_in_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 128×256×64 GEMM tile with 8 warps spills on sm_90 (ptxas: 255 registers, 516 B spill stores + 448 B spill
    loads with bias): `iotrace run` says so in its notes, with both counts, instead of one unexplained sum."""
    from iotrace import runner
    from iotrace.cards import lookup
    from iotrace.kernel_call import KernelCall

    call = KernelCall(GEMM, {"M": 97, "N": 83, "K": 71, "bias": 1}, "fp16", lookup("h100"))
    config = runner.resolve_config(call, {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8})
    monkeypatch.setattr(runner, "_check", lambda *a: pytest.fail("the check is not what this test is about"))
    result = runner.run(call, config=config, check=False)
    main = result.resources[0]
    assert main.spills == main.spill_stores + main.spill_loads > 0
    (note,) = [n for n in result.notes if "spills" in n]
    assert f"{main.spill_stores} B spill stores + {main.spill_loads} B spill loads" in note and "BLOCK_" in note
    quiet = runner.run(call, check=False)  # the default config: no spill, no such note (tests/test_default_configs)
    assert not any("spills" in n for n in quiet.notes)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_forked_worker_and_a_fresh_one_compile_alike(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile fork server (iotrace/compiler/forkserver.py) is only a faster start: a worker forked from it and
    a fresh ``python -m iotrace.compiler`` (IOTRACE_COMPILE_FORKSERVER=0) give the same resources."""
    shape = NORM.check_shape({"rows": 8, "hidden": 300})
    units = list(NORM.compile_units(shape, "fp16", {"num_warps": 4}))
    monkeypatch.setenv("IOTRACE_CACHE_DIR", str(tmp_path / "forked"))
    forked = compile_resources(units, "8.0")
    monkeypatch.setenv("IOTRACE_CACHE_DIR", str(tmp_path / "fresh"))
    monkeypatch.setenv("IOTRACE_COMPILE_FORKSERVER", "0")
    fresh = compile_resources(units, "8.0")
    assert forked == fresh and forked[0].registers > 0
