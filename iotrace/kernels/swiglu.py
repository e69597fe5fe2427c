"""SwiGLU activation: out = silu(gate) · up, with silu(x) = x · sigmoid(x) = x / (1 + exp(−x)).

The gated linear unit of Llama-style MLPs (Shazeer 2020, "GLU Variants Improve Transformer"): the MLP computes
down(silu(x·W_gate) ⊙ x·W_up). One fused gate/up projection writes both halves side by side, gate_up (T, 2F) with
gate in ``[:, :F]`` and up in ``[:, F:]`` (vLLM's ``SiluAndMul`` layout); this kernel turns that into out (T, F).
Math is fp32 whatever the input type, stored in out's dtype.

Why fused: unfused, torch runs silu (read gate, write a temporary), then the multiply (read the temporary and up,
write out): three passes over memory and 5·T·F elements moved. Fused, gate and up are read once and out is written
once, 3·T·F elements. The next step is to fuse it into the epilogue of the gate/up GEMM (the decode GEMM plugin
``gemm-decode`` has a swiglu epilogue), so the (T, 2F) intermediate never reaches memory at all.

Cost (identity 4): FLOPs ≈ 5 per output element (negate, exp, add, divide for silu, one multiply by up);
minimum bytes = read 2·T·F·e + write T·F·e. At 2 bytes per element that is under 1 FLOP/B: memory-bound, and its
figure of merit is GB/s.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError
from iotrace.model_shapes import model
from iotrace.plugins import checks, hookimpl
from iotrace.plugins.spec import (
    DEFAULT_BACKEND,
    DTYPE_BYTES,
    Baselines,
    Config,
    Cost,
    KernelSpec,
    Shape,
    Tolerance,
    TritonLaunch,
    TritonUnit,
)

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["SwiGLUSpec", "swiglu", "swiglu_reference"]

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
_BLOCKS = (128, 256, 512, 1024, 2048)
_WARPS = (1, 2, 4, 8)


def swiglu_reference(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) · up of gate_up (..., 2F) = [gate | up], in fp32 torch: returns a new float32 (..., F) tensor."""
    if gate_up.dim() < 1 or gate_up.shape[-1] % 2:
        raise InvalidValueError(f"swiglu gate_up {tuple(gate_up.shape)} has an odd last dim",
                                "gate_up is (T, 2F): gate in [:, :F], up in [:, F:]")
    gate, up = gate_up.float().chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


# --- Triton kernel ----------------------------------------------------------------------------------------------


@triton.jit
def _swiglu_kernel(gu_ptr, out_ptr, stride_gu, stride_out, F, BLOCK: tl.constexpr):
    # Grid: (rows, column blocks of out). Gate at column c of a row, up at column F + c.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    src = gu_ptr + row * stride_gu + cols
    gate = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(src + F, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


# --- launcher ---------------------------------------------------------------------------------------------------


def _default_config(ffn: int) -> Config:
    """Up to 1024 columns a program, 8 per lane (16-byte loads of 2-byte types), at least one per lane."""
    block = min(1024, max(_BLOCKS[0], triton.next_power_of_2(ffn)))
    return {"BLOCK": block, "num_warps": max(1, min(8, block // 256))}


def swiglu(gate_up: torch.Tensor, out: torch.Tensor, config: Mapping[str, Any] | None = None) -> None:
    """out (T, F) = silu(gate_up[:, :F]) · gate_up[:, F:], fp32 math, stored in out's dtype.

    Rows may be strided (views); only the last dim needs unit stride.
    """
    if gate_up.dim() != 2 or out.dim() != 2 or gate_up.shape[1] % 2 or \
            tuple(out.shape) != (gate_up.shape[0], gate_up.shape[1] // 2):
        raise InvalidValueError(f"swiglu shapes do not agree: gate_up {tuple(gate_up.shape)}, out "
                                f"{tuple(out.shape)}", "gate_up is (T, 2F) with gate then up, out is (T, F)")
    if gate_up.dtype not in _TORCH_DTYPES.values() or out.dtype not in _TORCH_DTYPES.values():
        raise InvalidValueError(f"swiglu takes fp16, bf16 or fp32, got gate_up {gate_up.dtype}, out {out.dtype}",
                                "cast to one of those")
    if gate_up.stride(-1) != 1 or out.stride(-1) != 1:
        raise InvalidValueError("swiglu needs rows with unit stride", "pass .contiguous() tensors")
    if gate_up.device != out.device:
        raise InvalidValueError(f"swiglu gate_up is on {gate_up.device}, out on {out.device}",
                                "put both on one device")
    if out.numel() == 0:
        return
    # A config may name only some parameters (or none): the defaults fill in the rest.
    _swiglu_launch(gate_up, out, {**_default_config(out.shape[1]), **(config or {})})()


def _swiglu_launch(gate_up: torch.Tensor, out: torch.Tensor, config: Mapping[str, Any]) -> TritonLaunch:
    """The one statement of a Triton SwiGLU launch: :func:`swiglu` calls it, :meth:`SwiGLUSpec.compile_units`
    compiles it. Grid (rows, column blocks)."""
    rows, ffn = out.shape
    block = config["BLOCK"]
    args = {"gu_ptr": gate_up, "out_ptr": out, "stride_gu": gate_up.stride(0), "stride_out": out.stride(0), "F": ffn}
    # One stage: no loop for Triton to software-pipeline.
    return TritonLaunch(_swiglu_kernel, (rows, triton.cdiv(ffn, block), 1), args, {"BLOCK": block},
                        config["num_warps"], num_stages=1)


# --- spec -------------------------------------------------------------------------------------------------------


def _model_presets() -> dict[str, Shape]:
    return {f"{key}-{phase}": {"tokens": tokens, "ffn": model(key).intermediate}
            for key, (phase, tokens) in itertools.product(
                ("smollm2-135m", "llama-3-8b"), (("decode-b1", 1), ("decode-b32", 32), ("prefill-2k", 2048)))}


class SwiGLUSpec(KernelSpec):
    name: ClassVar[str] = "swiglu"
    summary: ClassVar[str] = "out = silu(gate) · up of a fused gate/up projection (T, 2F), gate then up; fp32 math"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "fp32")
    shape_keys: ClassVar[tuple[str, ...]] = ("tokens", "ffn")
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"tokens": 37, "ffn": 1000}

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        gate_up = 2 * torch.randn(shape["tokens"], 2 * shape["ffn"], generator=gen)
        return {"gate_up": gate_up.to(device=device, dtype=_TORCH_DTYPES[dtype])}

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        gate_up = inputs["gate_up"]
        return {"out": torch.empty(gate_up.shape[0], gate_up.shape[1] // 2, dtype=gate_up.dtype,
                                   device=gate_up.device)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"out": swiglu_reference(inputs["gate_up"])}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        swiglu(inputs["gate_up"], outputs["out"], config)

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """Eager torch (silu, then the multiply: two kernels, a temporary in between) and the same compiled by
        torch.compile (its first call compiles, so time it after a warm-up)."""
        gate, up = inputs["gate_up"].chunk(2, dim=-1)

        def eager() -> object:
            return torch.nn.functional.silu(gate) * up

        return {"eager torch": eager, "torch.compile": checks.compiled_on_first_call(eager)}

    def tolerance(self, dtype: str) -> Tolerance:
        # fp32 math; the output is rounded once (fp16: 2^-11 relative; bf16: 2^-8, and the interpreter truncates
        # bf16, one more ulp); fp32 differs from torch's silu only in how exp is evaluated.
        return {"fp16": Tolerance(2e-3, 2e-3), "bf16": Tolerance(1.6e-2, 1.6e-2),
                "fp32": Tolerance(1e-5, 1e-5)}[self.check_dtype(dtype)]

    def cost(self, shape: Shape, dtype: str) -> Cost:
        elements = shape["tokens"] * shape["ffn"]
        e = DTYPE_BYTES[dtype]
        return Cost(5.0 * elements, float(3 * elements * e), "fp32",
                    "FLOPs = 5·T·F (silu = x / (1 + exp(−x)): negate, exp, add, divide; then · up); bytes = read "
                    "2·T·F·e (gate and up) + write T·F·e")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        widest = max(_BLOCKS[0], triton.next_power_of_2(shape["ffn"]))
        # No block wider than a row needs (it would only mask); at least one element per lane.
        return [{"BLOCK": b, "num_warps": w} for b in _BLOCKS if b <= widest for w in _WARPS if w * 32 <= b]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        return _default_config(shape["ffn"])

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        t = _TORCH_DTYPES[dtype]
        gate_up = torch.empty(shape["tokens"], 2 * shape["ffn"], dtype=t, device="meta")
        out = torch.empty(shape["tokens"], shape["ffn"], dtype=t, device="meta")
        return [_swiglu_launch(gate_up, out, config).unit()]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [SwiGLUSpec()]
