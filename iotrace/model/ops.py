"""The decoder's kernels, two ways: the plugins' Triton launchers (:class:`TritonOps`) or their torch references
(:class:`TorchOps`), behind one interface so the decoder is written once.

Every op writes into buffers the decoder owns (no allocation of results), so a decode step can be captured in a
CUDA graph. :class:`TritonOps` asks each plugin for its config the way ``iotrace run`` does (a tuned config from
``$IOTRACE_TUNED``, else the kernel's default for the card), wraps each launch in the kernel's NVTX range, and can
record the calls of one step (kernel, shape, config) so a trace of that step is read against each call's cost.

The torch path is each kernel's reference formula in the run's dtype (fp32 on a CPU): what the tour and the
check against ``transformers`` run, and what the Triton path is checked against.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from iotrace.errors import InvalidValueError
from iotrace.nvtx_ranges import kernel_range

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["DECODE_GEMM_MAX_M", "KernelCallRecord", "Ops", "TorchOps", "TritonOps", "make_ops"]

#: The decode GEMM's largest M (rows of tokens); above it the tiled GEMM runs.
DECODE_GEMM_MAX_M = 64

_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


@dataclass(frozen=True)
class KernelCallRecord:
    """One launch of a recorded step: the plugin, its shape and dtype, and the config it ran."""

    kernel: str
    shape: dict[str, int]
    dtype: str
    config: dict[str, Any]


class Ops:
    """The decoder's kernel interface. Tensors: activations (tokens, features) row-major; weights (out, in).

    Each public method names the plugin and its shape once, asks :meth:`_config` for the config (recording the call
    inside :meth:`recording`), and hands over to the implementation's ``_``-method.
    """

    #: "torch" or "triton"
    name = ""

    def __init__(self) -> None:
        self._record: list[KernelCallRecord] | None = None
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}

    def _config(self, kernel: str, shape: dict[str, int], dtype: torch.dtype) -> dict[str, Any]:
        record = KernelCallRecord(kernel, dict(shape), _DTYPE_NAMES[dtype], self._choose(kernel, shape, dtype))
        if self._record is not None:
            self._record.append(record)
        return record.config

    def _choose(self, kernel: str, shape: dict[str, int], dtype: torch.dtype) -> dict[str, Any]:
        return {}

    @contextmanager
    def recording(self) -> Iterator[list[KernelCallRecord]]:
        """Record every kernel call made inside the block (kernel, shape, dtype, config)."""
        self._record = []
        try:
            yield self._record
        finally:
            self._record = None

    def range(self, name: str) -> Any:
        """An NVTX range for a phase or layer (nothing on the torch path)."""
        return nullcontext()

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, eps: float,
                residual: torch.Tensor | None = None) -> None:
        """out = RMSNorm(x [+ residual]) · w; with ``residual``, the sum is written back into ``residual``."""
        config = self._config("rmsnorm", {"rows": x.shape[0], "hidden": x.shape[1],
                                          "residual": int(residual is not None)}, x.dtype)
        self._rmsnorm(x, w, out, eps, residual, config)

    def linear(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, swiglu: bool = False) -> None:
        """out = x · wᵀ; with ``swiglu`` w is [gate; up] and out = silu(x·gateᵀ) · (x·upᵀ). Up to
        :data:`DECODE_GEMM_MAX_M` rows run the decode GEMM (SwiGLU in its epilogue), more the tiled GEMM (then the
        SwiGLU kernel)."""
        (m, k), n = x.shape, w.shape[0]
        if m <= DECODE_GEMM_MAX_M:
            config = self._config("gemm-decode", {"M": m, "N": n, "K": k, "residual": 0, "swiglu": int(swiglu)},
                                  x.dtype)
            self._gemm_decode(x, w, out, swiglu, config)
            return
        config = self._config("gemm", {"M": m, "N": n, "K": k, "bias": 0}, x.dtype)
        if not swiglu:
            self._gemm(x, w, out, config)
            return
        # Allocated per call (torch's caching allocator reuses it): a prefill's product is too big to keep.
        gate_up = torch.empty((m, n), dtype=x.dtype, device=x.device)
        self._gemm(x, w, gate_up, config)
        self._swiglu(gate_up, out, self._config("swiglu", {"tokens": m, "ffn": n // 2}, x.dtype))

    def rope(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
             interleaved: bool) -> None:
        """Rotate q (T, H, d) and k (T, H_kv, d) in place, token t at ``positions[t]``."""
        config = self._config("rope", {"tokens": q.shape[0], "heads": q.shape[1], "kv_heads": k.shape[1],
                                       "head_dim": q.shape[2], "interleaved": int(interleaved)}, q.dtype)
        self._rope(q, k, positions, cos_sin, interleaved, config)

    def prefill_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                          max_len: int, out: torch.Tensor) -> None:
        """Causal attention of packed sequences: q (T, H, d), k and v (T, H_kv, d), out (T, H, d)."""
        config = self._config("attention-prefill", {
            "batch": cu_seqlens.numel() - 1, "heads": q.shape[1], "kv_heads": k.shape[1], "head_dim": q.shape[2],
            "seqlen": max_len, "causal": 1, "varlen": 0}, q.dtype)
        self._prefill_attention(q, k, v, cu_seqlens, max_len, out, config)

    def decode_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         context_lens: torch.Tensor, out: torch.Tensor) -> None:
        """One query per sequence, q (B, H, d), over the first context_lens[b] rows of the caches (B, T, H_kv, d).

        The config is chosen for the cache's capacity, not the current length: one config for every step, so a
        captured CUDA graph replays the same launches as the context grows (and a recorded call is costed at the
        capacity; :mod:`iotrace.model.breakdown` costs it at the real context)."""
        config = self._config("attention-decode", {
            "batch": q.shape[0], "heads": q.shape[1], "kv_heads": k_cache.shape[2], "head_dim": q.shape[2],
            "context": k_cache.shape[1], "varlen": 0}, q.dtype)
        self._decode_attention(q, k_cache, v_cache, context_lens, out, config)

    def cached_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         context_lens: torch.Tensor, new_tokens: int, out: torch.Tensor) -> None:
        """``new_tokens`` queries per sequence, q (B·L, H, d), over the first context_lens[b] rows of the caches
        (B, T, H_kv, d), the last L of which are the new tokens: causal with the mask aligned bottom-right (query i
        sees keys up to context − L + i), as FlashAttention aligns it when queries are fewer than keys. The
        prefill kernel runs it (its cu_seqlens_q and cu_seqlens_k differ)."""
        config = self._config("attention-prefill", {
            "batch": q.shape[0] // new_tokens, "heads": q.shape[1], "kv_heads": k_cache.shape[2],
            "head_dim": q.shape[2], "seqlen": new_tokens, "causal": 1, "varlen": 1}, q.dtype)
        self._cached_attention(q, k_cache, v_cache, context_lens, new_tokens, out, config)

    def verify(self, draft: torch.Tensor, lens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
               greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Speculative decoding's verification (the ``draft-verify`` plugin): draft (B, γ) tokens drawn from q
        (B, γ, V), the target's probabilities p (B, γ+1, V), uniforms u (B, γ+1), draft lengths (B,); returns the
        accepted counts and the emitted tokens, (B,) int32 each."""
        config = self._config("draft-verify", {"batch": draft.shape[0], "gamma": draft.shape[1],
                                               "vocab": p.shape[-1], "greedy": int(greedy), "varlen": 1,
                                               "logits": 0}, torch.float32)
        return self._verify(draft, lens, q, p, u, greedy, config)

    def _scratch(self, shape: tuple[int, int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        # The decode step's scratch (the lse it does not use): one per shape, allocated once, so a captured CUDA
        # graph and every later step write the same memory.
        key = (*shape, str(device), dtype)
        if key not in self._buffers:
            self._buffers[key] = torch.empty(shape, dtype=dtype, device=device)
        return self._buffers[key]

    # The implementations.
    def _rmsnorm(self, x, w, out, eps, residual, config) -> None:
        raise NotImplementedError

    def _gemm_decode(self, x, w, out, swiglu, config) -> None:
        raise NotImplementedError

    def _gemm(self, x, w, out, config) -> None:
        raise NotImplementedError

    def _swiglu(self, gate_up, out, config) -> None:
        raise NotImplementedError

    def _rope(self, q, k, positions, cos_sin, interleaved, config) -> None:
        raise NotImplementedError

    def _prefill_attention(self, q, k, v, cu_seqlens, max_len, out, config) -> None:
        raise NotImplementedError

    def _decode_attention(self, q, k_cache, v_cache, context_lens, out, config) -> None:
        raise NotImplementedError

    def _cached_attention(self, q, k_cache, v_cache, context_lens, new_tokens, out, config) -> None:
        raise NotImplementedError

    def _verify(self, draft, lens, q, p, u, greedy, config) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


#: Query rows per block of a long causal prefill in :meth:`TorchOps._attend`. Each block's keys end at a multiple of
#: it; at 512 the blocks' P·V sums came out bit-equal to the whole square's (whose extra terms are zeros) with MKL
#: here, at 256 the first block's did not (a shorter inner dimension, another kernel: last-bit differences).
CAUSAL_BLOCK_ROWS = 512


def _attend_rows(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, causal: bool, offset: int) -> torch.Tensor:
    """softmax(q·kᵀ/√d)·v of (H, Lq, d) queries against (H, Lk, d) keys and values, fp32; with ``causal``, query row i
    sees keys 0 … offset + i."""
    # In place where it is the same arithmetic: a 2,048-token prefill's (H, L, L) scores are 150 MB, and each copy
    # cost more than the softmax (the INT8 KV note's five 2,048-token runs, a third faster, same bits).
    scores = (qh @ kh.transpose(1, 2)).div_(math.sqrt(qh.shape[-1]))
    if causal:
        above = torch.ones(qh.shape[1], kh.shape[1], dtype=torch.bool, device=qh.device).triu_(offset + 1)  # the future
        scores.masked_fill_(above, -math.inf)
    return scores.softmax(-1) @ vh


def _silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    f = gate_up.shape[-1] // 2
    g, u = gate_up[..., :f].float(), gate_up[..., f:].float()
    return g * torch.sigmoid(g) * u


class TorchOps(Ops):
    """Each kernel's reference formula in torch, in the tensors' dtype with fp32 reductions."""

    name = "torch"

    def _rmsnorm(self, x, w, out, eps, residual, config) -> None:
        if residual is not None:
            residual.add_(x)
            x = residual
        xf = x.float()
        out.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float())

    def _gemm_decode(self, x, w, out, swiglu, config) -> None:
        y = x @ w.t()
        out.copy_(_silu_mul(y) if swiglu else y)

    def _gemm(self, x, w, out, config) -> None:
        torch.matmul(x, w.t(), out=out)

    def _swiglu(self, gate_up, out, config) -> None:
        out.copy_(_silu_mul(gate_up))

    def _rope(self, q, k, positions, cos_sin, interleaved, config) -> None:
        from iotrace.kernels.rope import rope_reference

        q.copy_(rope_reference(q, positions, cos_sin, interleaved))
        k.copy_(rope_reference(k, positions, cos_sin, interleaved))

    @staticmethod
    def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        """softmax(q·kᵀ/√d)·v for one sequence: q (Lq, H, d), k and v (Lk, H_kv, d); fp32 scores.

        A causal prefill longer than :data:`CAUSAL_BLOCK_ROWS` queries goes in blocks of that many, each against the
        keys up to its own last row: every row gets the same scores and softmax (the keys past a block's last row
        are masked for all of its rows), for about half the work of the whole (H, Lq, Lk) square and a (H, block,
        Lk) scores tensor instead: the INT8 KV note's five 2,048-token runs (``kv_quality``) took 327 s and take
        151 s on one thread, every figure the same."""
        group = q.shape[1] // k.shape[1]
        qh = q.transpose(0, 1).float()                                      # (H, Lq, d)
        kh = k.transpose(0, 1).float().repeat_interleave(group, dim=0)      # (H, Lk, d)
        vh = v.transpose(0, 1).float().repeat_interleave(group, dim=0)
        lq, lk = q.shape[0], k.shape[0]
        if not causal or lq <= CAUSAL_BLOCK_ROWS:
            return _attend_rows(qh, kh, vh, causal, lk - lq).transpose(0, 1)  # (Lq, H, d)
        out = qh.new_empty(qh.shape[0], lq, vh.shape[-1])
        for start in range(0, lq, CAUSAL_BLOCK_ROWS):
            end = min(start + CAUSAL_BLOCK_ROWS, lq)
            keys = lk - lq + end  # the block's last row sees keys [0, keys)
            out[:, start:end] = _attend_rows(qh[:, start:end], kh[:, :keys], vh[:, :keys], True, keys - (end - start))
        return out.transpose(0, 1)

    def _prefill_attention(self, q, k, v, cu_seqlens, max_len, out, config) -> None:
        bounds = cu_seqlens.tolist()
        for start, end in itertools.pairwise(bounds):
            out[start:end] = self._attend(q[start:end], k[start:end], v[start:end], causal=True)

    def _decode_attention(self, q, k_cache, v_cache, context_lens, out, config) -> None:
        for b, length in enumerate(context_lens.tolist()):
            out[b] = self._attend(q[b:b + 1], k_cache[b, :length], v_cache[b, :length], causal=False)[0]

    def _cached_attention(self, q, k_cache, v_cache, context_lens, new_tokens, out, config) -> None:
        for b, length in enumerate(context_lens.tolist()):
            rows = slice(b * new_tokens, (b + 1) * new_tokens)
            out[rows] = self._attend(q[rows], k_cache[b, :length], v_cache[b, :length], causal=True)

    def _verify(self, draft, lens, q, p, u, greedy, config) -> tuple[torch.Tensor, torch.Tensor]:
        from iotrace.kernels.draft_verify import verify_reference

        return verify_reference(draft, lens, q, p, u, greedy)


def _named_when_profiled(kernel: str, method: Any) -> Any:
    """``method`` inside a ``record_function`` range named ``iotrace/<kernel>`` while a torch profiler records (the
    torch path has no NVTX), so a trace's step waterfall tells attention's matrix products from the weights' (both are
    aten::matmul here); without a profiler only the flag is read (torch.autograd._profiler_enabled, the C flag
    record_function itself consults)."""
    import functools

    @functools.wraps(method)
    def call(self: Ops, *args: Any, **kwargs: Any) -> Any:
        if not torch.autograd._profiler_enabled():
            return method(self, *args, **kwargs)
        with torch.profiler.record_function(f"iotrace/{kernel}"):
            return method(self, *args, **kwargs)

    return call


for _method, _kernel in (("_rmsnorm", "rmsnorm"), ("_gemm_decode", "gemm-decode"), ("_gemm", "gemm"),
                         ("_swiglu", "swiglu"), ("_rope", "rope"), ("_prefill_attention", "attention-prefill"),
                         ("_decode_attention", "attention-decode"), ("_cached_attention", "attention-prefill")):
    setattr(TorchOps, _method, _named_when_profiled(_kernel, getattr(TorchOps, _method)))


class TritonOps(Ops):
    """The plugins' Triton launchers, each with its config for ``card`` (tuned, else the kernel's default), each
    launch inside its kernel's NVTX range."""

    name = "triton"

    def __init__(self, card: Card, nvtx: bool = True) -> None:
        super().__init__()
        self.card, self.nvtx = card, nvtx
        self._configs: dict[tuple[Any, ...], dict[str, Any]] = {}

    def _choose(self, kernel: str, shape: dict[str, int], dtype: torch.dtype) -> dict[str, Any]:
        key = (kernel, tuple(sorted(shape.items())), dtype)
        if key not in self._configs:
            from iotrace.plugins.manager import kernel as spec_of
            from iotrace.tuned import tuned_config

            spec, name = spec_of(kernel), _DTYPE_NAMES[dtype]
            checked = spec.check_shape(shape)
            self._configs[key] = tuned_config(spec, checked, name, self.card) or spec.default_config(
                checked, name, self.card)
        return self._configs[key]

    def range(self, name: str) -> Any:
        import nvtx

        return nvtx.annotate(f"iotrace/{name}", domain="iotrace", color="orange") if self.nvtx else nullcontext()

    def _in_range(self, kernel: str, config: dict[str, Any]) -> Any:
        return kernel_range(kernel, config) if self.nvtx else nullcontext()

    def _rmsnorm(self, x, w, out, eps, residual, config) -> None:
        from iotrace.kernels.rmsnorm import EPS, rmsnorm

        if not math.isclose(eps, EPS, rel_tol=1e-3):
            raise InvalidValueError(f"the model's rms_norm_eps {eps} is not the rmsnorm kernel's {EPS}",
                                    "run with --kernels torch, or give the rmsnorm kernel the epsilon")
        with self._in_range("rmsnorm", config):
            # The kernel writes the sum s = x + r into `residual` itself: the residual stream is updated in place.
            rmsnorm(x, w, out, residual, residual, config)

    def _gemm_decode(self, x, w, out, swiglu, config) -> None:
        from iotrace.kernels.gemm_decode import gemm_decode

        with self._in_range("gemm-decode", config):
            gemm_decode(x, w, out, None, swiglu, config)

    def _gemm(self, x, w, out, config) -> None:
        from iotrace.kernels.gemm import gemm

        with self._in_range("gemm", config):
            gemm(x, w.t(), out, None, config)

    def _swiglu(self, gate_up, out, config) -> None:
        from iotrace.kernels.swiglu import swiglu

        with self._in_range("swiglu", config):
            swiglu(gate_up, out, config)

    def _rope(self, q, k, positions, cos_sin, interleaved, config) -> None:
        from iotrace.kernels.rope import apply_rope

        with self._in_range("rope", config):
            apply_rope(q, k, positions, cos_sin, interleaved, config)

    def _prefill_attention(self, q, k, v, cu_seqlens, max_len, out, config) -> None:
        from iotrace.kernels.attention_prefill import flash_prefill

        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
        with self._in_range("attention-prefill", config):
            flash_prefill(q, k, v, cu_seqlens, cu_seqlens, max_len, out, lse, True, config, validate=False)

    def _decode_attention(self, q, k_cache, v_cache, context_lens, out, config) -> None:
        from iotrace.kernels.attention_decode import flash_decode

        lse = self._scratch((q.shape[0], q.shape[1]), torch.float32, q.device)
        with self._in_range("attention-decode", config):
            flash_decode(q, k_cache, v_cache, context_lens, out, lse, config, validate=False)

    def _cached_attention(self, q, k_cache, v_cache, context_lens, new_tokens, out, config) -> None:
        from iotrace.kernels.attention_prefill import flash_prefill

        # The kernel takes packed keys: one sequence's cache rows are already contiguous (T, H_kv, d); more are
        # gathered. Its causal mask is aligned bottom-right (shift = k_len − q_len), what the new tokens need.
        batch = context_lens.shape[0]
        lens = context_lens.tolist()
        if batch == 1:
            k, v = k_cache[0, :lens[0]], v_cache[0, :lens[0]]
        else:
            k = torch.cat([k_cache[b, :n] for b, n in enumerate(lens)])
            v = torch.cat([v_cache[b, :n] for b, n in enumerate(lens)])
        cu_q = torch.arange(0, batch * new_tokens + 1, new_tokens, dtype=torch.int32, device=q.device)
        cu_k = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=q.device)
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
        with self._in_range("attention-prefill", config):
            flash_prefill(q, k, v, cu_q, cu_k, new_tokens, out, lse, True, config, validate=False)

    def _verify(self, draft, lens, q, p, u, greedy, config) -> tuple[torch.Tensor, torch.Tensor]:
        from iotrace.kernels.draft_verify import verify

        accepted = torch.empty(draft.shape[0], dtype=torch.int32, device=draft.device)
        token = torch.empty_like(accepted)
        with self._in_range("draft-verify", config):
            verify(draft.int(), lens.int(), q.float().contiguous(), p.float().contiguous(), u.float().contiguous(),
                   accepted, token, greedy, config, validate=False)
        return accepted, token


def make_ops(kind: str, card: Card | None, nvtx: bool = True) -> Ops:
    """``"torch"`` or ``"triton"`` (which needs the card the configs are chosen for)."""
    if kind == "torch":
        return TorchOps()
    if card is None:
        raise ValueError("the Triton ops need a card")
    return TritonOps(card, nvtx)
