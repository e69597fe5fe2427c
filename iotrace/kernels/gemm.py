"""Tiled GEMM: C = A · B (+ bias), fp16 / bf16 / fp8 inputs, fp32 accumulation.

Cost (identity 4): FLOPs = 2·M·N·K (+ M·N for the bias add); minimum bytes = A and B read once, C written
once: (M·K + K·N)·in + M·N·out (+ N·out for the bias). At 4096³ fp16 that is 1.374e11 FLOPs over
1.007e8 bytes, 1365 FLOP/B: far right of every card's ridge, so compute-bound.

Two kernels share one tile order: a pointer-arithmetic kernel with masks (any M, N, K, every CC) and a
tensor-descriptor kernel (TMA on sm_90, where it is part of the tuning space).

Known limit: fp8 on sm_90 keeps B row-major (K, N), while wgmma wants fp8 B K-major, so Triton stages B
through registers, and fp8 dots use Triton's default Hopper accumulation (max_num_imprecise_acc); both are
for the autotuner and the GPU validation to measure. Programs walk the output
in groups of GROUP_M tile rows so the A rows and B columns a group needs stay in L2 (the "grouped
ordering" of the Triton matmul tutorial, python/tutorials/03-matrix-multiplication.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError
from iotrace.kernels.backend import interpreting
from iotrace.model_shapes import model
from iotrace.plugins import hookimpl
from iotrace.plugins.spec import (
    DEFAULT_BACKEND,
    DTYPE_BYTES,
    DTYPE_PEAK,
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

__all__ = ["GemmSpec", "gemm"]

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8e4m3": torch.float8_e4m3fn}
# fp8 products are written in bf16: fp8 output would lose the fp32 accumulation the kernel pays for.
_OUT_DTYPES = {"fp16": "fp16", "bf16": "bf16", "fp8e4m3": "bf16"}
_DTYPE_NAMES = {t: name for name, t in _TORCH_DTYPES.items()}


# --- Triton kernels -------------------------------------------------------------------------------------------


@triton.jit
def _tile_index(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: consecutive programs cover GROUP_M tile rows of one tile-column band."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _gemm_kernel(
    # pointers
    a_ptr, b_ptr, c_ptr, bias_ptr,
    # sizes
    M, N, K,
    # strides
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    # meta-parameters
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, UPCAST: tl.constexpr,
):
    pid_m, pid_n = _tile_index(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # 64-bit row and column offsets: an LM-head GEMM (32k tokens x 128k vocabulary) has M·N past 2^31.
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        # The interpreter has no bf16/fp8 arithmetic (numpy lacks the types): its tl.dot on them multiplies the
        # raw bit patterns. fp32 operands are exact, and the constexpr keeps the upcast out of GPU builds.
        if UPCAST:
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32))
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _gemm_tma_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, UPCAST: tl.constexpr,
):
    # Tensor descriptors (TMA on sm_90): the copy engine handles the ragged edges, zero-filling loads and
    # clipping stores, so no masks. Needs contiguous row-major operands with 16-byte aligned rows.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m, pid_n = _tile_index(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        if UPCAST:
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32))
        else:
            acc = tl.dot(a, b, acc)
    if HAS_BIAS:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


# --- launcher -------------------------------------------------------------------------------------------------


def _tma_allocator(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global scratch for device-side tensor descriptors (Triton asks for it through triton.set_allocator)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _grid(M: int, N: int, config: Mapping[str, int]) -> tuple[int, int, int]:
    return (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]), 1, 1)


def _tma_aligned(M: int, N: int, K: int, dtype: str) -> bool:
    # TMA needs every row stride to be a multiple of 16 bytes (CUDA Driver API, cuTensorMapEncodeTiled).
    in_bytes, out_bytes = DTYPE_BYTES[dtype], DTYPE_BYTES[_OUT_DTYPES[dtype]]
    return (K * in_bytes) % 16 == 0 and (N * in_bytes) % 16 == 0 and (N * out_bytes) % 16 == 0


def _gemm_launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                 config: Mapping[str, int], interpreter: bool) -> TritonLaunch:
    """The one statement of a GEMM launch: :func:`gemm` calls it, :meth:`GemmSpec.compile_units` compiles it."""
    (M, K), N = a.shape, b.shape[1]
    meta = {"HAS_BIAS": bias is not None, "BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"],
            "BLOCK_K": config["BLOCK_K"], "GROUP_M": config["GROUP_M"],
            "UPCAST": interpreter and a.dtype != torch.float16}
    args = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "bias_ptr": bias if bias is not None else c,  # unread without bias
            "M": M, "N": N, "K": K}
    if config.get("USE_TMA"):
        kernel = _gemm_tma_kernel
    else:
        kernel = _gemm_kernel
        args.update({"stride_am": a.stride(0), "stride_ak": a.stride(1), "stride_bk": b.stride(0),
                     "stride_bn": b.stride(1), "stride_cm": c.stride(0), "stride_cn": c.stride(1)})
    return TritonLaunch(kernel, _grid(M, N, config), args, meta, config["num_warps"], config["num_stages"])


def gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
         config: Mapping[str, int]) -> None:
    """C = A · B (+ bias) into ``c``; checks the operands, then launches the kernel the config names."""
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2 or tuple(c.shape) != (M, N) or (bias is not None and tuple(bias.shape) != (N,)):
        raise InvalidValueError(f"gemm shapes do not agree: A {tuple(a.shape)}, B {tuple(b.shape)}, C {tuple(c.shape)}"
                                + (f", bias {tuple(bias.shape)}" if bias is not None else ""),
                                "A is (M, K), B is (K, N), C is (M, N), bias is (N,)")
    if config.get("USE_TMA"):
        aligned = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (a, b, c))
        if not aligned or not _tma_aligned(M, N, K, _DTYPE_NAMES[a.dtype]):
            raise InvalidValueError(f"the TMA gemm needs contiguous, 16-byte aligned rows; got M={M}, N={N}, K={K} "
                                    f"in {_DTYPE_NAMES[a.dtype]}", "use USE_TMA=0, or N and K multiples of 16 bytes")
        if not interpreting():
            triton.set_allocator(_tma_allocator)
    _gemm_launch(a, b, c, bias, config, interpreting())()


# --- spec -----------------------------------------------------------------------------------------------------


def _model_presets() -> dict[str, Shape]:
    """GEMMs of real layers: fused QKV and gate+up projections and the down projection (iotrace/data/models.toml)."""
    presets: dict[str, Shape] = {}
    for key in ("llama-3-8b", "gemma-2-27b"):
        m = model(key)
        qkv = (m.heads + 2 * m.kv_heads) * m.head_dim
        layers = {"qkv": (qkv, m.hidden), "mlp-up": (2 * m.intermediate, m.hidden),
                  "mlp-down": (m.hidden, m.intermediate)}
        for (layer, (n, k)), (phase, tokens) in itertools.product(
                layers.items(), (("decode-b1", 1), ("decode-b32", 32), ("prefill-2k", 2048), ("prefill-8k", 8192))):
            presets[f"{key}-{layer}-{phase}"] = {"M": tokens, "N": n, "K": k, "bias": 0}
    presets["square-4096"] = {"M": 4096, "N": 4096, "K": 4096, "bias": 0}
    presets["square-8192"] = {"M": 8192, "N": 8192, "K": 8192, "bias": 0}
    return presets


#: The non-decode default per compute capability: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), GROUP_M 8,
#: no TMA. Derived once from the static phase (no GPU): the fp16 square-4096 slice BLOCK_M=64/128,
#: BLOCK_N=128/256, BLOCK_K=32/64, num_warps=4/8, num_stages=3/4 ranked by the cost model on one card per CC
#: (a100-sxm4-80gb, rtx3090, rtx4090, h100-sxm), keeping the best-ranked config that spills on neither that
#: preset nor the kernel's default shape (M=97, N=83, K=71 with bias, whose epilogue needs the most registers;
#: 128x256x64/8 warps spills 964 B there on sm_90, 128x128x32/4 warps 256 B on sm_86). Re-derive with
#:   tune(KernelCall.make(kernel("gemm"), dtype="fp16", card=CARD, preset="square-4096"), TuneOptions(
#:       mode="static", fix={"BLOCK_M": (64, 128), "BLOCK_N": (128, 256), "BLOCK_K": (32, 64),
#:                           "num_warps": (4, 8), "num_stages": (3, 4), "USE_TMA": False}))
#: then `iotrace run gemm --card CARD --config ...` on the top rows (tests/test_default_configs.py: none spills).
#: sm_90: 128x128x32/8 warps (248 registers with bias; 128x256 tiles rank higher but spill with the bias).
_DEFAULTS_BY_CC: dict[tuple[int, int], tuple[int, int, int, int, int]] = {
    (8, 0): (64, 128, 32, 4, 3),
    (8, 6): (64, 128, 32, 4, 3),
    (8, 9): (64, 128, 32, 4, 3),
    (9, 0): (128, 128, 32, 8, 3),
}


class GemmSpec(KernelSpec):
    name: ClassVar[str] = "gemm"
    summary: ClassVar[str] = "C = A·B (+ bias): tiled, grouped tile order, fp32 accumulation; TMA variant on sm_90"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "fp8e4m3")
    shape_keys: ClassVar[tuple[str, ...]] = ("M", "N", "K", "bias")
    shape_flags: ClassVar[tuple[str, ...]] = ("bias",)
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"M": 97, "N": 83, "K": 71, "bias": 1}
    # M·N·K: a 256³ GEMM takes about a second under the interpreter on one core (numpy does every tl.dot).
    interpreter_budget: ClassVar[int] = 2_000_000

    #: GROUP_M values a user may set beyond the swept 8, and the smallest BLOCK_K tl.dot takes.
    extra_config_values: ClassVar[dict[str, tuple]] = {"GROUP_M": (1, 2, 4, 16), "BLOCK_K": (16,)}

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        """Reduced as usual, then N and K rounded to an odd multiple of 16: 16-byte aligned rows for every dtype
        (so a TMA config still runs), yet ragged against blocks of 32 and more."""
        small = super().reduce_shape(shape, max_elements)
        if small == shape:
            return small
        for key in ("N", "K"):
            small[key] = 16 * ((small[key] // 16) | 1)
        return small

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        M, N, K = shape["M"], shape["N"], shape["K"]
        # Scaled so products stay O(1) whatever K is; fp8 e4m3 saturates at 448.
        a = (torch.randn(M, K, generator=gen) / K**0.25).to(device=device, dtype=_TORCH_DTYPES[dtype])
        b = (torch.randn(K, N, generator=gen) / K**0.25).to(device=device, dtype=_TORCH_DTYPES[dtype])
        inputs = {"a": a, "b": b}
        if shape["bias"]:
            inputs["bias"] = torch.randn(N, generator=gen).to(device=device, dtype=_TORCH_DTYPES[_OUT_DTYPES[dtype]])
        return inputs

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        a, b = inputs["a"], inputs["b"]
        out = torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype
        return {"c": torch.empty(a.shape[0], b.shape[1], dtype=out, device=a.device)}

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        a, b, bias = inputs["a"], inputs["b"], inputs.get("bias")
        if dtype == "fp8e4m3":  # torch.matmul has no fp8; _scaled_mm wants a column-major B and scales
            b_cols = b.t().contiguous().t()
            one = torch.ones((), device=a.device)
            return {"torch._scaled_mm (cuBLASLt)": lambda: torch._scaled_mm(a, b_cols, one, one, bias=bias,
                                                                            out_dtype=torch.bfloat16)}
        if bias is not None:
            return {"torch.addmm (cuBLAS)": lambda: torch.addmm(bias, a, b)}
        return {"torch.matmul (cuBLAS)": lambda: torch.matmul(a, b)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = inputs["a"].float() @ inputs["b"].float()
        if "bias" in inputs:
            c = c + inputs["bias"].float()
        return {"c": c}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        gemm(inputs["a"], inputs["b"], outputs["c"], inputs.get("bias"), config)

    def tolerance(self, dtype: str) -> Tolerance:
        # fp32 accumulation in both; the error is the output rounding (fp16: 2^-11, bf16: 2^-8 relative, and the
        # interpreter truncates bf16 instead of rounding: one more ulp) plus summation order.
        return {"fp16": Tolerance(1e-2, 5e-3), "bf16": Tolerance(3e-2, 1.6e-2),
                "fp8e4m3": Tolerance(3e-2, 1.6e-2)}[self.check_dtype(dtype)]

    def cost(self, shape: Shape, dtype: str) -> Cost:
        M, N, K, bias = (shape[k] for k in ("M", "N", "K", "bias"))
        in_b, out_b = DTYPE_BYTES[dtype], DTYPE_BYTES[_OUT_DTYPES[dtype]]
        flops = 2.0 * M * N * K + bias * M * N
        nbytes = float((M * K + K * N) * in_b + M * N * out_b + bias * N * out_b)
        return Cost(flops, nbytes, DTYPE_PEAK[dtype],
                    "FLOPs = 2·M·N·K (+ M·N bias); bytes = (M·K + K·N)·in + M·N·out (+ N·out bias)")

    def _check_card(self, dtype: str, card: Card) -> None:
        cc = card.sm_limits.cc
        if dtype == "fp8e4m3" and cc < (8, 9):
            raise InvalidValueError(f"{card.name} (CC {card.cc}) has no fp8 tensor cores",
                                    "fp8 needs CC 8.9 or newer (Ada, Hopper, Blackwell); use fp16 or bf16")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        self._check_card(dtype, card)
        tma = [False, True] if card.sm_limits.cc >= (9, 0) and _tma_aligned(shape["M"], shape["N"], shape["K"],
                                                                              dtype) else [False]
        configs = []
        for bm, bn, bk, warps, stages, use_tma in itertools.product(
                (16, 32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128), (4, 8), (2, 3, 4, 5), tma):
            if bm * bn > 128 * 256 or (bm == 16 and warps == 8):  # register file and warp tiling bounds
                continue
            configs.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
                            "num_stages": stages, "USE_TMA": use_tma})
        return configs

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        self._check_card(dtype, card)
        cc = card.sm_limits.cc
        if shape["M"] <= 64:  # decode: a thin A, so wide tiles along N and deep along K
            return {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4,
                    "USE_TMA": False}
        # Per compute capability, from the static phase (see _DEFAULTS_BY_CC); newer parts of a family take its row.
        key = cc if cc in _DEFAULTS_BY_CC else ((9, 0) if cc >= (9, 0) else (8, 6) if cc >= (8, 0) else None)
        if key is not None:
            bm, bn, bk, warps, stages = _DEFAULTS_BY_CC[key]
            return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
                    "num_stages": stages, "USE_TMA": False}
        return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2,
                "USE_TMA": False}

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        # Contiguous row-major operands on the meta device, as make_inputs and make_outputs lay them out.
        M, N, K = shape["M"], shape["N"], shape["K"]
        t_in, t_out = _TORCH_DTYPES[dtype], _TORCH_DTYPES[_OUT_DTYPES[dtype]]
        a = torch.empty(M, K, dtype=t_in, device="meta")
        b = torch.empty(K, N, dtype=t_in, device="meta")
        c = torch.empty(M, N, dtype=t_out, device="meta")
        bias = torch.empty(N, dtype=t_out, device="meta") if shape["bias"] else None
        return [_gemm_launch(a, b, c, bias, config, interpreter=False).unit()]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [GemmSpec()]
