"""Kernel speed against same-run baselines, through iotrace's ``kernel_bench`` fixture. Run on a GPU:

    .venv/bin/python -m pytest bench/test_bench_kernels.py --benchmark-json=out/bench.json

``kernel_bench`` (iotrace/pytest_plugin.py) times iotrace's kernel with CUDA events (L2 flushed before each round;
kernels under 50 µs replayed from a CUDA graph) and stores GPU time in pytest-benchmark, with the card, config, shape,
dtype, TFLOP/s, GB/s, % of the attainable roofline and intensity in extra_info. Each baseline is timed the same way
on the same tensors with ``kernel_bench.time`` and goes into extra_info beside its ratio and the target (GEMM bf16
>= 1.0x cuBLAS at 4096³ and 8192³; RMSNorm >= 90% of copy bandwidth at 4096x8192, fused residual >= 1.2x the unfused
pair; attention prefill >= 0.9x SDPA's flash backend at B4 H32 S4096 d128; decode >= 75% of copy bandwidth and faster
than SDPA at batch 1; int8-KV decode >= 1.7x the bf16 decode at context >= 8k; draft-verify within 1.25x of its
bandwidth floor). Targets are recorded, not asserted here; the gates are the command-line ones:
``--benchmark-compare-fail``, ``--iotrace-roofline-floor``, ``--iotrace-max-cv`` (see the README).
"""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.gpu


def _ratios(extra: dict, ours_s: float, **baselines_s: float) -> dict:
    """Baseline times in ms and ours as a speedup over each (above 1: iotrace is faster)."""
    out = {**extra, "command": " ".join(sys.argv)}
    for name, seconds in baselines_s.items():
        out[f"{name}_ms"] = seconds * 1e3
        out[f"speedup_vs_{name}"] = seconds / ours_s
    return out


@pytest.mark.parametrize("size", [4096, 8192])
def test_gemm_bf16_against_cublas(kernel_bench, size: int) -> None:
    import torch

    case = kernel_bench.case("gemm", shape={"M": size, "N": size, "K": size}, dtype="bf16")
    a, b = case.inputs["a"], case.inputs["b"]
    cublas_s = kernel_bench.time(lambda: torch.matmul(a, b))
    ours_s = kernel_bench.time(case.call)
    kernel_bench(case, extra=_ratios({"target": ">= 1.0x torch.matmul"}, ours_s, cublas=cublas_s))


@pytest.mark.parametrize("residual", [0, 1])
def test_rmsnorm_against_copy_and_unfused(kernel_bench, residual: int) -> None:
    import torch

    from iotrace.kernels.rmsnorm import EPS

    case = kernel_bench.case("rmsnorm", shape={"rows": 4096, "hidden": 8192, "residual": residual}, dtype="bf16")
    x, w = case.inputs["x"], case.inputs["w"]
    copy_dst = torch.empty_like(x)

    def unfused() -> None:
        summed = x + case.inputs["r"] if residual else x
        variance = summed.float().pow(2).mean(-1, keepdim=True)
        (summed.float() * torch.rsqrt(variance + EPS) * w.float()).to(x.dtype)

    copy_s = kernel_bench.time(lambda: copy_dst.copy_(x))
    unfused_s = kernel_bench.time(unfused)
    ours_s = kernel_bench.time(case.call)
    copy_gbps = 2 * x.numel() * x.element_size() / copy_s / 1e9
    extra = {"copy_gbps": copy_gbps, "fraction_of_copy_bandwidth": case.cost.bytes / ours_s / 1e9 / copy_gbps,
             "target": ">= 90% of copy bandwidth" + ("; >= 1.2x the unfused pair" if residual else "")}
    kernel_bench(case, extra=_ratios(extra, ours_s, unfused=unfused_s))


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_prefill_against_sdpa(kernel_bench, causal: int) -> None:
    import torch
    import torch.nn.functional as F

    case = kernel_bench.case("attention-prefill", preset="b4-h32-s4096-d128" + ("-causal" if causal else ""),
                             dtype="bf16")
    # SDPA takes (B, H, S, d); the packed layout holds 4 equal sequences back to back.
    q, k, v = (case.inputs[n].view(4, 4096, 32, 128).transpose(1, 2) for n in ("q", "k", "v"))

    def sdpa() -> None:
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

    sdpa_s = kernel_bench.time(sdpa)
    ours_s = kernel_bench.time(case.call)
    kernel_bench(case, extra=_ratios({"target": ">= 0.9x SDPA flash backend"}, ours_s, sdpa_flash=sdpa_s))


@pytest.mark.parametrize("preset", ["llama-3-8b-ctx32k-b1", "llama-3-8b-ctx8k-b32"])
def test_attention_decode_against_copy_and_sdpa(kernel_bench, preset: str) -> None:
    import torch
    import torch.nn.functional as F

    case = kernel_bench.case("attention-decode", preset=preset, dtype="bf16")
    k, v = case.inputs["k_cache"], case.inputs["v_cache"]
    dst = torch.empty_like(k)
    group = case.shape["heads"] // case.shape["kv_heads"]
    q4 = case.inputs["q"][:, :, None, :]                                           # (B, H, 1, d)
    k4, v4 = (t.transpose(1, 2).repeat_interleave(group, dim=1) for t in (k, v))  # (B, H, T, d), GQA expanded

    copy_s = kernel_bench.time(lambda: (dst.copy_(k), dst.copy_(v)))
    sdpa_s = kernel_bench.time(lambda: F.scaled_dot_product_attention(q4, k4, v4))
    ours_s = kernel_bench.time(case.call)
    copy_gbps = 2 * 2 * k.numel() * k.element_size() / copy_s / 1e9
    extra = {"copy_gbps": copy_gbps, "fraction_of_copy_bandwidth": case.cost.bytes / ours_s / 1e9 / copy_gbps,
             "target": ">= 75% of copy bandwidth; faster than SDPA at batch 1"}
    kernel_bench(case, extra=_ratios(extra, ours_s, sdpa=sdpa_s))


@pytest.mark.parametrize("preset", ["llama-3-8b-ctx8k-b32", "llama-3-8b-ctx32k-b1"])
@pytest.mark.parametrize("key_scales", [1, 2])  # per-channel keys; and with the 16-bit outlier channels
def test_int8_decode_against_bf16_decode(kernel_bench, preset: str, key_scales: int) -> None:
    from iotrace.kernels.attention_decode import DecodeSpec
    from iotrace.kernels.int8_kv import Int8DecodeSpec

    shape8 = {**Int8DecodeSpec.presets[preset], "key_scales": key_scales}
    int8 = kernel_bench.case("attention-decode-int8", shape=shape8, dtype="bf16")
    bf16 = kernel_bench.case("attention-decode", shape={k: int8.shape[k] for k in DecodeSpec.shape_keys},
                             dtype="bf16")
    bf16_s = kernel_bench.time(bf16.call)
    int8_s = kernel_bench.time(int8.call)
    kernel_bench(int8, extra=_ratios({"target": ">= 1.7x the bf16 decode"}, int8_s, bf16_decode=bf16_s))


def test_draft_verify_against_its_floor(kernel_bench) -> None:
    case = kernel_bench.case("draft-verify", preset="llama-3-b64-g4", dtype="fp32")
    result = kernel_bench(case, extra={"target": "within 1.25x of the bandwidth floor"})
    if result is not None:
        kernel_bench.benchmark.extra_info["over_floor"] = result.median_s / result.roofline_floor_s
