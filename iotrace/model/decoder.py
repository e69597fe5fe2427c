"""A Llama decoder made of iotrace's kernels: no ``torch.nn`` modules, no torch attention on the Triton path.

Per layer (the Llama architecture, Touvron et al. 2023, with the residual add fused into the next RMSNorm as vLLM's
``fused_add_rms_norm`` does): RMSNorm → QKV projection (one fused matrix) → RoPE on q and k in place → K and V
written into the cache → attention (the prefill kernel over the prompt, the split-KV decode kernel per token) →
O projection → add + RMSNorm → gate/up projection with SwiGLU → down projection → add + RMSNorm of the next layer
(or the final norm) → LM head on each sequence's last position.

The KV cache is contiguous, (layers, batch, capacity, kv_heads, head_dim) for K and for V, the layout the decode
kernel reads. A decode step reads its inputs from buffers the decoder owns (tokens, positions, context lengths) and
writes the logits into one, so on a GPU it can be captured once as a CUDA graph and replayed per token
(:meth:`Decoder.graphed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from iotrace.errors import InvalidValueError

if TYPE_CHECKING:
    from iotrace.model.ops import Ops
    from iotrace.model.weights import LlamaWeights

__all__ = ["Decoder"]


@dataclass
class _StepBuffers:
    tokens: torch.Tensor      # (B,) int64: the token each sequence feeds this step
    positions: torch.Tensor   # (B,) int64: its position (the context length before the step)
    context: torch.Tensor     # (B,) int32: the context after the step (positions + 1)
    x: torch.Tensor           # (B, D) the residual stream
    h: torch.Tensor           # (B, D) the normalised stream
    qkv: torch.Tensor         # (B, (H + 2 H_kv) d)
    attn: torch.Tensor        # (B, H, d)
    o: torch.Tensor           # (B, D)
    act: torch.Tensor         # (B, F)
    logits: torch.Tensor      # (B, V)


class Decoder:
    """Greedy or sampled decoding of ``batch`` sequences of up to ``capacity`` tokens with one :class:`Ops`."""

    def __init__(self, weights: LlamaWeights, ops: Ops, batch: int, capacity: int) -> None:
        from iotrace.kernels.rope import rope_cache

        c = weights.config
        self.w, self.ops, self.batch, self.capacity, self.config = weights, ops, batch, capacity, c
        device, dtype = weights.device, weights.dtype
        if capacity > c.context_length:
            raise InvalidValueError(f"{capacity} tokens of context exceed {c.name}'s {c.context_length}",
                                    "shorten the prompt, --gen-tokens or --depth")
        shape = (c.layers, batch, capacity, c.kv_heads, c.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.lens = torch.zeros(batch, dtype=torch.int64, device=device)
        self.cos_sin = rope_cache(capacity, c.head_dim, c.rope_theta, device)
        qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
        self.buf = _StepBuffers(
            tokens=torch.zeros(batch, dtype=torch.int64, device=device),
            positions=torch.zeros(batch, dtype=torch.int64, device=device),
            context=torch.ones(batch, dtype=torch.int32, device=device),
            x=torch.empty(batch, c.hidden, dtype=dtype, device=device),
            h=torch.empty(batch, c.hidden, dtype=dtype, device=device),
            qkv=torch.empty(batch, qkv, dtype=dtype, device=device),
            attn=torch.empty(batch, c.heads, c.head_dim, dtype=dtype, device=device),
            o=torch.empty(batch, c.hidden, dtype=dtype, device=device),
            act=torch.empty(batch, c.intermediate, dtype=dtype, device=device),
            logits=torch.empty(batch, c.vocab, dtype=dtype, device=device))
        self._graph: torch.cuda.CUDAGraph | None = None

    # --- the layer stack, shared by prefill and decode ---------------------------------------------------------

    def _split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = self.config
        n_q, n_kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
        rows = qkv.shape[0]
        return (qkv[:, :n_q].view(rows, c.heads, c.head_dim),
                qkv[:, n_q:n_q + n_kv].view(rows, c.kv_heads, c.head_dim),
                qkv[:, n_q + n_kv:].view(rows, c.kv_heads, c.head_dim))

    def _layers(self, x: torch.Tensor, h: torch.Tensor, qkv: torch.Tensor, attn: torch.Tensor, o: torch.Tensor,
                act: torch.Tensor, positions: torch.Tensor, attend) -> None:
        """Run every layer on the rows of ``x`` (the residual stream, updated in place); ``h`` ends as the final
        norm's output. ``attend(layer, q, k, v, out)`` stores K and V and computes attention."""
        ops, w, eps = self.ops, self.w, self.config.rms_eps
        ops.rmsnorm(x, w.layers[0].attn_norm, h, eps)
        for i, layer in enumerate(w.layers):
            with ops.range(f"layer {i}"):
                ops.linear(h, layer.wqkv, qkv)
                q, k, v = self._split(qkv)
                ops.rope(q, k, positions, self.cos_sin, self.config.rope_interleaved)
                attend(i, q, k, v, attn)
                ops.linear(attn.view(attn.shape[0], -1), layer.wo, o)
                ops.rmsnorm(o, layer.ffn_norm, h, eps, residual=x)
                ops.linear(h, layer.w_gate_up, act, swiglu=True)
                ops.linear(act, layer.w_down, o)
                following = w.layers[i + 1].attn_norm if i + 1 < len(w.layers) else w.norm
                ops.rmsnorm(o, following, h, eps, residual=x)

    def _empty(self, *shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=self.w.dtype, device=self.w.device)

    def _activations(self, rows: int) -> tuple[torch.Tensor, ...]:
        """The per-row buffers of a multi-token forward (prefill, extend): h, o, qkv, act, attn."""
        c = self.config
        return (self._empty(rows, c.hidden), self._empty(rows, c.hidden),
                self._empty(rows, (c.heads + 2 * c.kv_heads) * c.head_dim), self._empty(rows, c.intermediate),
                self._empty(rows, c.heads, c.head_dim))

    # --- prefill -----------------------------------------------------------------------------------------------

    def prefill(self, ids: torch.Tensor, all_logits: bool = False) -> torch.Tensor:
        """Run the prompts ``ids`` (B, L) from position 0 into an empty cache; returns the logits (B, V) of each
        sequence's last position, or (B, L, V) with ``all_logits``."""
        c, device = self.config, self.w.device
        batch, length = ids.shape
        if batch != self.batch or length > self.capacity:
            raise InvalidValueError(f"a prefill of {tuple(ids.shape)} does not fit {self.batch} sequences of "
                                    f"{self.capacity} positions", "allocate the decoder for the prompt")
        rows = batch * length
        ids = ids.to(device)
        positions = torch.arange(length, device=device).repeat(batch)
        cu = torch.arange(0, rows + 1, length, dtype=torch.int32, device=device)
        x = self.w.embed.index_select(0, ids.reshape(-1))
        h, o, qkv, act, attn = self._activations(rows)

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
            self.k_cache[i, :, :length] = k.view(batch, length, c.kv_heads, c.head_dim)
            self.v_cache[i, :, :length] = v.view(batch, length, c.kv_heads, c.head_dim)
            self.ops.prefill_attention(q, k, v, cu, length, out)

        with self.ops.range("prefill"):
            self._layers(x, h, qkv, attn, o, act, positions, attend)
            self.lens.fill_(length)
            if all_logits:
                logits = self._empty(rows, c.vocab)
                self.ops.linear(h, self.w.lm_head, logits)
                return logits.view(batch, length, c.vocab)
            last = h.view(batch, length, c.hidden)[:, -1].contiguous()
            logits = self._empty(batch, c.vocab)
            self.ops.linear(last, self.w.lm_head, logits)
            return logits

    # --- decode ------------------------------------------------------------------------------------------------

    def _step(self) -> None:
        """One decode step on the buffers: tokens at positions → logits; K and V appended at the positions."""
        b = self.buf
        rows = torch.arange(self.batch, device=b.tokens.device)
        torch.index_select(self.w.embed, 0, b.tokens, out=b.x)

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
            self.k_cache[i].index_put_((rows, b.positions), k)
            self.v_cache[i].index_put_((rows, b.positions), v)
            self.ops.decode_attention(q, self.k_cache[i], self.v_cache[i], b.context, out)

        with self.ops.range("decode step"):
            self._layers(b.x, b.h, b.qkv, b.attn, b.o, b.act, b.positions, attend)
            self.ops.linear(b.h, self.w.lm_head, b.logits)

    def decode(self, tokens: torch.Tensor, eager: bool = False) -> torch.Tensor:
        """Feed one token per sequence (B,) at the current lengths; returns the logits (B, V) (a view of the
        decoder's buffer, overwritten by the next step). ``eager`` launches the kernels even when a graph is
        captured (to trace or record them)."""
        if int(self.lens.max()) >= self.capacity:
            raise InvalidValueError(f"the KV cache of {self.capacity} positions is full",
                                    "allocate the decoder with room for every generated token")
        b = self.buf
        b.tokens.copy_(tokens)
        b.positions.copy_(self.lens)
        b.context.copy_(self.lens + 1)
        if self._graph is not None and not eager:
            self._graph.replay()
        else:
            self._step()
        self.lens += 1
        return b.logits

    # --- extend and rollback (speculative decoding) -------------------------------------------------------------

    def extend(self, ids: torch.Tensor) -> torch.Tensor:
        """Run ``ids`` (B, L) as L new tokens per sequence at the current lengths: K and V written at positions
        lens..lens+L-1, each new token attending to the cache and causally to the new tokens before it (the
        bottom-right aligned mask); returns the logits (B, L, V) of every new position. The target's verification
        forward of speculative decoding: γ draft tokens plus one in one prefill-shaped pass."""
        c, device = self.config, self.w.device
        batch, length = ids.shape
        starts = self.lens.clone()
        if batch != self.batch or int(starts.max()) + length > self.capacity:
            raise InvalidValueError(f"extending {self.batch} sequences at {starts.tolist()} by {length} tokens "
                                    f"overflows the cache of {self.capacity} positions",
                                    "allocate the decoder with room for the draft tokens")
        rows = batch * length
        ids = ids.to(device)
        positions = (starts[:, None] + torch.arange(length, device=device)[None, :]).reshape(-1)
        seq = torch.arange(batch, device=device).repeat_interleave(length)
        x = self.w.embed.index_select(0, ids.reshape(-1))
        h, o, qkv, act, attn = self._activations(rows)
        contexts = starts + length

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
            self.k_cache[i].index_put_((seq, positions), k)
            self.v_cache[i].index_put_((seq, positions), v)
            self.ops.cached_attention(q, self.k_cache[i], self.v_cache[i], contexts, length, out)

        with self.ops.range("extend"):
            self._layers(x, h, qkv, attn, o, act, positions, attend)
            self.lens.copy_(contexts)
            logits = self._empty(rows, c.vocab)
            self.ops.linear(h, self.w.lm_head, logits)
            return logits.view(batch, length, c.vocab)

    def rollback(self, lens: torch.Tensor | int) -> None:
        """Set each sequence's length back to ``lens`` (the tokens a verification rejected are forgotten: their K
        and V stay in the cache past the length, where no attention reads them, and the next write overwrites
        them)."""
        target = torch.as_tensor(lens, dtype=torch.int64, device=self.lens.device).expand_as(self.lens)
        if bool((target < 0).any()) or bool((target > self.lens).any()):
            raise InvalidValueError(f"cannot roll lengths {self.lens.tolist()} back to {target.tolist()}",
                                    "a rollback only forgets tokens already in the cache")
        self.lens.copy_(target)

    def graphed(self) -> bool:
        """Capture the decode step as a CUDA graph (on a GPU; a no-op returning False elsewhere). Call after one
        eager step so every kernel is compiled; each :meth:`decode` then replays it."""
        if self.w.device.type != "cuda":
            return False
        # The warm-up step writes K and V at the next positions, which the first real step overwrites.
        self.buf.positions.copy_(self.lens)
        self.buf.context.copy_(self.lens + 1)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._step()  # warm-up on the side stream, as torch.cuda.graphs recommends before capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        self._graph = graph
        return True

    def reset(self) -> None:
        """Forget every sequence (the cache is overwritten by the next prefill)."""
        self.lens.zero_()
