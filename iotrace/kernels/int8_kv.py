"""INT8 KV cache: quantise K and V rows as they are appended, and decode attention that reads the int8 cache.

Symmetric quantisation, x ≈ scale · x_q with x_q = round(x / scale) in [−127, 127] and scale = absmax / 127
(Dettmers et al. 2022, "LLM.int8()", absmax quantisation). Scales are per token and per KV head for V; for K the
shape's ``key_scales`` picks the scheme:

- 0: per token and KV head, like V;
- 1: per channel of each KV head: keys carry a few outlier channels many times the rest (Liu et al. 2024, "KIVI",
  section 3), which a per-token scale spreads over every channel;
- 2: per channel, and the ``KEPT_CHANNELS`` channels of each KV head with the largest calibrated range kept in the
  input's 16-bit type beside the int8 cache (their int8 slots hold 0): the mixed-precision decomposition of
  LLM.int8() (section 3.2) applied to keys, as KVQuant keeps outliers in a 16-bit side store (Hooper et al. 2024,
  section 3.4). Per-channel int8 still leaves each outlier channel 1/127 of its range, and those channels dominate
  the scores; keeping them is what lifts the outlier data to the 0.9999 cosine target (tests/test_int8_kv.py).
- 3: per token and KV head like 0, with the ``KEPT_CHANNELS`` widest calibrated channels kept in 16 bits and left
  out of the token's absmax: the scheme real keys need. On SmolLM2-135M over 2,048 tokens of text as one context
  (iotrace/model/kv_quality.py) static per-channel scales calibrated on the first 128 tokens clip 3.2% of later
  key values (RoPE turns each channel pair through angles the prompt has not reached, and content drifts), so
  schemes 1 and 2 fall to attention-output cosine 0.81 in the worst layer and perplexity +11%; per-token scales
  adapt to every token, but one outlier channel sets the whole row's step (0.99962 in the worst layer); keeping
  the 4 widest channels out of it gives >= 0.99992 in every layer and perplexity within 0.04%, for 8 more bytes
  per token and KV head.

Per-channel scales and the kept channels are fixed when the cache is created (calibrated on the prompt) and reused
for every appended token (values beyond a per-channel range clamp to ±127).

The cache is contiguous (batch, max_context, H_kv, d) or paged (pages, PAGE, H_kv, d) with a block table
(batch, pages per sequence) of page ids, as serving engines keep it (Kwon et al. 2023, "PagedAttention").

Decode reads int8 K and V and folds the scales into the math: s_j = (q ⊙ k_scale) · k_q_j · k_scale_j (one
of the two scales is 1), and o = Σ_j (p_j · v_scale_j) · v_q_j / Σ_j p_j; it is the split-KV kernel of
attention_decode.py (same combine kernel) with int8 loads.

Cost (identity 3 and 4): KV bytes per token fall from 2·H_kv·d·2 (fp16) to 2·H_kv·d·1 + 2·H_kv·4 (int8 plus fp32
scales per token and head): 1.94x fewer at d = 128, which is the decode speedup's ceiling; key_scales=3 adds the
4 kept channels' 16-bit values, 2·H_kv·d·1 + H_kv·(8 + 4·2): 1.88x fewer at d = 128, 1.78x at d = 64.
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
    shape_lengths,
)
from iotrace.kernels.attention_decode import (
    DecodeShapes,
    _group_pad,
    combine_launch,
    decode_reference,
    default_splits,
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
    TritonLaunch,
    TritonUnit,
)

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["KEPT_CHANNELS", "KEY_MIXED", "KEY_PER_CHANNEL", "KEY_PER_TOKEN", "KEY_SCHEMES", "KEY_TOKEN_KEPT", "PAGE",
           "Int8DecodeSpec", "append_int8", "channel_scales_for", "decode_int8", "kept_values", "key_side_bytes",
           "outlier_channels_for", "quantize_reference"]

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
#: Tokens per page of the paged cache (vLLM's default block size is 16).
PAGE = 16
#: Outlier channels per KV head in the `outliers=1` data, and how much larger they are: 20x is the magnitude of the
#: outlier key channels KIVI reports (its figure 2), where a per-token scale loses the other channels.
OUTLIER_CHANNELS, OUTLIER_SCALE = 4, 20.0
#: The key schemes (the shape's ``key_scales``): see the module docstring.
KEY_PER_TOKEN, KEY_PER_CHANNEL, KEY_MIXED, KEY_TOKEN_KEPT = 0, 1, 2, 3
#: Each scheme's name, as tables print it.
KEY_SCHEMES = {KEY_PER_TOKEN: "per-token", KEY_PER_CHANNEL: "per-channel", KEY_MIXED: "per-channel+kept",
               KEY_TOKEN_KEPT: "per-token+kept"}
#: Channels per KV head kept in 16 bits by the mixed scheme: KIVI's figure 2 shows a handful of outlier channels
#: per head; 4 of 128 costs 8 bytes per token and head (a power of two, as tl.arange needs).
KEPT_CHANNELS = 4


# --- quantise on append -------------------------------------------------------------------------------------


@triton.jit
def _append_kernel(
    x_ptr, cache_ptr, scale_ptr, lens_ptr, table_ptr, channel_scale_ptr, kept_idx_ptr, kept_ptr,
    stride_xb, stride_xt, stride_xh, stride_cp, stride_cs, stride_ch, stride_sp, stride_ss, stride_sh,
    stride_kp, stride_ks, stride_kh, stride_tb, T_NEW,
    HEAD_DIM: tl.constexpr, PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, PER_CHANNEL: tl.constexpr,
    KEPT: tl.constexpr,
):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    seq = (pid // T_NEW).to(tl.int64)
    t = pid % T_NEW
    pos = tl.load(lens_ptr + seq) + t
    if PAGED:
        page = tl.load(table_ptr + seq * stride_tb + pos // PAGE_SIZE).to(tl.int64)
        slot = pos % PAGE_SIZE
    else:  # the contiguous cache is one "page" per sequence
        page = seq
        slot = pos
    offs_d = tl.arange(0, HEAD_DIM)
    row = x_ptr + seq * stride_xb + t * stride_xt + head * stride_xh
    x = tl.load(row + offs_d).to(tl.float32)
    if KEPT > 0:
        offs_k = tl.arange(0, KEPT)
        kept = tl.load(kept_idx_ptr + head * KEPT + offs_k)
        is_kept = tl.sum((offs_d[:, None] == kept[None, :]).to(tl.int32), 1) > 0
    if PER_CHANNEL:
        scale = tl.load(channel_scale_ptr + head * HEAD_DIM + offs_d)
        x_q = tl.floor(tl.div_rn(x, scale) + 0.5)
    else:
        # Correctly rounded division (a GPU's `/` compiles to approximate div): bit-equal to torch's quantiser. Kept
        # channels (key_scales=3) are left out of the absmax: their range is what the 16-bit store is for.
        if KEPT > 0:  # noqa: SIM108
            absmax = tl.max(tl.where(is_kept, 0.0, tl.abs(x)), 0)
        else:
            absmax = tl.max(tl.abs(x), 0)
        scale = tl.where(absmax > 0, tl.div_rn(absmax, 127.0), 1.0)
        x_q = tl.floor(tl.div_rn(x, scale) + 0.5)
        tl.store(scale_ptr + page * stride_sp + slot * stride_ss + head * stride_sh, scale)
    x_q = tl.minimum(tl.maximum(x_q, -127.0), 127.0)
    if KEPT > 0:  # the kept channels go to the 16-bit side store, and their int8 slots hold 0
        tl.store(kept_ptr + page * stride_kp + slot * stride_ks + head * stride_kh + offs_k, tl.load(row + kept))
        x_q = tl.where(is_kept, 0.0, x_q)
    tl.store(cache_ptr + page * stride_cp + slot * stride_cs + head * stride_ch + offs_d, x_q.to(tl.int8))


def _slot_view(cache: torch.Tensor) -> tuple[int, int, int]:
    return cache.stride(0), cache.stride(1), cache.stride(2)


def append_int8(x: torch.Tensor, cache: torch.Tensor, scales: torch.Tensor | None, lens: torch.Tensor,
                table: torch.Tensor | None = None, channel_scales: torch.Tensor | None = None,
                kept_channels: torch.Tensor | None = None, kept_cache: torch.Tensor | None = None) -> None:
    """Quantise new rows x (B, T_new, H_kv, d) into ``cache`` at positions lens[b] .. lens[b] + T_new − 1.

    ``cache`` is (B, T_max, H_kv, d) int8, or (pages, PAGE, H_kv, d) with ``table`` (B, pages per sequence);
    ``scales`` is the matching (…, H_kv) fp32 per-token scale array, or None with ``channel_scales`` (H_kv, d).
    The kept-channel schemes (key_scales 2 and 3) add ``kept_channels`` (H_kv, KEPT_CHANNELS) int32 and
    ``kept_cache`` (…, H_kv, KEPT_CHANNELS) in x's dtype, laid out like ``cache``.
    """
    batch, t_new, heads, d = x.shape
    if cache.dtype != torch.int8 or cache.shape[2:] != (heads, d):
        raise InvalidValueError(f"int8 cache {tuple(cache.shape)} {cache.dtype} does not hold rows {tuple(x.shape)}",
                                "the cache is int8 with the same KV heads and head dim as the rows")
    capacity = cache.shape[1] if table is None else table.shape[1] * PAGE
    if int(lens.max()) + t_new > capacity:
        raise InvalidValueError(f"appending {t_new} tokens to a sequence of {int(lens.max())} overflows the cache of "
                                f"{capacity} positions", "allocate a longer cache (or more pages) first")
    if table is not None and (int(table.max()) >= cache.shape[0] or int(table.min()) < 0):
        raise InvalidValueError(f"the block table names pages outside 0..{cache.shape[0] - 1}", "check the table")
    kept = _check_kept(kept_channels, kept_cache, channel_scales, scales, cache, x.dtype)
    per_channel = channel_scales is not None
    scale_arg = scales if scales is not None else channel_scales
    s_strides = _slot_view(scales) if scales is not None else (0, 0, 0)
    _append_kernel[(batch * t_new, heads)](
        x, cache, scale_arg, lens, table if table is not None else lens,
        channel_scales if per_channel else scale_arg,
        kept_channels if kept else lens, kept_cache if kept else cache,
        x.stride(0), x.stride(1), x.stride(2), *_slot_view(cache), *s_strides,
        *(_slot_view(kept_cache) if kept else (0, 0, 0)), table.stride(0) if table is not None else 0, t_new,
        HEAD_DIM=d, PAGED=table is not None, PAGE_SIZE=PAGE, PER_CHANNEL=per_channel, KEPT=kept, num_warps=1)


def _check_kept(kept_channels: torch.Tensor | None, kept_cache: torch.Tensor | None,
                channel_scales: torch.Tensor | None, token_scales: torch.Tensor | None, cache: torch.Tensor,
                dtype: torch.dtype) -> int:
    """How many channels per head the kept-channel schemes keep in 16 bits (0 when neither is in use)."""
    if kept_channels is None and kept_cache is None:
        return 0
    if kept_channels is None or kept_cache is None or (channel_scales is None and token_scales is None):
        raise InvalidValueError("kept channels need the channel indices, their 16-bit store and the key scales",
                                "pass kept_channels and kept_cache with per-channel (key_scales=2) or per-token "
                                "(key_scales=3) key scales")
    heads, kept = kept_channels.shape
    if kept_cache.shape != (*cache.shape[:2], heads, kept) or kept_cache.dtype != dtype:
        raise InvalidValueError(f"kept-channel store {tuple(kept_cache.shape)} {kept_cache.dtype} does not match the "
                                f"cache {tuple(cache.shape[:3])} with {kept} kept channels of {dtype}",
                                "allocate it as (…cache slots, H_kv, kept) in the rows' dtype")
    if int(kept_channels.min()) < 0 or int(kept_channels.max()) >= cache.shape[3]:
        raise InvalidValueError(f"kept channels name channels outside 0..{cache.shape[3] - 1}",
                                "use outlier_channels_for(channel_scales)")
    return kept


def quantize_reference(x: torch.Tensor, channel_scales: torch.Tensor | None = None,
                       kept_channels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The same quantiser in torch: x (…, H_kv, d) -> (int8 values, per-token-head scales or None).

    With ``kept_channels`` (H_kv, kept) the kept channels' int8 values are 0 (their values go to the side store,
    :func:`kept_values`) and, with per-token scales (key_scales=3), they are left out of the token's absmax."""
    xf = x.float()
    at = None if kept_channels is None else kept_channels.long().expand(*x.shape[:-1], -1)
    if channel_scales is not None:
        x_q = torch.floor(xf / channel_scales.float() + 0.5).clamp(-127, 127).to(torch.int8)
        if at is not None:
            x_q.scatter_(-1, at, 0)
        return x_q, None
    if at is not None:
        xf = xf.scatter(-1, at, 0.0)
    absmax = xf.abs().amax(-1)
    scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    return torch.floor(xf / scale[..., None] + 0.5).clamp(-127, 127).to(torch.int8), scale


def kept_values(x: torch.Tensor, kept_channels: torch.Tensor) -> torch.Tensor:
    """The kept channels of x (…, H_kv, d) in x's dtype: (…, H_kv, kept), the mixed scheme's side store."""
    return x.gather(-1, kept_channels.long().expand(*x.shape[:-1], -1))


def outlier_channels_for(channel_scales: torch.Tensor, kept: int = KEPT_CHANNELS) -> torch.Tensor:
    """The ``kept`` channels of each KV head with the largest calibrated range, (H_kv, kept) int32, ascending."""
    return channel_scales.topk(kept, dim=-1).indices.sort(-1).values.to(torch.int32)


def channel_scales_for(prompt_keys: torch.Tensor) -> torch.Tensor:
    """Per-channel key scales calibrated on a prompt's keys (…, H_kv, d): absmax over the tokens / 127."""
    absmax = prompt_keys.float().reshape(-1, *prompt_keys.shape[-2:]).abs().amax(0)
    return torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))


# --- decode over the int8 cache -----------------------------------------------------------------------------


@triton.jit
def _decode_int8_kernel(
    q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, kc_ptr, kidx_ptr, kk_ptr, lens_ptr, table_ptr, po_ptr, plse_ptr,
    stride_qb, stride_qh, stride_cp, stride_cs, stride_ch, stride_sp, stride_ss, stride_sh,
    stride_kp, stride_ks, stride_kh, stride_tb,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
    KV_HEADS, GROUP, qk_scale,
    HEAD_DIM: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, PER_CHANNEL: tl.constexpr, KEPT: tl.constexpr,
    KEPT_PAD: tl.constexpr, UPCAST: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    seq = (pid_bh // KV_HEADS).to(tl.int64)
    kv_head = pid_bh % KV_HEADS
    length = tl.load(lens_ptr + seq)
    chunk = tl.cdiv(tl.cdiv(length, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, length)
    rows = tl.arange(0, GROUP_PAD)
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=row_ok[:, None],
                other=0.0).to(tl.float32)
    if KEPT > 0:  # the query's kept channels, unscaled, padded with zeros to the 16 columns tl.dot needs
        offs_k = tl.arange(0, KEPT_PAD)
        kept = tl.load(kidx_ptr + kv_head * KEPT + offs_k, mask=offs_k < KEPT, other=0)
        q_kept = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + kept[None, :],
                         mask=row_ok[:, None] & (offs_k < KEPT)[None, :], other=0.0)
    if PER_CHANNEL:  # fold the per-channel key scales into q once
        q = q * tl.load(kc_ptr + kv_head * HEAD_DIM + offs_d)[None, :]
    m_i = tl.full((GROUP_PAD,), -float("inf"), tl.float32)
    l_i = tl.zeros((GROUP_PAD,), tl.float32)
    acc = tl.zeros((GROUP_PAD, HEAD_DIM), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        key_ok = offs_n < hi
        if PAGED:
            page = tl.load(table_ptr + seq * stride_tb + offs_n // PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)
            slot = offs_n % PAGE_SIZE
        else:
            page = seq + tl.zeros_like(offs_n).to(tl.int64)
            slot = offs_n
        base = page * stride_cp + slot * stride_cs + kv_head * stride_ch
        k = tl.load(k_ptr + base[None, :] + offs_d[:, None], mask=key_ok[None, :], other=0).to(tl.float32)
        v = tl.load(v_ptr + base[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0).to(tl.float32)
        scale_at = page * stride_sp + slot * stride_ss + kv_head * stride_sh
        v_scale = tl.load(vs_ptr + scale_at, mask=key_ok, other=0.0)
        # Tensor-core dots in the query's 16-bit type: int8 values are exact in fp16 and bf16 (fp32 operands would
        # run as TF32 on a GPU). The interpreter has no bf16 arithmetic (numpy lacks the type) and its bf16 dot
        # multiplies raw bit patterns, so it stays in fp32 there.
        if UPCAST:  # noqa: SIM108
            qk = tl.dot(q, k)
        else:
            qk = tl.dot(q.to(q_ptr.dtype.element_ty), k.to(q_ptr.dtype.element_ty))
        if not PER_CHANNEL:
            qk = qk * tl.load(ks_ptr + scale_at, mask=key_ok, other=0.0)[None, :]
        if KEPT > 0:  # the 16-bit channels' scores: one more (zero-padded) tensor-core dot
            kept_at = page * stride_kp + slot * stride_ks + kv_head * stride_kh
            kk = tl.load(kk_ptr + kept_at[None, :] + offs_k[:, None], mask=key_ok[None, :] & (offs_k < KEPT)[:, None],
                         other=0.0)
            if UPCAST:
                qk += tl.dot(q_kept.to(tl.float32), kk.to(tl.float32))
            else:
                qk += tl.dot(q_kept, kk)
        qk = tl.where(key_ok[None, :], qk * qk_scale, -float("inf"))
        p, alpha, m_new, l_i = online_softmax_step(qk, m_i, l_i)
        weights = p * v_scale[None, :]  # the V scale folded into the softmax weights
        if UPCAST:
            acc = acc * alpha[:, None] + tl.dot(weights, v)
        else:
            acc = tl.dot(weights.to(q_ptr.dtype.element_ty), v.to(q_ptr.dtype.element_ty), acc * alpha[:, None])
        m_i = m_new
    l_safe, lse = finish_softmax(m_i, l_i)
    tl.store(po_ptr + seq * stride_pb + heads[:, None] * stride_ph + split * stride_ps + offs_d[None, :],
             acc / l_safe[:, None], mask=row_ok[:, None])
    tl.store(plse_ptr + seq * stride_lb + heads * stride_lh + split, lse, mask=row_ok)


def decode_int8(q: torch.Tensor, k_q: torch.Tensor, v_q: torch.Tensor, k_scales: torch.Tensor | None,
                v_scales: torch.Tensor, context_lens: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                config: Mapping[str, int], table: torch.Tensor | None = None,
                channel_scales: torch.Tensor | None = None, validate: bool = True,
                kept_channels: torch.Tensor | None = None, kept_cache: torch.Tensor | None = None) -> None:
    """Decode attention of q (B, H_q, d) over an int8 cache (contiguous, or paged with ``table``).

    ``validate`` reads the lengths back to check them; a timed or graph-captured launch passes False. The mixed key
    scheme passes ``kept_channels`` and ``kept_cache`` as :func:`append_int8` wrote them.
    """
    heads, d = q.shape[1], q.shape[2]
    kv_heads = k_q.shape[2]
    check_heads("attention-decode-int8", {"heads": heads, "kv_heads": kv_heads, "head_dim": d})
    capacity = k_q.shape[1] if table is None else table.shape[1] * PAGE
    if validate and (int(context_lens.max()) > capacity or int(context_lens.min()) < 1):
        raise InvalidValueError(f"context lengths {int(context_lens.min())}..{int(context_lens.max())} fall outside "
                                f"the cache of {capacity} positions", "each length must lie in 1..the cache length")
    if validate:
        _check_kept(kept_channels, kept_cache, channel_scales, k_scales, k_q, q.dtype)
    for launch in _decode_int8_launches(q, k_q, v_q, k_scales, v_scales, context_lens, out, lse, config, table,
                                        channel_scales, kept_channels, kept_cache, interpreting()):
        launch()


def _decode_int8_launches(q: torch.Tensor, k_q: torch.Tensor, v_q: torch.Tensor, k_scales: torch.Tensor | None,
                          v_scales: torch.Tensor, context_lens: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                          config: Mapping[str, int], table: torch.Tensor | None, channel_scales: torch.Tensor | None,
                          kept_channels: torch.Tensor | None, kept_cache: torch.Tensor | None,
                          interpreter: bool) -> list[TritonLaunch]:
    """The one statement of an int8 decode call's two launches (split over the int8 cache, then the combine of
    attention_decode.py), allocating the partial results on q's device: :func:`decode_int8` calls it,
    :meth:`Int8DecodeSpec.compile_units` compiles it."""
    batch, heads, d = q.shape
    kv_heads = k_q.shape[2]
    splits, group = config["NUM_SPLITS"], heads // kv_heads
    partial_o = torch.empty(batch, heads, splits, d, dtype=torch.float32, device=q.device)
    partial_lse = torch.empty(batch, heads, splits, dtype=torch.float32, device=q.device)
    per_channel = channel_scales is not None
    kept = 0 if kept_channels is None else kept_channels.shape[1]
    # A pointer the constexprs leave unread gets a tensor of the same type, and its strides 0.
    cache_strides = dict(zip(("stride_cp", "stride_cs", "stride_ch"), _slot_view(k_q), strict=True))
    scale_strides = dict(zip(("stride_sp", "stride_ss", "stride_sh"), _slot_view(v_scales), strict=True))
    kept_strides = dict(zip(("stride_kp", "stride_ks", "stride_kh"),
                            _slot_view(kept_cache) if kept else (0, 0, 0), strict=True))
    args = {"q_ptr": q, "k_ptr": k_q, "v_ptr": v_q, "ks_ptr": v_scales if per_channel else k_scales,
            "vs_ptr": v_scales, "kc_ptr": channel_scales if per_channel else v_scales,
            "kidx_ptr": kept_channels if kept else context_lens, "kk_ptr": kept_cache if kept else q,
            "lens_ptr": context_lens, "table_ptr": table if table is not None else context_lens,
            "po_ptr": partial_o, "plse_ptr": partial_lse, "stride_qb": q.stride(0), "stride_qh": q.stride(1),
            **cache_strides, **scale_strides, **kept_strides,
            "stride_tb": table.stride(0) if table is not None else 0,
            "stride_pb": partial_o.stride(0), "stride_ph": partial_o.stride(1), "stride_ps": partial_o.stride(2),
            "stride_lb": partial_lse.stride(0), "stride_lh": partial_lse.stride(1),
            "KV_HEADS": kv_heads, "GROUP": group, "qk_scale": LOG2E / math.sqrt(d)}
    constexprs = {"HEAD_DIM": d, "GROUP_PAD": _group_pad(group), "BLOCK_N": config["BLOCK_N"], "NUM_SPLITS": splits,
                  "PAGED": table is not None, "PAGE_SIZE": PAGE, "PER_CHANNEL": per_channel, "KEPT": kept,
                  "KEPT_PAD": _dot_pad(kept), "UPCAST": interpreter and q.dtype != torch.float16}
    split = TritonLaunch(_decode_int8_kernel, (batch * kv_heads, splits, 1), args, constexprs, config["num_warps"],
                         config["num_stages"])
    return [split, combine_launch(partial_o, partial_lse, out, lse)]


# --- spec ---------------------------------------------------------------------------------------------------


def _dot_pad(kept: int) -> int:
    """The kept channels' width padded for tl.dot, whose operands are at least 16 wide (Triton's dot lowering)."""
    return max(16, triton.next_power_of_2(kept))


def key_side_bytes(scheme: int, element_bytes: int) -> int:
    """Bytes per token and KV head beside the int8 K and V values: the fp32 V scale, plus the fp32 K scale
    (per-token keys) and/or the 16-bit kept channels; per-channel scales are per head, not per token."""
    kept = KEPT_CHANNELS * element_bytes
    return 4 + {KEY_PER_TOKEN: 4, KEY_PER_CHANNEL: 0, KEY_MIXED: kept, KEY_TOKEN_KEPT: 4 + kept}[scheme]


def _to_pages(rows: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """(B, T, …) rows scattered into the (pages, PAGE, …) pool at the slots the block table names (others 0)."""
    index = _paged_rows(table, rows.shape[1]).reshape(-1)
    pool = torch.zeros(table.numel() * PAGE, *rows.shape[2:], dtype=rows.dtype)
    pool[index] = rows.reshape(-1, *rows.shape[2:])
    return pool.reshape(table.numel(), PAGE, *rows.shape[2:])


def _paged_rows(table: torch.Tensor, tokens: int) -> torch.Tensor:
    """(B, tokens) row numbers of the paged cache viewed as (pages·PAGE, H_kv, d): token t of sequence b sits at
    row table[b, t // PAGE]·PAGE + t % PAGE."""
    rows = table.long()[:, :, None] * PAGE + torch.arange(PAGE)
    return rows.reshape(table.shape[0], -1)[:, :tokens]


def _model_presets() -> dict[str, Shape]:
    presets: dict[str, Shape] = {}
    for key, context, batch, paged in itertools.product(("llama-3-8b", "gemma-2-27b"), (8192, 32768), (1, 32),
                                                        (0, 1)):
        m = model(key)
        presets[f"{key}-ctx{context // 1024}k-b{batch}" + ("-paged" if paged else "")] = {
            "batch": batch, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim, "context": context,
            "varlen": int(batch > 1), "paged": paged, "key_scales": KEY_TOKEN_KEPT, "outliers": 1}
    return presets


class Int8DecodeSpec(DecodeShapes):
    """Decode over an int8 cache. make_inputs quantises with :func:`quantize_reference` (the torch twin of
    :func:`append_int8`, which the tests hold to it); ``quality`` reports the error against fp32 attention over
    the unquantised K and V."""

    name: ClassVar[str] = "attention-decode-int8"
    summary: ClassVar[str] = ("split-KV decode over an int8 KV cache (key_scales: 0 per token, 1 per channel, "
                              "2 per channel + 16-bit outlier channels, 3 per token + 16-bit outlier channels; "
                              "paged)")
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16")
    shape_keys: ClassVar[tuple[str, ...]] = ("batch", "heads", "kv_heads", "head_dim", "context", "varlen", "paged",
                                             "key_scales", "outliers")
    shape_flags: ClassVar[tuple[str, ...]] = ("varlen", "paged", "key_scales", "outliers")
    flag_values: ClassVar[dict[str, tuple[int, ...]]] = {"key_scales": tuple(KEY_SCHEMES)}
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    default_shape: ClassVar[Shape] = {"batch": 3, "heads": 8, "kv_heads": 2, "head_dim": 64, "context": 333,
                                      "varlen": 1, "paged": 1, "key_scales": KEY_TOKEN_KEPT, "outliers": 1}

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        b, t, hkv, d = shape["batch"], shape["context"], shape["kv_heads"], shape["head_dim"]
        k, v = (torch.randn(b, t, hkv, d, generator=gen) for _ in range(2))
        if shape["outliers"]:  # a few key channels 20x the rest, as real keys have
            channels = torch.randperm(d, generator=gen)[:OUTLIER_CHANNELS]
            k[..., channels] *= OUTLIER_SCALE
        dt = _TORCH_DTYPES[dtype]
        k, v = k.to(dt), v.to(dt)
        lens = torch.tensor(shape_lengths(shape, "context"), dtype=torch.int32)
        inputs = {"q": torch.randn(b, shape["heads"], d, generator=gen).to(dt), "k": k, "v": v,
                  "context_lens": lens}
        scheme = shape["key_scales"]
        calibrated = channel_scales_for(k) if scheme != KEY_PER_TOKEN else None
        channel = calibrated if scheme in (KEY_PER_CHANNEL, KEY_MIXED) else None
        kept = outlier_channels_for(calibrated) if scheme in (KEY_MIXED, KEY_TOKEN_KEPT) else None
        if shape["paged"]:  # every sequence's pages scattered over one pool, in a shuffled order
            pages = math.ceil(t / PAGE)
            inputs["table"] = torch.randperm(b * pages, generator=gen).reshape(b, pages).to(torch.int32)
        for name, x, scales, kept_at in (("k", k, channel, kept), ("v", v, None, None)):
            q_vals, s_vals = quantize_reference(x, scales, kept_at)
            stored = {f"{name}_q": q_vals, f"{name}_scale": s_vals,
                      f"{name}_kept": kept_values(x, kept_at) if kept_at is not None else None}
            for key, value in stored.items():
                if value is not None:
                    inputs[key] = _to_pages(value, inputs["table"]) if shape["paged"] else value
        if channel is not None:
            inputs["k_channel_scale"] = channel
        if kept is not None:
            inputs["k_kept_channels"] = kept
        return {n: x.to(device) for n, x in inputs.items()}

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """The same split-KV decode over a 16-bit cache of the same shape (its default config on this GPU): the
        speedup the int8 cache buys, whose ceiling is the ratio of bytes per token."""
        from iotrace.cards import detect
        from iotrace.kernels.attention_decode import DecodeSpec

        spec = DecodeSpec()
        plain = spec.check_shape({k: shape[k] for k in spec.shape_keys})
        plain_inputs = spec.make_inputs(plain, dtype, str(inputs["q"].device), seed=0)
        plain_outputs = spec.make_outputs(plain_inputs)
        config = spec.default_config(plain, dtype, detect())
        return {f"{dtype} cache decode": lambda: spec.launch(plain_inputs, plain_outputs, config)}

    def _dequantized(self, inputs: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
        """The (B, T, H_kv, d) cache the kernel sees, dequantised, in sequence order."""
        values = inputs[f"{name}_q"].float().cpu()
        if f"{name}_scale" in inputs:
            values = values * inputs[f"{name}_scale"].float().cpu()[..., None]
        else:
            values = values * inputs["k_channel_scale"].float().cpu()
        if f"{name}_kept" in inputs:  # the kept channels' int8 slots are 0: their 16-bit values replace them
            at = inputs["k_kept_channels"].long().cpu().expand(*values.shape[:2], -1, -1)
            values = values.scatter(-1, at, inputs[f"{name}_kept"].float().cpu())
        if "table" in inputs:
            index = _paged_rows(inputs["table"].cpu(), inputs["k"].shape[1])
            values = values.reshape(-1, *values.shape[2:])[index]
        return values

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Attention over the dequantised cache: what the kernel must compute exactly (up to rounding)."""
        return decode_reference(inputs["q"], self._dequantized(inputs, "k"), self._dequantized(inputs, "v"),
                                inputs["context_lens"])

    def quality(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """The int8 cache's cost in accuracy: output against fp32 attention over the original K and V."""
        exact = decode_reference(inputs["q"], inputs["k"].float(), inputs["v"].float(),
                                 inputs["context_lens"])["out"].double()
        got = outputs["out"].double().cpu()
        cosine = torch.nn.functional.cosine_similarity(got.reshape(-1), exact.reshape(-1), dim=0)
        return {"cosine": float(cosine), "max_abs_err": float((got - exact).abs().max()),
                "rel_err": float((got - exact).norm() / exact.norm())}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        decode_int8(inputs["q"], inputs["k_q"], inputs["v_q"], inputs.get("k_scale"), inputs["v_scale"],
                    inputs["context_lens"], outputs["out"], outputs["lse"], config, inputs.get("table"),
                    inputs.get("k_channel_scale"), validate=False, kept_channels=inputs.get("k_kept_channels"),
                    kept_cache=inputs.get("k_kept"))

    def cost(self, shape: Shape, dtype: str) -> Cost:
        lens = shape_lengths(shape, "context")
        h, hkv, d, e = shape["heads"], shape["kv_heads"], shape["head_dim"], DTYPE_BYTES[dtype]
        flops = sum(attention_flops(1, n, h, d, causal=False) for n in lens)
        scale_bytes = hkv * key_side_bytes(shape["key_scales"], e)
        kv_bytes = sum(n * (2 * hkv * d + scale_bytes) for n in lens)
        nbytes = float(kv_bytes + shape["batch"] * h * (2 * d * e + 4))
        return Cost(flops, nbytes, DTYPE_PEAK[dtype],
                    "FLOPs = Σ_b 4·L_b·H·d; bytes = Σ_b L_b·(2·H_kv·d [int8 K, V] + H_kv·side) + B·H·(2·d·e + 4), "
                    "side = per token and head: 4 (V scale) + 4 (K scale, key_scales 0 and 3) + kept·e "
                    "(key_scales 2 and 3)")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        return [{"BLOCK_N": bn, "NUM_SPLITS": s, "num_warps": w, "num_stages": st}
                for bn, s, w, st in itertools.product((16, 32, 64, 128), (1, 2, 4, 8, 16, 32, 64), (2, 4, 8),
                                                      (1, 2, 3))
                if s * bn <= max(shape["context"], bn)]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        return {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2,
                "NUM_SPLITS": default_splits(shape["batch"], shape["kv_heads"], shape["context"], 64, card.sm_count)}

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        # The tensors make_inputs and make_outputs lay out, on the meta device: the int8 cache and its per-token
        # scales contiguous (B, T, H_kv, ...) or paged (pages, PAGE, H_kv, ...) with a (B, pages per sequence) table.
        b, t, h, hkv, d = shape["batch"], shape["context"], shape["heads"], shape["kv_heads"], shape["head_dim"]
        dt, scheme = _TORCH_DTYPES[dtype], shape["key_scales"]

        def meta(*size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.empty(*size, dtype=dtype, device="meta")

        pages = math.ceil(t / PAGE)
        slots = (b * pages, PAGE) if shape["paged"] else (b, t)
        q = meta(b, h, d, dtype=dt)
        launches = _decode_int8_launches(
            q, meta(*slots, hkv, d, dtype=torch.int8), meta(*slots, hkv, d, dtype=torch.int8),
            meta(*slots, hkv) if scheme in (KEY_PER_TOKEN, KEY_TOKEN_KEPT) else None, meta(*slots, hkv),
            meta(b, dtype=torch.int32), torch.empty_like(q), meta(b, h), config,
            meta(b, pages, dtype=torch.int32) if shape["paged"] else None,
            meta(hkv, d) if scheme in (KEY_PER_CHANNEL, KEY_MIXED) else None,
            meta(hkv, KEPT_CHANNELS, dtype=torch.int32) if scheme in (KEY_MIXED, KEY_TOKEN_KEPT) else None,
            meta(*slots, hkv, KEPT_CHANNELS, dtype=dt) if scheme in (KEY_MIXED, KEY_TOKEN_KEPT) else None,
            interpreter=False)
        return [launches[0].unit()]  # the split kernel; the combine step is attention-decode's


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [Int8DecodeSpec()]
