"""Split-KV decode attention (flash-decoding): one query token per sequence against a long KV cache.

At batch 1 one program per (sequence, KV head) would leave most SMs idle while it walks 32k keys, so the
keys are split into NUM_SPLITS ranges, one program each. Every program writes a partial output and the
log-sum-exp of its range; a second small kernel combines them, o = Σ_s exp(lse_s − lse) · o_s with
lse = log Σ_s exp(lse_s) (Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context inference").
A program serves all H_q / H_kv query heads of its KV head, so each key and value is read once (GQA).

The cache is (batch, max_context, H_kv, d); each sequence uses its first context_lens[b] positions.

Cost (identity 4): FLOPs = Σ_b 4·L_b·H_q·d; minimum bytes = read K and V once (Σ_b 2·L_b·H_kv·d·e) plus
Q and O: about 2·group FLOP/B, so memory-bound, and the figure of merit is the KV-read bandwidth.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError
from iotrace.kernels.attention_common import (
    LOG2E,
    attention_flops,
    check_heads,
    finish_softmax,
    online_softmax_step,
    reference_attention,
    shape_lengths,
)
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

__all__ = ["DecodeSpec", "combine_launch", "default_splits", "flash_decode"]

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@triton.jit
def _decode_split_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, lens_ptr, po_ptr, plse_ptr,
    # strides: q (b, h); cache (b, t, h); partial out (b, h, split); partial lse (b, h)
    stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
    # sizes and parameters
    KV_HEADS, GROUP, qk_scale,
    # meta-parameters
    HEAD_DIM: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    seq = (pid_bh // KV_HEADS).to(tl.int64)  # 64-bit: seq · stride_kb passes 2^31 for 32 sequences of 32k at H_kv 16
    kv_head = pid_bh % KV_HEADS
    length = tl.load(lens_ptr + seq)
    # Each split takes a whole number of key blocks; the last splits of a short sequence may get none.
    chunk = tl.cdiv(tl.cdiv(length, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, length)
    rows = tl.arange(0, GROUP_PAD)  # the query heads sharing this KV head, padded for tl.dot
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=row_ok[:, None],
                other=0.0)
    m_i = tl.full((GROUP_PAD,), -float("inf"), tl.float32)
    l_i = tl.zeros((GROUP_PAD,), tl.float32)
    acc = tl.zeros((GROUP_PAD, HEAD_DIM), tl.float32)
    k_base = k_ptr + seq * stride_kb + kv_head * stride_kh
    v_base = v_ptr + seq * stride_vb + kv_head * stride_vh
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        key_ok = offs_n < hi
        k = tl.load(k_base + offs_n[None, :] * stride_kt + offs_d[:, None], mask=key_ok[None, :], other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=key_ok[:, None], other=0.0)
        # The interpreter has no bf16 arithmetic (numpy lacks the type): its tl.dot on bf16 multiplies the raw bit
        # patterns, so it upcasts to fp32 there; a constexpr `if` keeps the upcast out of GPU kernels entirely.
        if UPCAST:  # noqa: SIM108
            qk = tl.dot(q.to(tl.float32), k.to(tl.float32))
        else:
            qk = tl.dot(q, k)
        qk = tl.where(key_ok[None, :], qk * qk_scale, -float("inf"))
        p, alpha, m_new, l_i = online_softmax_step(qk, m_i, l_i)
        if UPCAST:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32))
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    # An empty split writes o = 0 and lse = -inf, which the combine step weighs by exp(-inf) = 0.
    l_safe, lse = finish_softmax(m_i, l_i)
    tl.store(po_ptr + seq * stride_pb + heads[:, None] * stride_ph + split * stride_ps + offs_d[None, :],
             acc / l_safe[:, None], mask=row_ok[:, None])
    # Natural log again; a row with no key gets -inf (and no log2(0) is evaluated).
    tl.store(plse_ptr + seq * stride_lb + heads * stride_lh + split, lse, mask=row_ok)


@triton.jit
def _decode_combine_kernel(
    po_ptr, plse_ptr, o_ptr, lse_ptr,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh, stride_fb,
    HEADS,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    pid = tl.program_id(0)
    seq = (pid // HEADS).to(tl.int64)
    head = pid % HEADS
    splits = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    split_ok = splits < NUM_SPLITS
    lse_s = tl.load(plse_ptr + seq * stride_lb + head * stride_lh + splits, mask=split_ok, other=-float("inf"))
    m = tl.max(lse_s, 0)
    weights = tl.exp(lse_s - m)
    total = tl.sum(weights, 0)
    parts = tl.load(po_ptr + seq * stride_pb + head * stride_ph + splits[:, None] * stride_ps + offs_d[None, :],
                    mask=split_ok[:, None], other=0.0)
    out = tl.sum(parts * weights[:, None], 0) / total
    tl.store(o_ptr + seq * stride_ob + head * stride_oh + offs_d, out.to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + seq * stride_fb + head, m + tl.log(total))


def _group_pad(group: int) -> int:
    return max(16, triton.next_power_of_2(group))  # tl.dot needs at least 16 rows


def flash_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, context_lens: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, config: Mapping[str, int], validate: bool = True) -> None:
    """Decode attention: q (B, H_q, d) over the first context_lens[b] rows of k/v_cache (B, T, H_kv, d).

    ``validate`` reads the lengths back to the host to check them; a timed or CUDA-graph-captured launch passes
    False (a device-to-host read is not allowed during capture).
    """
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    if k_cache.shape != v_cache.shape or k_cache.shape[0] != batch or k_cache.shape[3] != head_dim or \
            out.shape != q.shape or tuple(lse.shape) != (batch, heads) or tuple(context_lens.shape) != (batch,):
        raise InvalidValueError(f"decode shapes do not agree: q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, "
                                f"v_cache {tuple(v_cache.shape)}, context_lens {tuple(context_lens.shape)}",
                                "q is (B, H_q, d), the caches (B, T, H_kv, d), context_lens (B,)")
    check_heads("attention-decode", {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim})
    longest, shortest = (int(context_lens.max()), int(context_lens.min())) if validate else (1, 1)
    if longest > k_cache.shape[1] or shortest < 1:
        raise InvalidValueError(f"context lengths {shortest}..{longest} fall outside the cache of "
                                f"{k_cache.shape[1]} positions", "each length must be between 1 and the cache length")
    for launch in _decode_launches(q, k_cache, v_cache, context_lens, out, lse, config, interpreting()):
        launch()


def _decode_launches(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, context_lens: torch.Tensor,
                     out: torch.Tensor, lse: torch.Tensor, config: Mapping[str, int],
                     interpreter: bool) -> list[TritonLaunch]:
    """The one statement of a decode call's two launches (split, then combine), allocating the partial results on
    q's device: :func:`flash_decode` calls it, :meth:`DecodeSpec.compile_units` compiles it."""
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    splits = config["NUM_SPLITS"]
    partial_o = torch.empty(batch, heads, splits, head_dim, dtype=torch.float32, device=q.device)
    partial_lse = torch.empty(batch, heads, splits, dtype=torch.float32, device=q.device)
    group = heads // kv_heads
    args = {"q_ptr": q, "k_ptr": k_cache, "v_ptr": v_cache, "lens_ptr": context_lens, "po_ptr": partial_o,
            "plse_ptr": partial_lse, "stride_qb": q.stride(0), "stride_qh": q.stride(1),
            "stride_kb": k_cache.stride(0), "stride_kt": k_cache.stride(1), "stride_kh": k_cache.stride(2),
            "stride_vb": v_cache.stride(0), "stride_vt": v_cache.stride(1), "stride_vh": v_cache.stride(2),
            "stride_pb": partial_o.stride(0), "stride_ph": partial_o.stride(1), "stride_ps": partial_o.stride(2),
            "stride_lb": partial_lse.stride(0), "stride_lh": partial_lse.stride(1), "KV_HEADS": kv_heads,
            "GROUP": group, "qk_scale": LOG2E / math.sqrt(head_dim)}
    constexprs = {"HEAD_DIM": head_dim, "GROUP_PAD": _group_pad(group), "BLOCK_N": config["BLOCK_N"],
                  "NUM_SPLITS": splits, "UPCAST": interpreter and q.dtype != torch.float16}
    split = TritonLaunch(_decode_split_kernel, (batch * kv_heads, splits, 1), args, constexprs, config["num_warps"],
                         config["num_stages"])
    return [split, combine_launch(partial_o, partial_lse, out, lse)]


def combine_launch(partial_o: torch.Tensor, partial_lse: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor) -> TritonLaunch:
    """The combine step of a split-KV decode: partial outputs (B, H, splits, d) and log-sum-exps (B, H, splits)
    into ``out`` (B, H, d) and ``lse`` (B, H); one program per (sequence, query head)."""
    batch, heads, splits, head_dim = partial_o.shape
    args = {"po_ptr": partial_o, "plse_ptr": partial_lse, "o_ptr": out, "lse_ptr": lse,
            "stride_pb": partial_o.stride(0), "stride_ph": partial_o.stride(1), "stride_ps": partial_o.stride(2),
            "stride_lb": partial_lse.stride(0), "stride_lh": partial_lse.stride(1), "stride_ob": out.stride(0),
            "stride_oh": out.stride(1), "stride_fb": lse.stride(0), "HEADS": heads}
    constexprs = {"HEAD_DIM": head_dim, "NUM_SPLITS": splits, "SPLITS_PAD": triton.next_power_of_2(splits)}
    # One stage: the kernel has no loop for Triton to software-pipeline, so the stage count changes nothing.
    return TritonLaunch(_decode_combine_kernel, (batch * heads, 1, 1), args, constexprs, num_warps=4, num_stages=1)


def default_splits(batch: int, kv_heads: int, context: int, block_n: int, sm_count: int) -> int:
    """Enough splits for two programs per SM, no split shorter than 4 key blocks, a power of two up to 64."""
    want = math.ceil(2 * sm_count / (batch * kv_heads))
    useful = max(1, context // (4 * block_n))
    return min(64, triton.next_power_of_2(max(1, min(want, useful))))


def _model_presets() -> dict[str, Shape]:
    presets: dict[str, Shape] = {}
    for key, context, batch in itertools.product(("llama-3-8b", "gemma-2-27b"), (8192, 32768), (1, 32)):
        m = model(key)
        presets[f"{key}-ctx{context // 1024}k-b{batch}"] = {
            "batch": batch, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim, "context": context,
            "varlen": 0}
        if batch > 1:
            presets[f"{key}-ctx{context // 1024}k-b{batch}-varlen"] = {
                "batch": batch, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
                "context": context, "varlen": 1}
    return presets


class DecodeShapes(KernelSpec):
    """What every decode-attention spec shares: the GQA shape rules, the reduction for the interpreter, the outputs
    (out (B, H_q, d) and lse (B, H_q)) and the tolerances."""

    #: batch·heads·context: each query head's full context, once (a 6k context at 8 heads takes a few seconds).
    interpreter_budget: ClassVar[int] = 50_000

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        out = super().check_shape(shape)
        check_heads(self.name, out)
        return out

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        if shape["batch"] * shape["heads"] * shape["context"] <= max_elements:
            return dict(shape)
        group = shape["heads"] // shape["kv_heads"]
        small = {**shape, "batch": min(shape["batch"], 3), "kv_heads": min(shape["kv_heads"], 2)}
        small["heads"] = small["kv_heads"] * group
        small["context"] = min(shape["context"], max(33, max_elements // (small["batch"] * small["heads"])) | 1)
        return small

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        q = inputs["q"]
        return {"out": torch.empty_like(q), "lse": torch.empty(q.shape[0], q.shape[1], dtype=torch.float32,
                                                               device=q.device)}

    def tolerance(self, dtype: str) -> Tolerance:
        # P is rounded to the input type before P·V (as FlashAttention does): fp16 2^-11, bf16 2^-8 relative.
        return {"fp16": Tolerance(4e-3, 4e-3), "bf16": Tolerance(2.5e-2, 2.5e-2)}[self.check_dtype(dtype)]


def decode_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor) -> dict[str, torch.Tensor]:
    """fp64 attention of each sequence's one query over its first lens[b] cached keys and values."""
    outs, lses = [], []
    for b, length in enumerate(lens.tolist()):
        o, lse = reference_attention(q[b:b + 1].cpu(), k[b, :length].cpu(), v[b, :length].cpu(), causal=False)
        outs.append(o[0])
        lses.append(lse[:, 0])
    return {"out": torch.stack(outs), "lse": torch.stack(lses)}


class DecodeSpec(DecodeShapes):
    name: ClassVar[str] = "attention-decode"
    summary: ClassVar[str] = "split-KV decode (flash-decoding): one token against the KV cache, GQA, ragged contexts"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16")
    shape_keys: ClassVar[tuple[str, ...]] = ("batch", "heads", "kv_heads", "head_dim", "context", "varlen")
    shape_flags: ClassVar[tuple[str, ...]] = ("varlen",)
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"batch": 3, "heads": 8, "kv_heads": 2, "head_dim": 64, "context": 333,
                                      "varlen": 1}
    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        batch, d, t = shape["batch"], shape["head_dim"], _TORCH_DTYPES[dtype]
        lens = shape_lengths(shape, "context")
        cache = (batch, shape["context"], shape["kv_heads"], d)
        return {"q": torch.randn(batch, shape["heads"], d, generator=gen).to(device=device, dtype=t),
                "k_cache": torch.randn(*cache, generator=gen).to(device=device, dtype=t),
                "v_cache": torch.randn(*cache, generator=gen).to(device=device, dtype=t),
                "context_lens": torch.tensor(lens, dtype=torch.int32, device=device)}

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """torch SDPA over the whole cache (a ragged batch's padding included: SDPA has no per-sequence length), and
        a copy of K and V: a bandwidth reference, not a rival (it reads and writes them, twice the bytes decode
        reads), so compare its GB/s with decode's, not its time."""
        from torch.nn.functional import scaled_dot_product_attention

        k, v = inputs["k_cache"], inputs["v_cache"]
        q4 = inputs["q"][:, :, None, :]                       # (B, H, 1, d)
        k4, v4 = k.transpose(1, 2), v.transpose(1, 2)          # (B, H_kv, T, d)
        dst = torch.empty_like(k)
        gqa = shape["heads"] != shape["kv_heads"]
        return {"torch SDPA": lambda: scaled_dot_product_attention(q4, k4, v4, enable_gqa=gqa),
                "copy of K and V": lambda: (dst.copy_(k), dst.copy_(v))}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return decode_reference(inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["context_lens"])

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        # make_inputs built lengths that fit; skipping the host read keeps the launch capturable in a CUDA graph.
        flash_decode(inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["context_lens"], outputs["out"],
                     outputs["lse"], config, validate=False)

    def cost(self, shape: Shape, dtype: str) -> Cost:
        lens = shape_lengths(shape, "context")
        h, hkv, d, e = shape["heads"], shape["kv_heads"], shape["head_dim"], DTYPE_BYTES[dtype]
        flops = sum(attention_flops(1, n, h, d, causal=False) for n in lens)
        kv_bytes = sum(2 * n * hkv * d * e for n in lens)
        nbytes = float(kv_bytes + shape["batch"] * h * (2 * d * e + 4))
        return Cost(flops, nbytes, DTYPE_PEAK[dtype],
                    "FLOPs = Σ_b 4·L_b·H·d; bytes = Σ_b 2·L_b·H_kv·d·e [K, V read once] + B·H·(2·d·e + 4) [Q, O, lse]")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        return [{"BLOCK_N": bn, "NUM_SPLITS": s, "num_warps": w, "num_stages": st}
                for bn, s, w, st in itertools.product((32, 64, 128), (1, 2, 4, 8, 16, 32, 64), (2, 4, 8), (1, 2, 3))
                if s * bn <= max(shape["context"], bn)]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        block_n = 64
        return {"BLOCK_N": block_n, "num_warps": 4, "num_stages": 2,
                "NUM_SPLITS": default_splits(shape["batch"], shape["kv_heads"], shape["context"], block_n,
                                             card.sm_count)}

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        # The tensors make_inputs and make_outputs lay out, on the meta device: q and out (B, H_q, d), the caches
        # (B, T, H_kv, d), the lengths (B,) and lse (B, H_q).
        b, h, d, t = shape["batch"], shape["heads"], shape["head_dim"], _TORCH_DTYPES[dtype]
        q = torch.empty(b, h, d, dtype=t, device="meta")
        cache = torch.empty(b, shape["context"], shape["kv_heads"], d, dtype=t, device="meta")
        lens = torch.empty(b, dtype=torch.int32, device="meta")
        lse = torch.empty(b, h, dtype=torch.float32, device="meta")
        launches = _decode_launches(q, cache, torch.empty_like(cache), lens, torch.empty_like(q), lse, config,
                                    interpreter=False)
        return [launch.unit() for launch in launches]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [DecodeSpec()]
