"""Rotary position embedding (RoPE): rotate each pair of a head's dims by an angle that grows with the position.

RoFormer (Su, Lu, Pan, Murtadha, Wen, Liu 2021, "RoFormer: Enhanced Transformer with Rotary Position
Embedding"): dims pair up, pair i of the token at position p turns by p·θ_i with θ_i = theta^(-2i/d),

    x1' = x1·cos(p·θ_i) − x2·sin(p·θ_i),    x2' = x2·cos(p·θ_i) + x1·sin(p·θ_i),    i = 0 .. d/2 − 1.

Two pairings are in use, both with cos/sin index i:

* GPT-NeoX / Hugging Face ``rotate_half`` (``interleaved=False``): pair i is (x[i], x[i + d/2]).
* GPT-J / llama.cpp ``LLAMA_ROPE_TYPE_NORM`` (``interleaved=True``): pair i is (x[2i], x[2i + 1]). llama.cpp's
  GGUF conversion permutes the q/k projection rows of HF Llama checkpoints so the interleaved rotation of the
  permuted head equals the half-split rotation of the original one.

The angles come from one fp32 cache of shape (max_positions, d) holding cos in ``[:, :d/2]`` and sin in
``[:, d/2:]`` (vLLM's ``cos_sin_cache`` layout), computed as Hugging Face's ``LlamaRotaryEmbedding`` does for the
default rope type. One launch rotates q (T, H, d) and k (T, H_kv, d) together, as vLLM's rotary kernel does; q and k
are usually strided views into one fused QKV projection output, so the kernel takes their strides. Math is fp32,
stored back in the input dtype.

Cost (identity 4): FLOPs = 3 per element of q and k (4 multiplies and 2 adds per pair); minimum bytes = read and
write q and k once, plus one cos/sin row (d fp32 values) and one position per token. At 2 bytes per element that
is under 1 FLOP/B: memory-bound, and its figure of merit is GB/s.
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

__all__ = ["RopeSpec", "apply_rope", "rope_cache", "rope_reference"]

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
#: Positions make_inputs draws from, and so the rows of the cos/sin cache it builds.
MAX_POSITIONS = 4096
#: rope_theta of Llama 2 / SmolLM2-style configs and of Llama 3 (config.json): make_inputs uses one per seed.
THETAS = (10000.0, 500000.0)
_HEAD_BLOCKS = (1, 2, 4, 8, 16)
_WARPS = (1, 2, 4, 8)


# --- cos/sin cache and torch reference --------------------------------------------------------------------------


def rope_cache(max_positions: int, head_dim: int, theta: float, device: str | torch.device = "cpu") -> torch.Tensor:
    """The fp32 (max_positions, head_dim) cos/sin cache: cos(p·θ_i) in ``[:, :head_dim//2]``, sin in the rest.

    θ_i = 1 / theta^(2i/head_dim), computed as Hugging Face's ``LlamaRotaryEmbedding`` (default rope type) does;
    the layout is vLLM's ``cos_sin_cache``.
    """
    if head_dim < 2 or head_dim % 2 or max_positions < 1 or not theta > 0:
        raise InvalidValueError(f"rope_cache needs an even head_dim >= 2, max_positions >= 1 and theta > 0, got "
                                f"head_dim={head_dim}, max_positions={max_positions}, theta={theta}",
                                "e.g. rope_cache(4096, 64, 10000.0)")
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim)
    positions = torch.arange(max_positions, dtype=torch.int64, device=device)
    freqs = positions.float()[:, None] * inv_freq[None]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def _check_rope_operand(what: str, x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> None:
    head_dim = x.shape[-1] if x.dim() else 0
    if x.dim() < 2 or head_dim % 2 or cos_sin.dim() != 2 or cos_sin.shape[1] != head_dim:
        raise InvalidValueError(f"rope shapes do not agree: {what} {tuple(x.shape)}, cos_sin {tuple(cos_sin.shape)}",
                                "the head dim must be even and equal to the cos_sin cache's width (rope_cache(..., "
                                "head_dim, ...))")
    if tuple(positions.shape) != (x.shape[0],) or positions.dtype not in (torch.int32, torch.int64):
        raise InvalidValueError(f"rope positions {tuple(positions.shape)} {positions.dtype} do not fit {what} "
                                f"{tuple(x.shape)}", "positions is an int32 or int64 tensor of shape (tokens,)")


def rope_reference(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """RoPE of ``x`` (T, ..., d), token t at ``positions[t]``, in fp32 torch: returns a new float32 tensor."""
    _check_rope_operand("x", x, positions, cos_sin)
    half = x.shape[-1] // 2
    rows = cos_sin.index_select(0, positions.to(cos_sin.device)).float()
    view = (x.shape[0], *(1,) * (x.dim() - 2), half)
    cos, sin = rows[:, :half].reshape(view), rows[:, half:].reshape(view)
    xf = x.float()
    if interleaved:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# --- Triton kernel ----------------------------------------------------------------------------------------------


@triton.jit
def _rotate_heads(in_ptr, out_ptr, stride_it, stride_ih, stride_ot, stride_oh, n_heads, token, head0, cos, sin,
                  HEAD_DIM: tl.constexpr, HALF_PAD: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rotate heads head0 .. head0 + BLOCK_H − 1 (those below n_heads) of one token, reading in_ptr, writing out_ptr."""
    heads = head0 + tl.arange(0, BLOCK_H)
    offs = tl.arange(0, HALF_PAD)
    mask = (heads < n_heads)[:, None] & (offs < HEAD_DIM // 2)[None, :]
    if INTERLEAVED:
        first = 2 * offs
        second = first + 1
    else:
        first = offs
        second = offs + HEAD_DIM // 2
    src = in_ptr + token * stride_it + heads[:, None].to(tl.int64) * stride_ih
    x1 = tl.load(src + first[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + second[None, :], mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    dst = out_ptr + token * stride_ot + heads[:, None].to(tl.int64) * stride_oh
    tl.store(dst + first[None, :], o1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + second[None, :], o2.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    # pointers: q and k in, q and k out (the same tensors for an in-place call), positions, cos/sin cache
    q_ptr, k_ptr, qo_ptr, ko_ptr, pos_ptr, cs_ptr,
    # strides (token, head) of each of the four; the last dim has unit stride
    stride_qt, stride_qh, stride_kt, stride_kh, stride_qot, stride_qoh, stride_kot, stride_koh,
    # the cos/sin cache's row stride, and the head counts
    stride_cs, HEADS, KV_HEADS,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HALF_PAD: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr,
):
    # Grid: (tokens, q head blocks + k head blocks). A program loads its token's cos/sin row once and rotates a block
    # of BLOCK_H heads of q or of k.
    token = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    offs = tl.arange(0, HALF_PAD)
    cs_mask = offs < HEAD_DIM // 2
    row = cs_ptr + pos * stride_cs
    cos = tl.load(row + offs, mask=cs_mask, other=0.0).to(tl.float32)
    sin = tl.load(row + HEAD_DIM // 2 + offs, mask=cs_mask, other=0.0).to(tl.float32)
    q_blocks = (HEADS + BLOCK_H - 1) // BLOCK_H
    if block < q_blocks:
        _rotate_heads(q_ptr, qo_ptr, stride_qt, stride_qh, stride_qot, stride_qoh, HEADS, token, block * BLOCK_H,
                      cos, sin, HEAD_DIM, HALF_PAD, INTERLEAVED, BLOCK_H)
    else:
        _rotate_heads(k_ptr, ko_ptr, stride_kt, stride_kh, stride_kot, stride_koh, KV_HEADS, token,
                      (block - q_blocks) * BLOCK_H, cos, sin, HEAD_DIM, HALF_PAD, INTERLEAVED, BLOCK_H)


# --- launcher ---------------------------------------------------------------------------------------------------


def _default_config(heads: int, kv_heads: int, head_dim: int) -> Config:
    """Up to 8 heads a program; warps so each lane holds about 4 pairs (at least one)."""
    block_h = min(8, triton.next_power_of_2(max(heads, kv_heads)))
    pairs = block_h * triton.next_power_of_2(head_dim // 2)
    return {"BLOCK_H": block_h, "num_warps": max(1, min(4, pairs // 128))}


def apply_rope(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, interleaved: bool,
               config: Mapping[str, Any] | None = None, validate: bool = False) -> None:
    """Rotate q (T, H, d) and k (T, H_kv, d) in place, token t at ``positions[t]``, in one launch.

    q and k may be strided views (e.g. into a fused QKV buffer); only the last dim needs unit stride. ``cos_sin`` is
    :func:`rope_cache`'s fp32 (max_positions, d) table. ``validate`` reads the positions back to the host to check
    they index the cache; off by default (no device-to-host read in a timed or graph-captured launch).
    """
    _rope(q, k, q, k, positions, cos_sin, interleaved, config, validate)


def _rope(q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor, k_out: torch.Tensor, positions: torch.Tensor,
          cos_sin: torch.Tensor, interleaved: bool, config: Mapping[str, Any] | None, validate: bool) -> None:
    """RoPE of q and k into q_out and k_out (the same tensors for in place)."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or \
            q_out.shape != q.shape or k_out.shape != k.shape:
        raise InvalidValueError(f"rope shapes do not agree: q {tuple(q.shape)}, k {tuple(k.shape)}, q_out "
                                f"{tuple(q_out.shape)}, k_out {tuple(k_out.shape)}",
                                "q is (T, H, d) and k (T, H_kv, d), with the same T and d")
    _check_rope_operand("q", q, positions, cos_sin)
    if q.dtype not in _TORCH_DTYPES.values() or any(t.dtype != q.dtype for t in (k, q_out, k_out)):
        raise InvalidValueError(f"rope takes q and k of one dtype among fp16, bf16, fp32, got q {q.dtype}, "
                                f"k {k.dtype}", "cast q and k to one of those")
    if cos_sin.dtype != torch.float32:
        raise InvalidValueError(f"rope's cos_sin cache must be float32, got {cos_sin.dtype}",
                                "build it with rope_cache(...)")
    if any(t.stride(-1) != 1 for t in (q, k, q_out, k_out, cos_sin)):
        raise InvalidValueError("rope needs q, k and cos_sin with unit stride in the last dim",
                                "views into a fused QKV buffer are fine; pass .contiguous() otherwise")
    devices = {t.device for t in (q, k, q_out, k_out, positions, cos_sin)}
    if len(devices) != 1:
        raise InvalidValueError(f"rope tensors are on several devices: {sorted(map(str, devices))}",
                                "move q, k, positions and cos_sin to one device")
    if validate and positions.numel():
        lowest, highest = int(positions.min()), int(positions.max())
        if lowest < 0 or highest >= cos_sin.shape[0]:
            raise InvalidValueError(f"rope positions {lowest}..{highest} fall outside the cos_sin cache of "
                                    f"{cos_sin.shape[0]} rows", "build the cache with more max_positions")
    if q.shape[0] == 0:
        return
    # A config may name only some parameters (or none): the defaults fill in the rest.
    _rope_launch(q, k, q_out, k_out, positions, cos_sin, interleaved,
                 {**_default_config(q.shape[1], k.shape[1], q.shape[2]), **(config or {})})()


def _rope_launch(q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor, k_out: torch.Tensor, positions: torch.Tensor,
                 cos_sin: torch.Tensor, interleaved: bool, config: Mapping[str, Any]) -> TritonLaunch:
    """The one statement of a Triton RoPE launch: :func:`apply_rope` calls it, :meth:`RopeSpec.compile_units`
    compiles it. Grid (tokens, q head blocks + k head blocks)."""
    tokens, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    block_h = config["BLOCK_H"]
    grid = (tokens, triton.cdiv(heads, block_h) + triton.cdiv(kv_heads, block_h), 1)
    args = {"q_ptr": q, "k_ptr": k, "qo_ptr": q_out, "ko_ptr": k_out, "pos_ptr": positions, "cs_ptr": cos_sin,
            "stride_qt": q.stride(0), "stride_qh": q.stride(1), "stride_kt": k.stride(0), "stride_kh": k.stride(1),
            "stride_qot": q_out.stride(0), "stride_qoh": q_out.stride(1), "stride_kot": k_out.stride(0),
            "stride_koh": k_out.stride(1), "stride_cs": cos_sin.stride(0), "HEADS": heads, "KV_HEADS": kv_heads}
    constexprs = {"HEAD_DIM": head_dim, "HALF_PAD": triton.next_power_of_2(head_dim // 2),
                  "INTERLEAVED": bool(interleaved), "BLOCK_H": block_h}
    # One stage: no loop for Triton to software-pipeline.
    return TritonLaunch(_rope_kernel, grid, args, constexprs, config["num_warps"], num_stages=1)


# --- spec -------------------------------------------------------------------------------------------------------


def _model_presets() -> dict[str, Shape]:
    presets: dict[str, Shape] = {}
    for key, (phase, tokens), interleaved in itertools.product(
            ("smollm2-135m", "llama-3-8b"), (("decode-b1", 1), ("decode-b32", 32), ("prefill-2k", 2048)), (0, 1)):
        shape = model(key)
        name = f"{key}-{phase}" + ("-interleaved" if interleaved else "")
        presets[name] = {"tokens": tokens, "heads": shape.heads, "kv_heads": shape.kv_heads,
                         "head_dim": shape.head_dim, "interleaved": interleaved}
    return presets


def _qkv_views(tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
               device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An uninitialised fused QKV buffer (T, (H + 2·H_kv)·d) and its q (T, H, d) and k (T, H_kv, d) views."""
    qkv = torch.empty(tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype, device=device)
    q = qkv[:, :heads * head_dim].view(tokens, heads, head_dim)
    k = qkv[:, heads * head_dim:(heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    return qkv, q, k


class RopeSpec(KernelSpec):
    name: ClassVar[str] = "rope"
    summary: ClassVar[str] = "rotary position embedding of q and k in one launch (NeoX half-split or GPT-J interleaved)"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "fp32")
    shape_keys: ClassVar[tuple[str, ...]] = ("tokens", "heads", "kv_heads", "head_dim", "interleaved")
    shape_flags: ClassVar[tuple[str, ...]] = ("interleaved",)
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"tokens": 37, "heads": 6, "kv_heads": 2, "head_dim": 64, "interleaved": 1}

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        out = super().check_shape(shape)
        if out["head_dim"] % 2:
            raise InvalidValueError(f"rope head_dim={out['head_dim']} is odd", "RoPE rotates pairs of dims: give an "
                                                                               "even head_dim, e.g. 64 or 128")
        return out

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        """Halve tokens, heads or kv_heads (kept odd) until T·(H + H_kv)·d fits; head_dim stays (it is a constexpr
        the kernel specialises on), unless it alone is past the budget, then it halves too, kept even."""
        small = dict(shape)

        def work() -> int:
            return small["tokens"] * (small["heads"] + small["kv_heads"]) * small["head_dim"]

        while work() > max_elements and max(small["tokens"], small["heads"], small["kv_heads"]) > 1:
            key = max(("tokens", "heads", "kv_heads"), key=small.__getitem__)
            small[key] = max(1, (small[key] // 2) | 1)
        while work() > max_elements and small["head_dim"] > 2:
            small["head_dim"] = max(2, small["head_dim"] // 4 * 2)
        return small

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        tokens, heads, kv_heads, head_dim = shape["tokens"], shape["heads"], shape["kv_heads"], shape["head_dim"]
        qkv, q, k = _qkv_views(tokens, heads, kv_heads, head_dim, _TORCH_DTYPES[dtype], device)
        qkv.copy_(torch.randn(qkv.shape, generator=gen))
        positions = torch.randint(0, MAX_POSITIONS, (tokens,), generator=gen, dtype=torch.int64).to(device)
        cos_sin = rope_cache(MAX_POSITIONS, head_dim, THETAS[seed % 2], device)
        return {"qkv": qkv, "q": q, "k": k, "positions": positions, "cos_sin": cos_sin,
                "interleaved": torch.tensor(shape["interleaved"])}

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"q": torch.empty(inputs["q"].shape, dtype=inputs["q"].dtype, device=inputs["q"].device),
                "k": torch.empty(inputs["k"].shape, dtype=inputs["k"].dtype, device=inputs["k"].device)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        interleaved = bool(inputs["interleaved"])
        return {name: rope_reference(inputs[name], inputs["positions"], inputs["cos_sin"], interleaved)
                for name in ("q", "k")}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        # Out of place (q, k read from the fused buffer, written to the outputs), so a repeated launch sees the same
        # inputs and every output element is checked as written; apply_rope is the same launch with out = in.
        _rope(inputs["q"], inputs["k"], outputs["q"], outputs["k"], inputs["positions"], inputs["cos_sin"],
              bool(inputs["interleaved"]), config, validate=False)

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """Eager torch (the fp32 reference, cast back into q and k's buffers) and the same compiled by torch.compile
        (its first call compiles, so time it after a warm-up)."""
        q, k, positions, cos_sin = inputs["q"], inputs["k"], inputs["positions"], inputs["cos_sin"]
        interleaved = bool(shape["interleaved"])
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)

        def eager() -> object:
            q_out.copy_(rope_reference(q, positions, cos_sin, interleaved))
            return k_out.copy_(rope_reference(k, positions, cos_sin, interleaved))

        return {"eager torch": eager, "torch.compile": checks.compiled_on_first_call(eager)}

    def tolerance(self, dtype: str) -> Tolerance:
        # fp32 math on the same cos/sin as the reference; the output is rounded once (fp16: 2^-11 relative; bf16:
        # 2^-8, and the interpreter truncates bf16, one more ulp); fp32 differs only by fused multiply-adds.
        return {"fp16": Tolerance(2e-3, 2e-3), "bf16": Tolerance(1.6e-2, 1.6e-2),
                "fp32": Tolerance(1e-5, 1e-5)}[self.check_dtype(dtype)]

    def cost(self, shape: Shape, dtype: str) -> Cost:
        tokens, head_dim = shape["tokens"], shape["head_dim"]
        elements = tokens * (shape["heads"] + shape["kv_heads"]) * head_dim
        e = DTYPE_BYTES[dtype]
        return Cost(3.0 * elements, float(2 * elements * e + tokens * head_dim * 4 + tokens * 8), "fp32",
                    "FLOPs = 3·T·(H + H_kv)·d (4 multiplies + 2 adds per pair); bytes = 2·T·(H + H_kv)·d·e "
                    "(read + write q and k) + 4·T·d (one fp32 cos/sin row per token) + 8·T (int64 positions)")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        widest = triton.next_power_of_2(max(shape["heads"], shape["kv_heads"]))
        half_pad = triton.next_power_of_2(shape["head_dim"] // 2)
        # No head block wider than the most heads (it would only mask); at least one pair per lane.
        return [{"BLOCK_H": b, "num_warps": w} for b in _HEAD_BLOCKS if b <= widest
                for w in _WARPS if w == 1 or w * 32 <= b * half_pad]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        return _default_config(shape["heads"], shape["kv_heads"], shape["head_dim"])

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        tokens, head_dim = shape["tokens"], shape["head_dim"]
        # The views into a fused QKV buffer make_inputs makes, and make_outputs' contiguous outputs, on meta.
        _, q, k = _qkv_views(tokens, shape["heads"], shape["kv_heads"], head_dim, _TORCH_DTYPES[dtype], "meta")
        positions = torch.empty(tokens, dtype=torch.int64, device="meta")
        cos_sin = torch.empty(MAX_POSITIONS, head_dim, dtype=torch.float32, device="meta")
        return [_rope_launch(q, k, torch.empty(q.shape, dtype=q.dtype, device="meta"),
                             torch.empty(k.shape, dtype=k.dtype, device="meta"), positions, cos_sin,
                             bool(shape["interleaved"]), config).unit()]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [RopeSpec()]
