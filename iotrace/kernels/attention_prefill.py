"""FlashAttention prefill forward: O = softmax(Q·Kᵀ / sqrt(d)) · V with an online softmax, and the log-sum-exp.

Sequences of different lengths sit packed one after another (the cumulative-length "varlen" layout of serving
engines and flash_attn_varlen_func): q is (total_q, H_q, d), k and v (total_k, H_kv, d), and cu_seqlens holds
where each sequence starts. Each program owns BLOCK_M queries of one (sequence, head); it streams the keys in
BLOCK_N blocks, keeping a running max m, sum l and accumulator in fp32 (Dao et al. 2022, "FlashAttention",
Algorithm 1; exp2 with log2(e) folded into the scale as in the Triton tutorial 06-fused-attention). Causal
programs stop at their diagonal, so they read about half the keys.

Cost (identity 4): FLOPs = Σ_seq 4·L²·H_q·d (halved for causal); minimum bytes = read Q, K, V once, write O
and the lse. At L = 4096, d = 128 that is ~1000 FLOP/B: compute-bound on every card.
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

__all__ = ["PrefillSpec", "flash_prefill"]

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@triton.jit
def _prefill_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr,
    # strides (token, head); the head dim is contiguous
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lh,
    # sizes and parameters
    H, GROUP, TOTAL_K, qk_scale,
    # meta-parameters
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_TMA: tl.constexpr, UPCAST: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    seq = pid_bh // H
    head = pid_bh % H
    kv_head = head // GROUP
    # 64-bit token offsets: token · stride reaches 2^31 for long packed batches (1M tokens x 32 heads x 128).
    q_start = tl.load(cu_q_ptr + seq).to(tl.int64)
    q_len = (tl.load(cu_q_ptr + seq + 1) - q_start).to(tl.int32)
    k_start = tl.load(cu_k_ptr + seq).to(tl.int64)
    k_len = (tl.load(cu_k_ptr + seq + 1) - k_start).to(tl.int32)
    if pid_m * BLOCK_M >= q_len:  # the grid covers the longest sequence; shorter ones end early
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < q_len
    q = tl.load(q_ptr + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    shift = k_len - q_len  # causal: query i sees keys j <= i + shift (bottom-right aligned, as FlashAttention)
    hi = k_len
    if CAUSAL:
        hi = tl.minimum(k_len, (pid_m + 1) * BLOCK_M + shift)
    if USE_TMA:
        # Tensor descriptors over the packed (tokens, heads·d) K and V: TMA on sm_90 streams the key blocks.
        k_desc = tl.make_tensor_descriptor(k_ptr, shape=[TOTAL_K, stride_kt], strides=[stride_kt, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_ptr, shape=[TOTAL_K, stride_vt], strides=[stride_vt, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < k_len
        if USE_TMA:
            # Rows past this sequence belong to the next one (or are zero past the tensor): masked below.
            row = (k_start + start_n).to(tl.int32)  # TMA coordinates are 32-bit
            k = tl.trans(k_desc.load([row, kv_head * HEAD_DIM]))
            v = v_desc.load([row, kv_head * HEAD_DIM])
        else:
            k = tl.load(k_ptr + (k_start + offs_n)[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None],
                        mask=key_ok[None, :], other=0.0)
            v = tl.load(v_ptr + (k_start + offs_n)[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
                        mask=key_ok[:, None], other=0.0)
        # The interpreter has no bf16 arithmetic (numpy lacks the type): its tl.dot on bf16 multiplies the raw bit
        # patterns, so it upcasts to fp32 there; a constexpr `if` keeps the upcast out of GPU kernels entirely.
        if UPCAST:  # noqa: SIM108
            qk = tl.dot(q.to(tl.float32), k.to(tl.float32))
        else:
            qk = tl.dot(q, k)
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + shift)
        qk = tl.where(visible, qk * qk_scale, -float("inf"))
        p, alpha, m_new, l_i = online_softmax_step(qk, m_i, l_i)
        if UPCAST:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32))
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    l_safe, lse = finish_softmax(m_i, l_i)
    out = acc / l_safe[:, None]
    tl.store(o_ptr + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptr + head * stride_lh + q_start + offs_m, lse, mask=row_ok)


def _tma_allocator(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def flash_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  cu_seqlens_k: torch.Tensor, max_seqlen_q: int, out: torch.Tensor, lse: torch.Tensor,
                  causal: bool, config: Mapping[str, int], validate: bool = True) -> None:
    """Packed (varlen) attention forward into ``out`` (total_q, H_q, d) and ``lse`` (H_q, total_q), fp32 lse.

    ``validate`` reads cu_seqlens back to check them; a timed or graph-captured launch passes False.
    """
    total_q, heads, head_dim = q.shape
    total_k, kv_heads = k.shape[0], k.shape[1]
    if k.shape != v.shape or k.shape[2] != head_dim or out.shape != q.shape or tuple(lse.shape) != (heads, total_q):
        raise InvalidValueError(f"attention shapes do not agree: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                                f"v {tuple(v.shape)}, out {tuple(out.shape)}, lse {tuple(lse.shape)}",
                                "q and out are (total_q, H_q, d), k and v (total_k, H_kv, d), lse (H_q, total_q)")
    check_heads("attention-prefill", {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim})
    if cu_seqlens_q.numel() != cu_seqlens_k.numel() or (validate and (
            int(cu_seqlens_q[-1]) != total_q or int(cu_seqlens_k[-1]) != total_k)):
        raise InvalidValueError("cu_seqlens do not match the packed tensors",
                                "cu_seqlens_q ends at total_q and cu_seqlens_k at total_k, one entry per sequence + 1")
    if config.get("USE_TMA") and not (k.is_contiguous() and v.is_contiguous()):
        raise InvalidValueError("the TMA prefill needs contiguous K and V", "use USE_TMA=0")
    if config.get("USE_TMA") and not interpreting():
        triton.set_allocator(_tma_allocator)
    _prefill_launch(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, out, lse, causal, config, interpreting())()


def _prefill_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, out: torch.Tensor, lse: torch.Tensor, causal: bool,
                    config: Mapping[str, int], interpreter: bool) -> TritonLaunch:
    """The one statement of a prefill launch: :func:`flash_prefill` calls it, :meth:`PrefillSpec.compile_units`
    compiles it."""
    heads, head_dim = q.shape[1], q.shape[2]
    total_k, kv_heads = k.shape[0], k.shape[1]
    batch = cu_seqlens_q.numel() - 1
    # (sequence, head) on axis 0 (up to 2^31 - 1 programs); query blocks on axis 1, which CUDA caps at 65535.
    grid = (batch * heads, triton.cdiv(max_seqlen_q, config["BLOCK_M"]), 1)
    args = {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": out, "lse_ptr": lse, "cu_q_ptr": cu_seqlens_q,
            "cu_k_ptr": cu_seqlens_k, "stride_qt": q.stride(0), "stride_qh": q.stride(1), "stride_kt": k.stride(0),
            "stride_kh": k.stride(1), "stride_vt": v.stride(0), "stride_vh": v.stride(1), "stride_ot": out.stride(0),
            "stride_oh": out.stride(1), "stride_lh": lse.stride(0), "H": heads, "GROUP": heads // kv_heads,
            "TOTAL_K": total_k, "qk_scale": LOG2E / math.sqrt(head_dim)}
    constexprs = {"CAUSAL": causal, "HEAD_DIM": head_dim, "BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"],
                  "USE_TMA": bool(config.get("USE_TMA")), "UPCAST": interpreter and q.dtype != torch.float16}
    return TritonLaunch(_prefill_kernel, grid, args, constexprs, config["num_warps"], config["num_stages"])


def _cu_seqlens(lens: list[int], device: str) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=device)


def _model_presets() -> dict[str, Shape]:
    presets: dict[str, Shape] = {}
    for key, (phase, batch, seqlen) in itertools.product(
            ("llama-3-8b", "gemma-2-27b"), (("prefill-2k", 1, 2048), ("prefill-8k", 1, 8192),
                                            ("prefill-2k-b8-varlen", 8, 2048))):
        m = model(key)
        presets[f"{key}-{phase}"] = {"batch": batch, "heads": m.heads, "kv_heads": m.kv_heads,
                                     "head_dim": m.head_dim, "seqlen": seqlen, "causal": 1,
                                     "varlen": int(phase.endswith("varlen"))}
    # The throughput anchor of FlashAttention papers and the Triton tutorial: B4 H32 S4096 d128.
    for causal in (0, 1):
        presets[f"b4-h32-s4096-d128{'-causal' if causal else ''}"] = {
            "batch": 4, "heads": 32, "kv_heads": 32, "head_dim": 128, "seqlen": 4096, "causal": causal, "varlen": 0}
    return presets


class PrefillSpec(KernelSpec):
    name: ClassVar[str] = "attention-prefill"
    summary: ClassVar[str] = "FlashAttention forward: causal/non-causal, GQA, varlen batches, lse; TMA on sm_90"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16")
    shape_keys: ClassVar[tuple[str, ...]] = ("batch", "heads", "kv_heads", "head_dim", "seqlen", "causal", "varlen")
    shape_flags: ClassVar[tuple[str, ...]] = ("causal", "varlen")
    presets: ClassVar[dict[str, Shape]] = _model_presets()
    interpreter_budget: ClassVar[int] = 400_000
    default_shape: ClassVar[Shape] = {"batch": 3, "heads": 4, "kv_heads": 2, "head_dim": 64, "seqlen": 97,
                                      "causal": 1, "varlen": 1}

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        out = super().check_shape(shape)
        check_heads(self.name, out)
        return out

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        """Work grows as batch·heads·L²: keep d and the GQA ratio (what the kernel specialises on), shrink the rest."""
        if shape["batch"] * shape["heads"] * shape["seqlen"] ** 2 <= max_elements:
            return dict(shape)
        group = shape["heads"] // shape["kv_heads"]
        small = {**shape, "batch": min(shape["batch"], 2), "kv_heads": min(shape["kv_heads"], 2)}
        small["heads"] = small["kv_heads"] * group
        limit = max(33, math.isqrt(max_elements // (small["batch"] * small["heads"])))
        small["seqlen"] = min(shape["seqlen"], limit | 1)  # odd: ragged against every block
        return small

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        lens = shape_lengths(shape, "seqlen")
        total, t = sum(lens), _TORCH_DTYPES[dtype]

        def packed(heads: int) -> torch.Tensor:
            return torch.randn(total, heads, shape["head_dim"], generator=gen).to(device=device, dtype=t)

        # `causal` rides along as a 0-d CPU tensor: the launch needs it and the contract passes tensors only.
        return {"q": packed(shape["heads"]), "k": packed(shape["kv_heads"]), "v": packed(shape["kv_heads"]),
                "cu_seqlens": _cu_seqlens(lens, device), "causal": torch.tensor(shape["causal"]),
                "max_seqlen": torch.tensor(max(lens))}

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """torch SDPA with the flash backend on the same packed sequences viewed as (B, H, S, d); only for
        equal-length batches (a ragged batch has no dense view)."""
        if shape["varlen"]:
            return {}
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention

        b, s = shape["batch"], shape["seqlen"]
        q, k, v = (inputs[n].view(b, s, -1, shape["head_dim"]).transpose(1, 2) for n in ("q", "k", "v"))
        causal, gqa = bool(shape["causal"]), shape["heads"] != shape["kv_heads"]

        def sdpa() -> object:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        return {"torch SDPA (flash)": sdpa}

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        q = inputs["q"]
        return {"out": torch.empty_like(q),
                "lse": torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=q.device)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cu = inputs["cu_seqlens"].tolist()
        outs, lses = [], []
        for start, end in itertools.pairwise(cu):
            o, lse = reference_attention(inputs["q"][start:end].cpu(), inputs["k"][start:end].cpu(),
                                         inputs["v"][start:end].cpu(), bool(inputs["causal"]))
            outs.append(o)
            lses.append(lse)
        return {"out": torch.cat(outs), "lse": torch.cat(lses, dim=1)}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        # max_seqlen and causal ride as 0-d CPU tensors: no device read, so the launch is capturable in a graph.
        cu = inputs["cu_seqlens"]
        flash_prefill(inputs["q"], inputs["k"], inputs["v"], cu, cu, int(inputs["max_seqlen"]), outputs["out"],
                      outputs["lse"], bool(inputs["causal"]), config, validate=False)

    def tolerance(self, dtype: str) -> Tolerance:
        # P is rounded to the input type before P·V (as FlashAttention does): fp16 2^-11, bf16 2^-8 relative.
        return {"fp16": Tolerance(4e-3, 4e-3), "bf16": Tolerance(2.5e-2, 2.5e-2)}[self.check_dtype(dtype)]

    def cost(self, shape: Shape, dtype: str) -> Cost:
        lens = shape_lengths(shape, "seqlen")
        h, hkv, d, e = shape["heads"], shape["kv_heads"], shape["head_dim"], DTYPE_BYTES[dtype]
        flops = sum(attention_flops(n, n, h, d, bool(shape["causal"])) for n in lens)
        tokens = sum(lens)
        nbytes = float(tokens * (2 * h * d * e + 2 * hkv * d * e + 4 * h))
        return Cost(flops, nbytes, DTYPE_PEAK[dtype],
                    "FLOPs = Σ 4·L²·H·d (÷2 causal); bytes = Σ L·(2·H·d·e [Q, O] + 2·H_kv·d·e [K, V] + 4·H [lse])")

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        tma = [False, True] if card.sm_limits.cc >= (9, 0) else [False]
        return [{"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s, "USE_TMA": t}
                for bm, bn, w, s, t in itertools.product((32, 64, 128), (32, 64, 128), (4, 8), (1, 2, 3, 4), tma)
                if not (bm == 32 and w == 8)]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        # Tile sizes of the Triton tutorial 06-fused-attention forward; fewer stages where shared memory is 99 KB.
        cc = card.sm_limits.cc
        if cc >= (9, 0):
            return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8 if shape["head_dim"] == 128 else 4,
                    "num_stages": 3, "USE_TMA": False}
        if cc == (8, 0):  # 128-row tiles spill on sm_80 (255 registers, 64 B at d = 128): halve them
            return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "USE_TMA": False}
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "USE_TMA": False}

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        # The packed tensors make_inputs and make_outputs lay out, on the meta device: (tokens, heads, d) q, k, v
        # and out, (heads, tokens) lse, one cu_seqlens for queries and keys (prefill attends within each sequence).
        lens = shape_lengths(shape, "seqlen")
        total, d, t = sum(lens), shape["head_dim"], _TORCH_DTYPES[dtype]
        q = torch.empty(total, shape["heads"], d, dtype=t, device="meta")
        k = torch.empty(total, shape["kv_heads"], d, dtype=t, device="meta")
        cu = torch.empty(shape["batch"] + 1, dtype=torch.int32, device="meta")
        lse = torch.empty(shape["heads"], total, dtype=torch.float32, device="meta")
        return [_prefill_launch(q, k, torch.empty_like(k), cu, cu, max(lens), torch.empty_like(q), lse,
                                bool(shape["causal"]), config, interpreter=False).unit()]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [PrefillSpec()]
