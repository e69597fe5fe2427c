"""Fused RMSNorm: y = x / rms(x) · w, optionally fused with the residual add (s = x + r, y = RMSNorm(s)).

rms(x) = sqrt(mean(x²) + eps), in fp32 whatever the input type (Zhang & Sennrich 2019, "Root Mean Square
Layer Normalization"). The residual variant stores the sum s (rounded to the input type) and normalises
that rounded sum, as the unfused pair ``s = x + r; y = rmsnorm(s)`` would.

Cost (identity 4): FLOPs ≈ 4 per element (square, accumulate, scale by 1/rms, multiply by w; +1 for the
residual add); minimum bytes = read x and w, write y (+ read r, write s). At 2 bytes per element that is
about 1 FLOP/B: far left of every ridge, so memory-bound, and its figure of merit is GB/s.

Two backends: Triton (one program per row, the whole row in registers) and CUDA C++ (``rmsnorm.cu``
beside this file, one block per row, launched through CuPy).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError, IotraceError
from iotrace.model_shapes import model
from iotrace.plugins import checks, hookimpl
from iotrace.plugins.spec import (
    DEFAULT_BACKEND,
    DTYPE_BYTES,
    Baselines,
    Config,
    Cost,
    CudaUnit,
    KernelSpec,
    Shape,
    Tolerance,
    TritonLaunch,
    TritonUnit,
)

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["EPS", "BackendUnavailableError", "RMSNormSpec", "rmsnorm"]

#: rms_norm_eps of Llama 3 (config.json); the kernel takes it as an argument.
EPS = 1e-5
#: The widest row the Triton kernel keeps in registers at once; wider rows need the CUDA backend.
MAX_TRITON_HIDDEN = 65536

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class BackendUnavailableError(IotraceError):
    """A backend that cannot run here (no CuPy, no CUDA device)."""


# --- Triton kernel --------------------------------------------------------------------------------------------


@triton.jit
def _rmsnorm_kernel(
    # pointers
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr,
    # strides (rows)
    stride_x, stride_r, stride_y, stride_s,
    # sizes and parameters
    N, eps,
    # meta-parameters
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        total = x + tl.load(r_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        rounded = total.to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * stride_s + cols, rounded, mask=mask)
        x = rounded.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


# --- CUDA C++ kernel through CuPy -----------------------------------------------------------------------------


#: nvcc options of the CUDA C++ kernel, for CuPy's build and for the static compile alike.
_CUDA_OPTIONS = ("--std=c++17",)


@cache
def cuda_source() -> str:
    return resources.files("iotrace.kernels").joinpath("rmsnorm.cu").read_text(encoding="utf-8")


def _cuda_kernel_name(dtype: torch.dtype, residual: bool) -> str:
    return ("rmsnorm_f16" if dtype == torch.float16 else "rmsnorm_bf16") + ("_residual" if residual else "")


@cache
def _cupy_module():
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(f"the cuda backend needs CuPy ({exc})",
                                      "pip install 'iotrace[gpu]', or use --backend triton") from None
    if not cupy.is_available():
        raise BackendUnavailableError("CuPy sees no CUDA device (cupy.is_available() is False)",
                                      "run on a machine with an NVIDIA GPU, or use --backend triton")
    return cupy.RawModule(code=cuda_source(), options=_CUDA_OPTIONS)


def _rmsnorm_cuda(x: torch.Tensor, r: torch.Tensor | None, w: torch.Tensor, y: torch.Tensor, s: torch.Tensor | None,
                  threads: int) -> None:
    if x.dtype not in (torch.float16, torch.bfloat16) or threads % 32 or not 32 <= threads <= 1024:
        raise InvalidValueError(f"the CUDA rmsnorm takes fp16/bf16 and 32..1024 threads in whole warps, got "
                                f"{x.dtype} and {threads}", "use BLOCK_THREADS of 64, 128, 256, 512 or 1024")
    if x.shape[1] >= 2**31 or not all(t.is_contiguous() for t in (x, w, y, *(t for t in (r, s) if t is not None))):
        raise InvalidValueError("the CUDA rmsnorm needs contiguous rows of fewer than 2^31 elements",
                                "pass .contiguous() tensors")
    import cupy

    kernel = _cupy_module().get_function(_cuda_kernel_name(x.dtype, r is not None))
    rows, n = x.shape
    # Raw device pointers as 64-bit scalars: CuPy has no bf16 dtype to wrap the tensors in.
    pointers = [np.uint64(t.data_ptr()) if t is not None else np.uint64(0) for t in (x, r, w, y, s)]
    # On torch's current stream, so timing, ordering and CUDA-graph capture see the launch.
    with cupy.cuda.Device(x.device.index), cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        kernel((rows,), (threads,), (*pointers, np.int32(n), np.float32(EPS)))


# --- launcher -------------------------------------------------------------------------------------------------


def rmsnorm(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, residual: torch.Tensor | None = None,
            summed: torch.Tensor | None = None, config: Mapping[str, Any] | None = None,
            backend: str = DEFAULT_BACKEND) -> None:
    """y = RMSNorm(x [+ residual]) · w into ``y`` (and the sum into ``summed``); rows are the leading dimension."""
    config = config or {}
    if x.dim() != 2 or tuple(y.shape) != tuple(x.shape) or tuple(w.shape) != (x.shape[1],):
        raise InvalidValueError(f"rmsnorm shapes do not agree: x {tuple(x.shape)}, w {tuple(w.shape)}, "
                                f"y {tuple(y.shape)}", "x and y are (rows, hidden), w is (hidden,)")
    if (residual is None) != (summed is None) or (residual is not None and (
            tuple(residual.shape) != tuple(x.shape) or tuple(summed.shape) != tuple(x.shape))):
        raise InvalidValueError("rmsnorm with a residual needs residual and summed of x's shape",
                                "pass both or neither")
    if any(t.stride(-1) != 1 for t in (x, w, y, *(t for t in (residual, summed) if t is not None))):
        raise InvalidValueError("rmsnorm needs rows with unit stride", "pass .contiguous() tensors")
    n = x.shape[1]
    if backend == "cuda":
        _rmsnorm_cuda(x, residual, w, y, summed, config.get("BLOCK_THREADS", 256))
        return
    if triton.next_power_of_2(n) > MAX_TRITON_HIDDEN:
        raise InvalidValueError(f"rmsnorm hidden={n} exceeds the Triton kernel's {MAX_TRITON_HIDDEN}",
                                "use --backend cuda for wider rows")
    _rmsnorm_launch(x, w, y, residual, summed, config)()


def _rmsnorm_launch(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, residual: torch.Tensor | None,
                    summed: torch.Tensor | None, config: Mapping[str, Any]) -> TritonLaunch:
    """The one statement of a Triton RMSNorm launch: :func:`rmsnorm` calls it, :meth:`RMSNormSpec.compile_units`
    compiles it. One program per row, the whole row in one block."""
    rows, n = x.shape
    block = triton.next_power_of_2(n)
    r_arg, s_arg = (residual, summed) if residual is not None else (x, y)  # never touched without the residual
    args = {"x_ptr": x, "r_ptr": r_arg, "w_ptr": w, "y_ptr": y, "s_ptr": s_arg, "stride_x": x.stride(0),
            "stride_r": r_arg.stride(0), "stride_y": y.stride(0), "stride_s": s_arg.stride(0), "N": n, "eps": EPS}
    # One stage: the kernel has no loop for Triton to software-pipeline, so the stage count changes nothing.
    return TritonLaunch(_rmsnorm_kernel, (rows, 1, 1), args, {"HAS_RESIDUAL": residual is not None, "BLOCK_N": block},
                        config.get("num_warps", _default_warps(block)), num_stages=1)


def _default_warps(block: int) -> int:
    """Warps per row: enough lanes that each holds at most 16 elements (Liger-Kernel's calculate_settings)."""
    if block >= 32768:
        return 32
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


# --- spec -----------------------------------------------------------------------------------------------------


def _model_presets() -> dict[str, Shape]:
    presets: dict[str, Shape] = {}
    for key, (phase, rows), residual in itertools.product(
            ("llama-3-8b", "gemma-2-27b"), (("decode-b1", 1), ("decode-b32", 32), ("prefill-2k", 2048),
                                            ("prefill-8k", 8192)), (0, 1)):
        name = f"{key}-{phase}" + ("-residual" if residual else "")
        presets[name] = {"rows": rows, "hidden": model(key).hidden, "residual": residual}
    presets["4096x8192"] = {"rows": 4096, "hidden": 8192, "residual": 0}
    presets["4096x8192-residual"] = {"rows": 4096, "hidden": 8192, "residual": 1}
    return presets


class RMSNormSpec(KernelSpec):
    name: ClassVar[str] = "rmsnorm"
    summary: ClassVar[str] = "y = x / rms(x) · w, optionally fused with the residual add; fp32 math"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16")
    backends: ClassVar[tuple[str, ...]] = ("triton", "cuda")
    shape_keys: ClassVar[tuple[str, ...]] = ("rows", "hidden", "residual")
    shape_flags: ClassVar[tuple[str, ...]] = ("residual",)
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"rows": 37, "hidden": 1000, "residual": 1}

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        rows, hidden, t = shape["rows"], shape["hidden"], _TORCH_DTYPES[dtype]
        inputs = {"x": torch.randn(rows, hidden, generator=gen).to(device=device, dtype=t),
                  "w": (1 + 0.1 * torch.randn(hidden, generator=gen)).to(device=device, dtype=t)}
        if shape["residual"]:
            inputs["r"] = torch.randn(rows, hidden, generator=gen).to(device=device, dtype=t)
        return inputs

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {"y": torch.empty_like(inputs["x"])}
        if "r" in inputs:
            out["s"] = torch.empty_like(inputs["x"])
        return out

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """Eager torch (the unfused add, then the norm in fp32), the same compiled by torch.compile (its first call
        compiles, so time it after a warm-up), and a copy of x: a bandwidth reference (it reads and writes x), so
        compare its GB/s with the norm's, not its time."""
        x, w, r = inputs["x"], inputs["w"], inputs.get("r")
        copy_dst = torch.empty_like(x)

        def eager() -> object:
            summed = x + r if r is not None else x
            variance = summed.float().pow(2).mean(-1, keepdim=True)
            return (summed.float() * torch.rsqrt(variance + EPS) * w.float()).to(x.dtype)

        return {"eager torch": eager, "torch.compile": checks.compiled_on_first_call(eager),
                "copy of x": lambda: copy_dst.copy_(x)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = inputs["x"]
        out = {}
        if "r" in inputs:
            summed = (x.float() + inputs["r"].float()).to(x.dtype)
            out["s"] = summed.float()
            x = summed
        base = x.double()
        rstd = torch.rsqrt(base.pow(2).mean(dim=-1, keepdim=True) + EPS)
        out["y"] = (base * rstd * inputs["w"].double()).float()
        return out

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        rmsnorm(inputs["x"], inputs["w"], outputs["y"], inputs.get("r"), outputs.get("s"), config, backend)

    def tolerance(self, dtype: str) -> Tolerance:
        # fp32 math in both; the output is rounded once (fp16: 2^-11 relative; bf16: 2^-8, and the interpreter
        # truncates bf16 instead of rounding, one more ulp).
        return {"fp16": Tolerance(2e-3, 2e-3), "bf16": Tolerance(1.6e-2, 1.6e-2)}[self.check_dtype(dtype)]

    def cost(self, shape: Shape, dtype: str) -> Cost:
        rows, hidden, residual = shape["rows"], shape["hidden"], shape["residual"]
        e = DTYPE_BYTES[dtype]
        flops = (4.0 + residual) * rows * hidden
        nbytes = float((2 + 2 * residual) * rows * hidden * e + hidden * e)
        return Cost(flops, nbytes, "fp32",
                    "FLOPs = (4 + residual)·rows·hidden; bytes = (2 + 2·residual)·rows·hidden·e + hidden·e")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        if backend == "cuda":
            return [{"BLOCK_THREADS": t} for t in (64, 128, 256, 512, 1024)]
        block = self._block(shape)
        # At least one element per lane: more warps than BLOCK_N / 32 would idle.
        return [{"num_warps": w} for w in (1, 2, 4, 8, 16, 32) if w * 32 <= max(block, 32)]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        if backend == "cuda":
            return {"BLOCK_THREADS": 256 if shape["hidden"] >= 2048 else 128}
        block = self._block(shape)
        return {"num_warps": min(_default_warps(block), max(1, block // 32))}  # at least one element per lane

    def _block(self, shape: Shape) -> int:
        block = triton.next_power_of_2(shape["hidden"])
        if block > MAX_TRITON_HIDDEN:
            raise InvalidValueError(f"rmsnorm hidden={shape['hidden']} exceeds the Triton kernel's "
                                    f"{MAX_TRITON_HIDDEN}", "use --backend cuda for wider rows")
        return block

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit | CudaUnit]:
        rows, hidden, residual = shape["rows"], shape["hidden"], bool(shape["residual"])
        if backend == "cuda":
            name = _cuda_kernel_name(_TORCH_DTYPES[dtype], residual)
            return [CudaUnit(cuda_source(), name, (config["BLOCK_THREADS"], 1, 1), (rows, 1, 1),
                             options=_CUDA_OPTIONS)]
        self._block(shape)  # refuses rows wider than the Triton kernel takes
        # Contiguous (rows, hidden) tensors on the meta device, as make_inputs and make_outputs lay them out.
        x = torch.empty(rows, hidden, dtype=_TORCH_DTYPES[dtype], device="meta")
        w = torch.empty(hidden, dtype=x.dtype, device="meta")
        extra = (torch.empty_like(x), torch.empty_like(x)) if residual else (None, None)
        return [_rmsnorm_launch(x, w, torch.empty_like(x), *extra, config).unit()]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [RMSNormSpec()]
