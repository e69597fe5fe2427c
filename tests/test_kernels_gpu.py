"""The kernels on a real GPU: full-size shapes, native bf16/fp8 tensor cores, TMA on sm_90, the CUDA C++
backend through CuPy, and timing. Skipped on machines without a GPU; bench/gpu_validate.sh runs them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def _card():
    from iotrace.cards import detect

    return detect()


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8e4m3"])
@pytest.mark.parametrize("preset", ["square-4096", "llama-3-8b-qkv-decode-b1", "llama-3-8b-mlp-down-prefill-2k"])
def test_gemm_on_gpu(dtype: str, preset: str) -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.gemm import GemmSpec
    from iotrace.runner import run

    card, spec = _card(), GemmSpec()
    if dtype == "fp8e4m3" and card.sm_limits.cc < (8, 9):
        pytest.skip(f"{card.name} has no fp8 tensor cores")
    result = run(KernelCall.make(spec, spec.presets[preset], dtype, card))
    assert result.mode == "gpu" and result.check.correct, result.check.where
    assert result.timing is not None and result.timing.median_us > 0


def test_gemm_tma_on_hopper() -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.gemm import GemmSpec
    from iotrace.runner import resolve_config, run

    card, spec = _card(), GemmSpec()
    if card.sm_limits.cc < (9, 0):
        pytest.skip(f"{card.name} (CC {card.cc}) has no TMA")
    shape = spec.check_shape(spec.presets["square-4096"])
    call = KernelCall.make(spec, shape, "bf16", card)
    config = {**resolve_config(call), "USE_TMA": True}
    result = run(call, config=config)
    assert result.check.correct, result.check.where


@pytest.mark.parametrize("backend", ["triton", "cuda"])
@pytest.mark.parametrize("preset", ["4096x8192", "4096x8192-residual", "llama-3-8b-decode-b1"])
def test_rmsnorm_on_gpu(backend: str, preset: str) -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.rmsnorm import RMSNormSpec
    from iotrace.runner import run

    spec = RMSNormSpec()
    result = run(KernelCall.make(spec, spec.presets[preset], "bf16", _card(), backend))
    assert result.mode == "gpu" and result.check.correct, result.check.where


@pytest.mark.parametrize("preset", ["b4-h32-s4096-d128", "b4-h32-s4096-d128-causal", "llama-3-8b-prefill-2k-b8-varlen"])
def test_attention_prefill_on_gpu(preset: str) -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.attention_prefill import PrefillSpec
    from iotrace.runner import resolve_config, run

    card, spec = _card(), PrefillSpec()
    result = run(KernelCall.make(spec, spec.presets[preset], "bf16", card))
    assert result.mode == "gpu" and result.check.correct, result.check.where
    if card.sm_limits.cc >= (9, 0):
        shape = spec.check_shape(spec.presets[preset])
        call = KernelCall.make(spec, shape, "bf16", card)
        config = {**resolve_config(call), "USE_TMA": True}
        assert run(call, config=config).check.correct


@pytest.mark.parametrize("preset", ["llama-3-8b-ctx32k-b1", "llama-3-8b-ctx8k-b32-varlen", "gemma-2-27b-ctx8k-b1"])
def test_attention_decode_on_gpu(preset: str) -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.attention_decode import DecodeSpec
    from iotrace.runner import run

    spec = DecodeSpec()
    result = run(KernelCall.make(spec, spec.presets[preset], "bf16", _card()))
    assert result.mode == "gpu" and result.check.correct, result.check.where


@pytest.mark.parametrize("preset", ["llama-3-b64-g4", "llama-3-b64-g4-greedy", "llama-3-b1-g8",
                                    "llama-3-b64-g4-logits"])
def test_draft_verify_on_gpu(preset: str) -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.draft_verify import DraftVerifySpec
    from iotrace.runner import run

    spec = DraftVerifySpec()
    result = run(KernelCall.make(spec, spec.presets[preset], "fp32", _card()))
    assert result.mode == "gpu" and result.check.correct, result.check.where


#: Cosine floors per key scheme, a little under the exact-arithmetic figures in the test below.
_INT8_COSINE_FLOOR = {0: 0.995, 1: 0.999, 2: 0.9999, 3: 0.9999}


@pytest.mark.parametrize("preset", ["llama-3-8b-ctx32k-b1", "llama-3-8b-ctx8k-b32-paged"])
@pytest.mark.parametrize("key_scales", [0, 1, 2, 3])
def test_int8_decode_on_gpu(preset: str, key_scales: int) -> None:
    from iotrace.kernel_call import KernelCall
    from iotrace.kernels.int8_kv import Int8DecodeSpec
    from iotrace.runner import run

    spec = Int8DecodeSpec()
    result = run(KernelCall.make(spec, {**spec.presets[preset], "key_scales": key_scales}, "bf16", _card()))
    assert result.mode == "gpu" and result.check.correct, result.check.where
    # Against fp32 attention over the unquantised cache, each scheme is held to what its arithmetic allows: on these
    # keys (four channels 20x the rest) per-token scales (0) reach cosine 0.99602 even in exact arithmetic (the
    # dequantised reference, llama-3-8b-ctx32k-b1), per channel (1) 0.99963, the kept-channel schemes 0.99997; the
    # H200 run of 2026-12-04 failed scheme 0 against a flat 0.999 that only the reference's own figure can settle.
    assert result.check.quality["cosine"] > _INT8_COSINE_FLOOR[key_scales], result.check.quality
