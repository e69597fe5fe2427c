"""Decode GEMM (GEMV / split-K): out = x · wᵀ (+ residual), or the SwiGLU of a fused gate/up projection.

A decode step multiplies M = 1..64 token rows x (M, K) by a weight in nn.Linear layout, w (N, K) row-major, with
fp32 accumulation: out = x · wᵀ (M, N). Two fused epilogues:

* ``residual``: out = residual + x · wᵀ, the residual-stream update after the attention output and MLP down
  projections. ``out`` may be ``residual`` itself (in place): every output element is read from the residual and
  written by the one program that owns it, after its whole reduction.
* ``swiglu``: w = [W_gate; W_up] stacked along N (2F rows), out (M, F) = silu(x · W_gateᵀ) · (x · W_upᵀ), the
  SwiGLU MLP's activation (Shazeer 2020, "GLU Variants Improve Transformer") in the gate/up projection's
  epilogue: each program computes gate column j and up column F + j together, so the (M, 2F) pre-activation is
  never written.

Why split-K. The tiled ``gemm`` spends 16+ row tiles on one token; here a program owns BLOCK_N output columns for all
M rows (M ≤ 64, so one row tile), and reads its BLOCK_N rows of w once. At batch 1 that is N / BLOCK_N programs, too
few to fill the SMs when N is small (N = 576 at BLOCK_N 128 is 5 programs on a 132-SM H100), so K is split as well:
SPLIT_K programs per column block each reduce a contiguous K range into fp32 partials (SPLIT_K, M, N), and a small
second kernel sums the partials in a fixed order and applies the epilogue, deterministic (no atomics). It is the
split-K GEMM of CUTLASS ("parallel" split-K reduction) and the idea of Flash-Decoding (Dao, Haziza, Massa, Sizov
2023), which splits the KV sequence of decode attention for the same reason; :meth:`GemmDecodeSpec.default_config`
picks SPLIT_K for about two programs per SM. SPLIT_K = 1 is one launch with the epilogue in it.

Small M: the rows are padded to BLOCK_M = max(16, next_pow2(M)) for tl.dot, M = 1 included (a GEMV on tensor
cores). The padding is free, since the kernel waits on w anyway (16 FLOP/B of padded work at M = 1, far below every
ridge), and tl.dot lets Triton's pipeliner stage the w tiles in shared memory num_stages deep. fp32 operands use
IEEE fp32 products (no TF32), FMA units then.

Cost (identity 4): FLOPs = 2·M·N·K (+ M·N for the residual add, + about 5·M·F for silu·mul); minimum bytes = w
once (N·K·e) + x (M·K·e) + out (M·N_out·e, N_out = F with swiglu) (+ M·N·e residual read). The weights dominate:
at M = 1 that is about 1 FLOP/B, at M = 64 about 64 FLOP/B for 2-byte types, left of every ridge; memory-bound,
and the figure of merit is GB/s of reading w.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError, IotraceError
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

__all__ = ["MAX_M", "GemmDecodeSpec", "gemm_decode", "interpreter_config", "reference_decode"]

#: The most token rows the decode kernel takes; more rows are the tiled ``gemm`` kernel's work.
MAX_M = 64

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
_DTYPE_NAMES = {t: name for name, t in _TORCH_DTYPES.items()}

#: Output columns per program of the split-K reduce kernel.
_REDUCE_BLOCK = 1024


# --- Triton kernels -------------------------------------------------------------------------------------------


# The kernels call no @triton.jit helper and no jit-implemented tl function (tl.zeros, tl.cdiv, tl.sigmoid) in
# them: the interpreter re-patches triton.language on every such call (about a millisecond each), which would
# dominate an interpreted decode step. Pointers advance by BLOCK_K instead of being rebuilt each step, for the same
# reason (each interpreted op costs tens of microseconds whatever its size).


@triton.jit
def _gemm_decode_kernel(
    # pointers
    x_ptr, w_ptr, out_ptr, res_ptr, part_ptr,
    # sizes: N_OUT output columns (F with swiglu, whose w has 2·F rows)
    M, N_OUT, K,
    # strides (rows; the last dimension of every tensor is contiguous)
    stride_xm, stride_wn, stride_om, stride_rm, stride_ps, stride_pm,
    # meta-parameters
    HAS_RESIDUAL: tl.constexpr, SWIGLU: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
):
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    # 64-bit columns: an LM head's w (128k rows of 4k) is past 2^31 bytes.
    offs_n = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N_OUT
    gate_rows = w_ptr + offs_n * stride_wn
    up_rows = gate_rows + N_OUT * stride_wn  # W_up starts F rows below W_gate (read only with swiglu)
    # Each split reduces a whole number of K blocks; the last splits of a short K may get none and write zeros.
    chunk = ((K + SPLIT_K - 1) // SPLIT_K + BLOCK_K - 1) // BLOCK_K * BLOCK_K
    lo = split * chunk
    hi = tl.minimum(lo + chunk, K)
    # The M rows padded to BLOCK_M >= 16 for tl.dot; w is read as its transpose (BLOCK_K, BLOCK_N), K-major.
    offs_m = tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (lo + offs_k)[None, :]
    w_ptrs = gate_rows[None, :] + (lo + offs_k)[:, None]
    up_ptrs = up_rows[None, :] + (lo + offs_k)[:, None]
    x_rows = m_ok[:, None]
    w_cols = n_ok[None, :]
    tile_g = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    tile_u = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        k_ok = offs_k < hi - k0
        x = tl.load(x_ptrs, mask=x_rows & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & w_cols
        w = tl.load(w_ptrs, mask=w_mask, other=0.0)
        # The interpreter has no bf16 arithmetic (numpy lacks the type): its tl.dot on bf16 multiplies the raw bit
        # patterns, so it upcasts to fp32 there; the constexpr keeps the upcast out of GPU builds. fp32 operands
        # use IEEE fp32 products (no TF32 rounding), as the fp32 reference does.
        if UPCAST:
            tile_g += tl.dot(x.to(tl.float32), w.to(tl.float32))
        elif IEEE:
            tile_g = tl.dot(x, w, tile_g, input_precision="ieee")
        else:
            tile_g = tl.dot(x, w, tile_g)
        if SWIGLU:
            w_up = tl.load(up_ptrs, mask=w_mask, other=0.0)
            if UPCAST:
                tile_u += tl.dot(x.to(tl.float32), w_up.to(tl.float32))
            elif IEEE:
                tile_u = tl.dot(x, w_up, tile_u, input_precision="ieee")
            else:
                tile_u = tl.dot(x, w_up, tile_u)
            up_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K == 1:
        # The epilogue on the fp32 sums: silu(gate) · up, or + the residual, read here by the program that writes.
        if SWIGLU:
            val = tile_g / (1.0 + tl.exp(-tile_g)) * tile_u
        elif HAS_RESIDUAL:
            res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
            val = tile_g + res.to(tl.float32)
        else:
            val = tile_g
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], val.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        parts = part_ptr + split * stride_ps + offs_m[:, None] * stride_pm + offs_n[None, :]
        tl.store(parts, tile_g, mask=mask)
        if SWIGLU:
            tl.store(parts + N_OUT, tile_u, mask=mask)


@triton.jit
def _gemm_decode_reduce_kernel(
    part_ptr, out_ptr, res_ptr,
    N_OUT,
    stride_ps, stride_pm, stride_om, stride_rm,
    HAS_RESIDUAL: tl.constexpr, SWIGLU: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr,
):
    # The split sums in split order (deterministic), then the same epilogue; one program per (column block, row).
    row = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N_OUT
    parts = part_ptr + row * stride_pm + cols
    acc_g = tl.full((BLOCK,), 0.0, tl.float32)
    acc_u = tl.full((BLOCK,), 0.0, tl.float32)
    for s in range(SPLIT_K):
        acc_g += tl.load(parts + s * stride_ps, mask=mask, other=0.0)
        if SWIGLU:
            acc_u += tl.load(parts + s * stride_ps + N_OUT, mask=mask, other=0.0)
    if SWIGLU:
        val = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    elif HAS_RESIDUAL:
        val = acc_g + tl.load(res_ptr + row * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    else:
        val = acc_g
    tl.store(out_ptr + row * stride_om + cols, val.to(out_ptr.dtype.element_ty), mask=mask)


# --- launcher -------------------------------------------------------------------------------------------------


def _block_m(M: int) -> int:
    """The rows padded for tl.dot, which takes at least 16."""
    return max(16, triton.next_power_of_2(M))


def _gemm_decode_launches(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, residual: torch.Tensor | None,
                          swiglu: bool, config: Mapping[str, Any], interpreter: bool) -> list[TritonLaunch]:
    """The one statement of a decode GEMM's launches (the split-K kernel, then the reduce when SPLIT_K > 1),
    allocating the fp32 partials on x's device (through torch's caching allocator, so CUDA-graph capture works):
    :func:`gemm_decode` calls it, :meth:`GemmDecodeSpec.compile_units` compiles it."""
    (M, K), N = x.shape, w.shape[0]
    n_out = N // 2 if swiglu else N
    split_k = config["SPLIT_K"]
    partial = (torch.empty(split_k, M, N, dtype=torch.float32, device=x.device) if split_k > 1 else out)
    res = residual if residual is not None else out  # never read without the residual
    args = {"x_ptr": x, "w_ptr": w, "out_ptr": out, "res_ptr": res, "part_ptr": partial, "M": M, "N_OUT": n_out,
            "K": K, "stride_xm": x.stride(0), "stride_wn": w.stride(0), "stride_om": out.stride(0),
            "stride_rm": res.stride(0), "stride_ps": partial.stride(0) if split_k > 1 else 0,
            "stride_pm": partial.stride(1) if split_k > 1 else 0}
    constexprs = {"HAS_RESIDUAL": residual is not None, "SWIGLU": swiglu, "SPLIT_K": split_k,
                  "BLOCK_M": _block_m(M), "BLOCK_N": config["BLOCK_N"], "BLOCK_K": config["BLOCK_K"],
                  "UPCAST": interpreter and x.dtype != torch.float16, "IEEE": x.dtype == torch.float32}
    grid = (triton.cdiv(n_out, config["BLOCK_N"]), split_k, 1)
    launches = [TritonLaunch(_gemm_decode_kernel, grid, args, constexprs, config["num_warps"], config["num_stages"])]
    if split_k > 1:
        block = min(_REDUCE_BLOCK, triton.next_power_of_2(n_out))
        reduce_args = {"part_ptr": partial, "out_ptr": out, "res_ptr": res, "N_OUT": n_out,
                       "stride_ps": partial.stride(0), "stride_pm": partial.stride(1), "stride_om": out.stride(0),
                       "stride_rm": res.stride(0)}
        reduce_meta = {"HAS_RESIDUAL": residual is not None, "SWIGLU": swiglu, "SPLIT_K": split_k, "BLOCK": block}
        # One stage: a short loop over the splits, nothing for Triton to software-pipeline.
        launches.append(TritonLaunch(_gemm_decode_reduce_kernel, (triton.cdiv(n_out, block), M, 1), reduce_args,
                                     reduce_meta, num_warps=4, num_stages=1))
    return launches


def interpreter_config(shape: Mapping[str, int]) -> Config:
    """The config a call without one uses under the Triton interpreter (no SMs to fill): no K split, and tiles as
    wide as the space allows, since the interpreter's cost is per program and K step (numpy does the arithmetic).

    SmolLM2-135M's four projections of one layer (fp32, M = 1 or 32) take about 0.3-0.5 s interpreted on one core
    with it, 1-2.5 s under an H100's default, whose K splits multiply the programs; its LM head takes about 3 s.
    """
    bn = 64 if shape["swiglu"] else 128
    return {"BLOCK_N": bn, "BLOCK_K": min(256, max(32, triton.next_power_of_2(shape["K"]))), "SPLIT_K": 1,
            "num_warps": 4, "num_stages": 1}


@cache
def _default_card() -> Card:
    """The card a call without a config is tuned for: $IOTRACE_CARD or the local GPU, else an H100."""
    from iotrace.cards import detect, lookup

    try:
        return detect()
    except IotraceError:
        return lookup("h100")


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The byte range [start, end) a strided tensor reaches."""
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory a and b reach overlaps (one storage, intersecting byte ranges); no device access."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def gemm_decode(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, residual: torch.Tensor | None = None,
                swiglu: bool = False, config: Mapping[str, Any] | None = None) -> None:
    """out = x · wᵀ (+ residual) for M = 1..64 rows, or out = silu(x · W_gateᵀ) · (x · W_upᵀ) with ``swiglu``.

    x (M, K), w (N, K) (nn.Linear's weight layout), out (M, N), or (M, N / 2) with ``swiglu`` (w = [W_gate; W_up]
    stacked along N); fp16, bf16 or fp32, all one dtype, each with a contiguous last dimension (row strides are
    free, so x may be rows of a bigger buffer). ``out`` may be ``residual`` itself (in-place residual update) but
    must not overlap x. ``config`` (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages) defaults to
    :meth:`GemmDecodeSpec.default_config` for ``$IOTRACE_CARD`` or the local GPU (else an H100), and under the
    Triton interpreter to :func:`interpreter_config`.
    """
    if x.dim() != 2 or w.dim() != 2 or out.dim() != 2:
        raise InvalidValueError(f"gemm-decode needs 2-D tensors: x {tuple(x.shape)}, w {tuple(w.shape)}, "
                                f"out {tuple(out.shape)}", "x is (M, K), w is (N, K), out is (M, N)")
    (M, K), (N, K2) = x.shape, w.shape
    if M > MAX_M:
        raise InvalidValueError(f"gemm-decode takes at most {MAX_M} rows, got M={M}",
                                "use the tiled `gemm` kernel for prefill-sized M")
    if swiglu and residual is not None:
        raise InvalidValueError("gemm-decode cannot fuse both swiglu and a residual add",
                                "apply the residual after the down projection")
    if swiglu and N % 2:
        raise InvalidValueError(f"gemm-decode swiglu needs w of 2·F rows ([W_gate; W_up]), got N={N}",
                                "stack the gate and up weights along N")
    n_out = N // 2 if swiglu else N
    if M < 1 or K != K2 or K < 1 or N < 1 or tuple(out.shape) != (M, n_out) or (
            residual is not None and tuple(residual.shape) != (M, N)):
        raise InvalidValueError(f"gemm-decode shapes do not agree: x {tuple(x.shape)}, w {tuple(w.shape)}, "
                                f"out {tuple(out.shape)}" + (f", residual {tuple(residual.shape)}"
                                                             if residual is not None else ""),
                                "x is (M, K), w is (N, K), out and residual are (M, N); out is (M, N/2) with swiglu")
    tensors = [t for t in (x, w, out, residual) if t is not None]
    if x.dtype not in _DTYPE_NAMES or any(t.dtype != x.dtype for t in tensors):
        raise InvalidValueError("gemm-decode needs x, w, out (and residual) of one dtype of fp16, bf16, fp32; got "
                                + ", ".join(str(t.dtype).removeprefix("torch.") for t in tensors),
                                "cast them to one dtype")
    if any(t.stride(-1) != 1 for t in tensors):
        raise InvalidValueError("gemm-decode needs a contiguous last dimension in x, w, out and residual",
                                "pass row views of contiguous rows, or .contiguous() tensors")
    if _overlap(out, x) or _overlap(out, w):
        raise InvalidValueError("gemm-decode out overlaps x or w: programs would read what others already wrote",
                                "write into a separate buffer (only the residual may be out itself)")
    if residual is not None and residual.data_ptr() != out.data_ptr() and _overlap(out, residual):
        raise InvalidValueError("gemm-decode residual partly overlaps out",
                                "pass residual=out exactly (in place) or a separate buffer")
    if config is None:
        shape = {"M": M, "N": N, "K": K, "residual": int(residual is not None), "swiglu": int(swiglu)}
        config = interpreter_config(shape) if interpreting() else \
            GemmDecodeSpec().default_config(shape, _DTYPE_NAMES[x.dtype], _default_card())
    for launch in _gemm_decode_launches(x, w, out, residual, swiglu, config, interpreting()):
        launch()


# --- spec -----------------------------------------------------------------------------------------------------


def _model_presets() -> dict[str, Shape]:
    """The decode projections of real layers (iotrace/data/models.toml), at batch 1 and 32."""
    presets: dict[str, Shape] = {}
    for key in ("smollm2-135m", "llama-3-8b"):
        m = model(key)
        q_dim = m.heads * m.head_dim
        layers = {"qkv": (q_dim + 2 * m.kv_heads * m.head_dim, m.hidden, 0, 0),
                  "o-proj": (m.hidden, q_dim, 1, 0),
                  "gate-up": (2 * m.intermediate, m.hidden, 0, 1),
                  "down": (m.hidden, m.intermediate, 1, 0),
                  "lm-head": (m.vocab, m.hidden, 0, 0)}
        for (layer, (n, k, residual, swiglu)), (phase, tokens) in itertools.product(
                layers.items(), (("decode-b1", 1), ("decode-b32", 32))):
            presets[f"{key}-{layer}-{phase}"] = {"M": tokens, "N": n, "K": k, "residual": residual, "swiglu": swiglu}
    return presets


def _bounded(block_m: int, bn: int, bk: int, swiglu: int) -> bool:
    """Tiles a program can hold: the accumulators and one stage of w within the register file's reach."""
    mats = 1 + swiglu
    return block_m * bn * mats <= 64 * 128 and bn * bk * mats <= 128 * 256


class GemmDecodeSpec(KernelSpec):
    name: ClassVar[str] = "gemm-decode"
    summary: ClassVar[str] = ("decode GEMM out = x·wᵀ (M ≤ 64, nn.Linear w): GEMV / split-K, fused residual add or "
                              "SwiGLU, fp32 accumulation")
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "fp32")
    shape_keys: ClassVar[tuple[str, ...]] = ("M", "N", "K", "residual", "swiglu")
    shape_flags: ClassVar[tuple[str, ...]] = ("residual", "swiglu")
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"M": 3, "N": 83, "K": 130, "residual": 1}
    # M·N·K: the interpreter's cost is per program and K step, numpy does the arithmetic; at this budget a reduced
    # preset (e.g. M=1, N=1025, K=1793 under its H100 default, SPLIT_K 8) takes about half a second on one core.
    interpreter_budget: ClassVar[int] = 2_000_000

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        out = super().check_shape(shape)
        if out["M"] > MAX_M:
            raise InvalidValueError(f"gemm-decode takes at most {MAX_M} rows, got M={out['M']}",
                                    "use the tiled `gemm` kernel for prefill-sized M")
        if out["residual"] and out["swiglu"]:
            raise InvalidValueError("gemm-decode shape sets both residual=1 and swiglu=1",
                                    "the SwiGLU gate/up projection has no residual; set one of them")
        if out["swiglu"] and out["N"] % 2:
            raise InvalidValueError(f"gemm-decode swiglu needs an even N (2·F gate and up rows), got N={out['N']}",
                                    "N is twice the intermediate size")
        return out

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        """Halved as usual but on N and K only (M sets BLOCK_M, and is at most 64), on F = N/2 with swiglu so N stays
        even."""
        if shape["M"] * shape["N"] * shape["K"] <= max_elements:
            return dict(shape)
        half = 2 if shape["swiglu"] else 1
        dims = {"N": shape["N"] // half, "K": shape["K"]}
        budget = max(1, max_elements // (shape["M"] * half))
        while math.prod(dims.values()) > budget and max(dims.values()) > 1:
            key = max(dims, key=dims.__getitem__)
            dims[key] = max(1, (dims[key] // 2) | 1)
        return {**shape, "N": dims["N"] * half, "K": dims["K"]}

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        M, N, K, t = shape["M"], shape["N"], shape["K"], _TORCH_DTYPES[dtype]
        # Scaled so products stay O(1) whatever K is, as gemm does.
        inputs = {"x": (torch.randn(M, K, generator=gen) / K**0.25).to(device=device, dtype=t),
                  "w": (torch.randn(N, K, generator=gen) / K**0.25).to(device=device, dtype=t)}
        if shape["residual"]:
            inputs["residual"] = torch.randn(M, N, generator=gen).to(device=device, dtype=t)
        if shape["swiglu"]:
            inputs["swiglu"] = torch.ones((), dtype=torch.int32)  # a 0-d CPU flag: the launch needs it on the host
        return inputs

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x, w = inputs["x"], inputs["w"]
        n_out = w.shape[0] // 2 if "swiglu" in inputs else w.shape[0]
        return {"out": torch.empty(x.shape[0], n_out, dtype=x.dtype, device=x.device)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"out": reference_decode(inputs["x"], inputs["w"], inputs.get("residual"), "swiglu" in inputs)}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        gemm_decode(inputs["x"], inputs["w"], outputs["out"], inputs.get("residual"), "swiglu" in inputs, config)

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """torch.nn.functional.linear (cuBLAS), with the residual add or silu·mul in eager torch for those flags, and
        a copy of w: a bandwidth reference, not a rival (it reads and writes w, twice the bytes the kernel must
        read), so compare its GB/s with the kernel's, not its time."""
        from torch.nn.functional import linear, silu

        x, w, residual = inputs["x"], inputs["w"], inputs.get("residual")
        dst = torch.empty_like(w)
        if "swiglu" in inputs:
            half = w.shape[0] // 2

            def cublas() -> object:
                gate_up = linear(x, w)
                return silu(gate_up[:, :half]) * gate_up[:, half:]
        elif residual is not None:
            def cublas() -> object:
                return residual + linear(x, w)
        else:
            def cublas() -> object:
                return linear(x, w)
        label = "F.linear (cuBLAS)" + (" + eager silu·mul" if "swiglu" in inputs else
                                       " + eager residual add" if residual is not None else "")
        return {label: cublas, "copy of w": lambda: dst.copy_(w)}

    def tolerance(self, dtype: str) -> Tolerance:
        # fp32 accumulation in both; the error is the output rounding (fp16: 2^-11, bf16: 2^-8 relative, and the
        # interpreter truncates bf16 instead of rounding: one more ulp) plus summation order (fp32, split or not).
        return {"fp16": Tolerance(1e-2, 5e-3), "bf16": Tolerance(3e-2, 1.6e-2),
                "fp32": Tolerance(1e-4, 1e-4)}[self.check_dtype(dtype)]

    def cost(self, shape: Shape, dtype: str) -> Cost:
        M, N, K, residual, swiglu = (shape[k] for k in ("M", "N", "K", "residual", "swiglu"))
        e = DTYPE_BYTES[self.check_dtype(dtype)]
        n_out = N // 2 if swiglu else N
        flops = 2.0 * M * N * K + residual * M * N + swiglu * 5 * M * n_out
        nbytes = float(N * K * e + M * K * e + M * n_out * e + residual * M * N * e)
        # fp32 multiplies with IEEE products on FMA units (no TF32); 16-bit types on tensor cores.
        peak = "fp32" if dtype == "fp32" else DTYPE_PEAK[dtype]
        return Cost(flops, nbytes, peak, "FLOPs = 2·M·N·K (+ M·N residual, + 5·M·F silu·mul, F = N/2); bytes = "
                                         "N·K·e [w once] + M·K·e [x] + M·N_out·e [out] (+ M·N·e [residual])")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        K, block_m, swiglu = shape["K"], _block_m(shape["M"]), shape["swiglu"]
        k_blocks_max = max(32, triton.next_power_of_2(K))
        configs = []
        for bn, bk, split_k, warps, stages in itertools.product(
                (32, 64, 128, 256), (32, 64, 128, 256, 512), (1, 2, 4, 8, 16), (2, 4, 8), (1, 2, 3, 4)):
            # No K block wider than K needs, and no split left without a K block of its own.
            if bk > k_blocks_max or split_k > triton.cdiv(K, bk) or not _bounded(block_m, bn, bk, swiglu):
                continue
            configs.append({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split_k, "num_warps": warps,
                            "num_stages": stages})
        return configs

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        """Wide w tiles where the registers allow, narrowed along K until three stages fit the card's shared memory,
        then SPLIT_K for about two programs per SM, each split at least one K block (a K too short for that first
        halves BLOCK_K, down to 128). Wide tiles also keep an interpreted call short: the interpreter's cost is per
        program and K step, so a CPU run (tuned for an H100 when no GPU is found) wants them too.

        Tiles (BLOCK_N x BLOCK_K), checked by static compiles for sm_80 and sm_90 (no spill on any preset, the default
        shape, M = 64 and a ragged swiglu shape, in every dtype; sm_86 and sm_89 on a sample): 128 x 256 at M <= 16
        and 128 x 128 above (64 gate + 64 up rows with swiglu); fp32 on sm_8x, whose IEEE fp32 dot runs on FMA units
        and holds its operands in registers, 64 x 64 up to 32 rows and 32 x 32 at 64; rows not 16-byte aligned
        (K·e % 16 != 0: no vector loads, a pointer per element) 64 x 64 (32 x 64 with swiglu or FMA).
        """
        M, N, K, swiglu = shape["M"], shape["N"], shape["K"], shape["swiglu"]
        e = DTYPE_BYTES[self.check_dtype(dtype)]
        n_out = N // 2 if swiglu else N
        block_m = _block_m(M)
        limit = card.sm_limits.smem_per_block_optin
        fma = dtype == "fp32" and card.sm_limits.cc < (9, 0)
        if (K * e) % 16:
            bn, bk, warps = (32 if swiglu or fma else 64), 64, 4
        elif fma:
            bn = 32 if swiglu or block_m >= 64 else 64
            bk, warps = (64 if block_m <= 32 else 32), 8
        else:
            bn, bk = (64 if swiglu else 128), (256 if block_m == 16 else 128)
            # 32+ rows on a card with under 128 KiB of shared memory per block (sm_86, sm_89): 4 warps spill a few
            # bytes at the narrower K blocks that fit there, 8 do not.
            warps = 8 if block_m >= 64 or (block_m >= 32 and limit < 128 * 1024) else 4
        bk = min(bk, max(32, triton.next_power_of_2(K)))

        def per_stage(bk: int) -> int:  # the x tile and the w tile(s) Triton stages in shared memory
            return (block_m * bk + (1 + swiglu) * bn * bk) * e

        while bk > 64 and 3 * per_stage(bk) > limit:
            bk //= 2
        programs, want = triton.cdiv(n_out, bn), 2 * card.sm_count
        while bk > 128 and programs * min(16, triton.cdiv(K, bk)) < want:
            bk //= 2
        split_k = 1
        while split_k * 2 <= min(math.ceil(want / programs), triton.cdiv(K, bk), 16):
            split_k *= 2
        # Four stages at 16 rows (three spill a few bytes at 128 x 128 on sm_90), three above, fewer where they do
        # not fit.
        stages = max(1, min(4 if block_m == 16 else 3, limit // per_stage(bk)))
        return {"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split_k, "num_warps": warps, "num_stages": stages}

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        # Contiguous tensors on the meta device, as make_inputs and make_outputs lay them out.
        M, N, K, t = shape["M"], shape["N"], shape["K"], _TORCH_DTYPES[dtype]
        swiglu = bool(shape["swiglu"])
        x = torch.empty(M, K, dtype=t, device="meta")
        w = torch.empty(N, K, dtype=t, device="meta")
        out = torch.empty(M, N // 2 if swiglu else N, dtype=t, device="meta")
        residual = torch.empty(M, N, dtype=t, device="meta") if shape["residual"] else None
        return [launch.unit() for launch in _gemm_decode_launches(x, w, out, residual, swiglu, config,
                                                                  interpreter=False)]


def reference_decode(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None,
                     swiglu: bool = False) -> torch.Tensor:
    """The decode GEMM and its epilogue in fp64 on the CPU: x · wᵀ, then + residual or silu(gate) · up."""
    out = x.double().cpu() @ w.double().cpu().T
    if swiglu:
        half = w.shape[0] // 2
        gate, up = out[:, :half], out[:, half:]
        return gate * torch.sigmoid(gate) * up
    if residual is not None:
        out = out + residual.double().cpu()
    return out


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [GemmDecodeSpec()]
