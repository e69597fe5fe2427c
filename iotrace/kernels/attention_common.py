"""What the prefill and decode attention kernels share: shape rules, ragged lengths, the torch reference.

Attention here is softmax(Q·Kᵀ / sqrt(d)) · V per head, with grouped-query attention (GQA): query head h reads
KV head h // (H_q / H_kv) (Ainslie et al. 2023, "GQA"). The log-sum-exp of each row's scores,
lse = log Σ_j exp(s_j), is an output too: it is what split-KV decode and the backward pass combine on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError
from iotrace.plugins.spec import Shape

__all__ = ["HEAD_DIMS", "LOG2E", "VARLEN_STRIDE", "check_heads", "lengths", "reference_attention"]

#: Head dims the kernels are built and tested for (Llama-3 and Gemma-2 use 128; many small models 64).
HEAD_DIMS = (64, 128)

#: log2(e): the kernels fold it into the score scale, so exp(x) = exp2(x · log2 e) (Triton tutorial 06).
LOG2E = 1.4426950408889634

#: A prime far from any power of two: lengths i·VARLEN_STRIDE mod (L/2) spread over [L/2, L] unevenly.
VARLEN_STRIDE = 7919


def check_heads(name: str, shape: Mapping[str, int]) -> None:
    """GQA needs H_q a multiple of H_kv; the kernels support head dims 64 and 128."""
    if shape["heads"] % shape["kv_heads"] != 0:
        raise InvalidValueError(f"{name}: {shape['heads']} query heads are not a multiple of "
                                f"{shape['kv_heads']} KV heads",
                                "GQA groups H_q / H_kv query heads on each KV head; e.g. heads=32,kv_heads=8")
    if shape["head_dim"] not in HEAD_DIMS:
        raise InvalidValueError(f"{name}: head_dim={shape['head_dim']} is not supported",
                                f"use one of {', '.join(map(str, HEAD_DIMS))}")


def lengths(batch: int, length: int, varlen: int) -> list[int]:
    """Per-sequence lengths: all ``length``, or (``varlen=1``) a deterministic ragged spread over [length/2, length]."""
    if not varlen:
        return [length] * batch
    span = max(1, length // 2)
    return [max(1, length - (i * VARLEN_STRIDE) % span) for i in range(batch)]


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence in fp64: q (Lq, Hq, d), k and v (Lk, Hkv, d) -> (out (Lq, Hq, d), lse (Hq, Lq)).

    Causal masking aligns the last query with the last key (query i sees keys j <= i + Lk - Lq), as FlashAttention
    does for Lq != Lk.
    """
    lq, hq, d = q.shape
    lk, hkv = k.shape[0], k.shape[1]
    group = hq // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf = q.double().permute(1, 0, 2)                                     # (Hq, Lq, d)
    kf = k.double().permute(1, 0, 2).repeat_interleave(group, dim=0)     # (Hq, Lk, d)
    vf = v.double().permute(1, 0, 2).repeat_interleave(group, dim=0)
    scores = qf @ kf.transpose(1, 2) * scale                             # (Hq, Lq, Lk)
    if causal:
        allowed = torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
        scores = scores.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)                                # (Hq, Lq)
    out = torch.softmax(scores, dim=-1) @ vf                             # (Hq, Lq, d)
    return out.permute(1, 0, 2).float(), lse.float()


def attention_flops(q_len: int, k_len: int, heads: int, head_dim: int, causal: bool) -> float:
    """4·Lq·Lk·H·d: Q·Kᵀ and P·V are 2·Lq·Lk·d each per head; causal keeps half (the convention of FlashAttention's
    benchmarks, tri-dao/flash-attention benchmarks/benchmark_flash_attention.py)."""
    flops = 4.0 * q_len * k_len * heads * head_dim
    return flops / 2 if causal else flops


def shape_lengths(shape: Shape, key: str) -> list[int]:
    return lengths(shape["batch"], shape[key], shape.get("varlen", 0))


@triton.jit
def online_softmax_step(qk, m_i, l_i):
    """One key block of the online softmax, in base 2 (scores already times log2 e): the block's weights p, the
    factor alpha that rescales what was accumulated before, and the new running max and sum (Milakov & Gimelshein
    2018, "Online normalizer calculation for softmax"). A row with no visible key yet keeps max -inf and sum 0."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
    p = tl.math.exp2(qk - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def finish_softmax(m_i, l_i):
    """The divisor for the accumulated output (1 for a row with no key) and the natural-log log-sum-exp (-inf for
    such a row, with no log2(0) evaluated)."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, -float("inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    return l_safe, lse
