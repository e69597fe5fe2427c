"""The walls beside a model run's figures: identities 1-3 applied to one decode step and one prefill.

A decode step of a batch of B sequences at context depth S streams every weight once and each sequence's KV cache
once: bytes/step = W + B · KV(S) (identity 1 with identity 3's KV term; activations are left out, they are
kilobytes). The decode wall is then B · bandwidth / bytes-per-step tokens per second. A prefill of S tokens costs
about 2 · N · S FLOPs (identity 2), so its wall is peak / (2 · N) tokens per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from iotrace.identities import kv_cache_bytes, prefill_tokens_per_s

__all__ = ["DecodeWall", "decode_step_bytes", "decode_wall", "prefill_wall"]


def decode_step_bytes(weight_bytes: float, batch: int, depth: int, layers: int, kv_heads: int, head_dim: int,
                      kv_bytes_per_value: float, kv_scale_bytes: float = 0.0) -> float:
    """Bytes one decode step must read: every weight once, plus each sequence's KV cache at ``depth`` tokens."""
    kv = kv_cache_bytes(layers, kv_heads, head_dim, depth, kv_bytes_per_value, batch, kv_scale_bytes) \
        if depth > 0 else 0.0
    return float(weight_bytes) + kv


@dataclass(frozen=True)
class DecodeWall:
    """Identity 1 for one decode configuration: the bytes a step reads and the tok/s that bandwidth allows."""

    step_bytes: float
    bandwidth_bytes_per_s: float
    batch: int
    #: where the bandwidth came from: "cardbook <card>" or "measured copy"
    bandwidth_source: str

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.bandwidth_bytes_per_s / self.step_bytes

    def fraction(self, measured_tokens_per_s: float) -> float:
        """The measured decode rate as a fraction of the wall."""
        return measured_tokens_per_s / self.tokens_per_s


def decode_wall(step_bytes: float, batch: int, bandwidth_bytes_per_s: float, source: str) -> DecodeWall:
    return DecodeWall(float(step_bytes), float(bandwidth_bytes_per_s), int(batch), source)


def prefill_wall(peak_flop_per_s: float, params: float) -> float:
    """Identity 2: the compute-bound prefill rate in tok/s, peak / (2 · N)."""
    return prefill_tokens_per_s(peak_flop_per_s, params)
