"""Kernel speed against same-run baselines, through iotrace's ``kernel_bench`` fixture. Run on a GPU:

    .venv/bin/python -m pytest bench/test_bench_kernels.py --benchmark-json=out/bench.json

``kernel_bench`` (iotrace/pytest_plugin.py) times iotrace's kernel with CUDA events (L2 flushed before each round;
kernels under 50 µs replayed from a CUDA graph) and stores GPU time in pytest-benchmark, with the card, config, shape,
dtype, TFLOP/s, GB/s, % of the attainable roofline and intensity in extra_info. Each baseline is timed the same way
on the same tensors with ``kernel_bench.time`` and goes into extra_info beside its ratio and the target. The
baselines are the kernels' own (``KernelSpec.baselines``: cuBLAS, SDPA, eager and compiled torch, copies, the 16-bit
cache decode), the same ones ``iotrace selfcheck`` times (GEMM bf16
>= 1.0x cuBLAS at 4096³ and 8192³; RMSNorm >= 90% of copy bandwidth at 4096x8192, fused residual >= 1.2x the unfused
pair; attention prefill >= 0.9x SDPA's flash backend at B4 H32 S4096 d128; decode >= 75% of copy bandwidth and faster
than SDPA at batch 1; int8-KV decode >= 1.7x the bf16 decode at context >= 8k; draft-verify within 1.25x of its
bandwidth floor). Targets are recorded, not asserted here; the gates are the command-line ones:
``--benchmark-compare-fail``, ``--iotrace-roofline-floor``, ``--iotrace-max-cv``
(see docs/commands/bench.md, "Regression gates").
"""

from __future__ import annotations

import re
import sys

import pytest

pytestmark = pytest.mark.gpu


def _slug(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_").lower()


def _against_baselines(kernel_bench, case, target: str, **extra):
    """Time each of the kernel's baselines, then benchmark the kernel once; extra_info gets each baseline's ms, our
    speedup over it (above 1: iotrace is faster) and, for a copy baseline, the share of its bandwidth we reach.
    Returns the BenchResult (a noisy one too: its ratios are recorded beside ``"noisy": true``), or None under
    ``--benchmark-disable``."""
    baselines = case.spec.baselines(case.inputs, case.shape, case.dtype)
    for call in baselines.values():
        call()  # compile or autotune once (torch.compile, cuBLAS heuristics) before timing
    times = {name: kernel_bench.time(call) for name, call in baselines.items()}
    result = kernel_bench(case, extra={**extra, "target": target, "command": " ".join(sys.argv)})
    if result is None:
        return None
    out = kernel_bench.benchmark.extra_info
    for name, seconds in times.items():
        out[f"{_slug(name)}_ms"] = seconds * 1e3
        if name.startswith("copy"):  # a bandwidth reference: it reads and writes what it moves
            moved = 2 * sum(t.numel() * t.element_size() for t in _copied(case))
            out["copy_gbps"] = moved / seconds / 1e9
            out["fraction_of_copy_bandwidth"] = case.cost.bytes / result.median_s / 1e9 / out["copy_gbps"]
        else:
            out[f"speedup_vs_{_slug(name)}"] = seconds / result.median_s
    return result


def _copied(case) -> list:
    """The tensors a kernel's copy baseline copies (RMSNorm: x; decode: K and V)."""
    names = ("k_cache", "v_cache") if "k_cache" in case.inputs else ("x",)
    return [case.inputs[n] for n in names]


@pytest.mark.parametrize("size", [4096, 8192])
def test_gemm_bf16_against_cublas(kernel_bench, size: int) -> None:
    case = kernel_bench.case("gemm", shape={"M": size, "N": size, "K": size}, dtype="bf16")
    _against_baselines(kernel_bench, case, ">= 1.0x torch.matmul")


@pytest.mark.parametrize("residual", [0, 1])
def test_rmsnorm_against_copy_and_unfused(kernel_bench, residual: int) -> None:
    case = kernel_bench.case("rmsnorm", shape={"rows": 4096, "hidden": 8192, "residual": residual}, dtype="bf16")
    _against_baselines(kernel_bench, case, ">= 90% of copy bandwidth" + ("; >= 1.2x eager torch" if residual else ""))


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_prefill_against_sdpa(kernel_bench, causal: int) -> None:
    case = kernel_bench.case("attention-prefill", preset="b4-h32-s4096-d128" + ("-causal" if causal else ""),
                             dtype="bf16")
    _against_baselines(kernel_bench, case, ">= 0.9x SDPA flash backend")


@pytest.mark.parametrize("preset", ["llama-3-8b-ctx32k-b1", "llama-3-8b-ctx8k-b32"])
def test_attention_decode_against_copy_and_sdpa(kernel_bench, preset: str) -> None:
    case = kernel_bench.case("attention-decode", preset=preset, dtype="bf16")
    _against_baselines(kernel_bench, case, ">= 75% of copy bandwidth; faster than SDPA at batch 1")


@pytest.mark.parametrize("preset", ["llama-3-8b-ctx8k-b32", "llama-3-8b-ctx32k-b1"])
@pytest.mark.parametrize("key_scales", [1, 2, 3])  # per-channel (+ 16-bit outliers); per token + outliers
def test_int8_decode_against_bf16_decode(kernel_bench, preset: str, key_scales: int) -> None:
    from iotrace.kernels.int8_kv import Int8DecodeSpec

    shape = {**Int8DecodeSpec.presets[preset], "key_scales": key_scales}
    case = kernel_bench.case("attention-decode-int8", shape=shape, dtype="bf16")
    _against_baselines(kernel_bench, case, ">= 1.7x the bf16 decode")


@pytest.mark.parametrize("preset", ["llama-3-b64-g4", "llama-3-b64-g4-logits"])
def test_draft_verify_against_its_floor(kernel_bench, preset: str) -> None:
    case = kernel_bench.case("draft-verify", preset=preset, dtype="fp32")
    result = _against_baselines(kernel_bench, case, "within 1.25x of the bandwidth floor")
    if result is not None:
        kernel_bench.benchmark.extra_info["over_floor"] = result.median_s / result.roofline_floor_s
