"""Same-run baselines compute what the kernel computes: a speed ratio against a baseline doing other work would
mean nothing. Checked on CPU where torch runs the baseline there; SDPA's flash backend, torch.compile and the
16-bit-cache decode run on the GPU only (bench/gpu_validate.sh)."""

from __future__ import annotations

import pytest
import torch

from iotrace.kernels.attention_decode import DecodeSpec
from iotrace.kernels.draft_verify import DraftVerifySpec
from iotrace.kernels.gemm import GemmSpec
from iotrace.kernels.rmsnorm import RMSNormSpec


def _inputs(spec, shape: dict, dtype: str):
    shape = spec.check_shape({**spec.default_shape, **shape})
    return shape, spec.make_inputs(shape, dtype, "cpu", seed=3)


@pytest.mark.parametrize("bias", [0, 1])
def test_gemm_baseline_is_the_same_product(bias: int) -> None:
    spec = GemmSpec()
    shape, inputs = _inputs(spec, {"M": 64, "N": 48, "K": 80, "bias": bias}, "bf16")
    (name, call), = spec.baselines(inputs, shape, "bf16").items()
    assert name == ("torch.addmm (cuBLAS)" if bias else "torch.matmul (cuBLAS)")
    torch.testing.assert_close(call().float(), spec.reference(inputs)["c"], atol=0.25, rtol=0.02)


@pytest.mark.parametrize("residual", [0, 1])
def test_rmsnorm_eager_baseline_is_the_same_norm(residual: int) -> None:
    spec = RMSNormSpec()
    shape, inputs = _inputs(spec, {"rows": 7, "hidden": 256, "residual": residual}, "fp16")
    found = spec.baselines(inputs, shape, "fp16")
    assert set(found) == {"eager torch", "torch.compile", "copy of x"}
    torch.testing.assert_close(found["eager torch"]().float(), spec.reference(inputs)["y"], atol=2e-2, rtol=2e-2)


def test_decode_sdpa_baseline_is_the_same_attention() -> None:
    spec = DecodeSpec()
    shape, inputs = _inputs(spec, {"varlen": 0, "context": 40}, "fp16")  # SDPA has no per-sequence lengths
    out = spec.baselines(inputs, shape, "fp16")["torch SDPA"]()[:, :, 0, :]
    torch.testing.assert_close(out.float(), spec.reference(inputs)["out"].float(), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("logits", [0, 1])
def test_verify_baseline_gives_the_same_tokens(logits: int) -> None:
    spec = DraftVerifySpec()
    shape, inputs = _inputs(spec, {"logits": logits}, "fp32")
    accepted, token = spec.baselines(inputs, shape, "fp32")["eager torch"]()
    want = spec.reference(inputs)
    assert torch.equal(accepted, want["accepted"]) and torch.equal(token, want["token"])
