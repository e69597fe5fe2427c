"""What the prefill and decode attention kernels share: shape rules, ragged lengths, the torch reference.

Attention here is softmax(Q·Kᵀ / sqrt(d)) · V per head, with grouped-query attention (GQA): query head h reads
KV head h // (H_q / H_kv) (Ainslie et al. 2023, "GQA"). The log-sum-exp of each row's scores,
lse = log Σ_j exp(s_j), is an output too: it is what split-KV decode and the backward pass combine on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from iotrace.errors import InvalidValueError
from iotrace.plugins.spec import Shape

__all__ = ["HEAD_DIMS", "VARLEN_STRIDE", "check_heads", "lengths", "reference_attention"]

#: Head dims the kernels are built and tested for (Llama-3 and Gemma-2 use 128; many small models 64).
HEAD_DIMS = (64, 128)

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
