"""The walls of a serving point (issue 44): what the memory bandwidth allows b streams at once, and the prefill's floor.

A decode step of b streams reads every weight once and each stream's own KV cache (identities 1 and 3), so the
tokens per second in all are at most ``b · B / (N·q + b · KV bytes at the context)`` and each stream's at most
``B / (N·q + b · KV)``: batching shares the weights' read, not the caches'. A point's measured figures sit beside
those: ``output_throughput`` against the first, the median stream's decode rate (``1 / TPOT``) against the second.
``output_throughput`` counts the whole run (prefills and queueing too), so its share of a pure-decode wall is a floor
on how close the decode steps came. The b of a closed loop is its concurrency; of an open loop, the mean number of
requests in flight (Little's law: the summed request latencies over the run's duration).

The prefill's floor for TTFT is identity 2 on a card (``2 · N · S`` FLOPs at the card's peak); a CPU has no peak in
the CardBook, so its points carry no prefill wall and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iotrace.identities import kv_cache_bytes

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["ServedWeights", "batch_of", "point_walls", "wall_curve"]


@dataclass(frozen=True)
class ServedWeights:
    """What a server's decode step reads, as far as its engine and flags say: the weights' bytes and the KV cache's
    bytes per value (and where each figure came from)."""

    label: str
    weight_bytes: float
    kv_bytes_per_value: float
    layers: int
    kv_heads: int
    head_dim: int
    params: float
    basis: str

    def step_bytes(self, batch: float, context: int) -> float:
        """Identity 1's bytes of a step of ``batch`` streams (fractional for an open loop's mean) at ``context``
        tokens each: the weights once, each stream's KV cache (identity 3)."""
        return self.weight_bytes + batch * kv_cache_bytes(self.layers, self.kv_heads, self.head_dim, context,
                                                          self.kv_bytes_per_value)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "weight_bytes": self.weight_bytes, "kv_bytes_per_value": self.kv_bytes_per_value,
                "basis": self.basis}


def batch_of(point: dict[str, Any]) -> float | None:
    """The streams a point's decode steps shared: a closed loop's concurrency, else the mean requests in flight
    (Little's law over the completed requests); None for a point with nothing completed."""
    if point.get("request_rate") == "inf" and point.get("max_concurrency"):
        return float(point["max_concurrency"])
    latencies = [t for t, error in zip(point.get("latencies") or [], point.get("errors") or [], strict=False)
                 if t is not None and not error]
    duration = point.get("duration") or 0.0
    return sum(latencies) / duration if latencies and duration > 0 else None


def point_walls(point: dict[str, Any], weights: ServedWeights, context: int, bandwidth: float | None,
                bandwidth_source: str, card: Card | None, prompt_tokens: float | None) -> dict[str, Any]:
    """The decode wall at the point's batch (in all and per stream, with the measured shares) and the prefill wall
    for TTFT, as JSON; a wall that cannot be drawn is ``{"none": why}``."""
    batch = batch_of(point)
    out: dict[str, Any] = {"batch": batch, "context": context}
    if bandwidth is None or batch is None:
        out["decode"] = {"none": "no bandwidth for this server's machine (give --card for a --url server)"
                         if bandwidth is None else "no request completed"}
    else:
        step = weights.step_bytes(batch, context)
        in_all, per_user = batch * bandwidth / step, bandwidth / step
        measured, user = point.get("output_throughput"), point.get("output_token_throughput_per_user")
        fraction = measured / in_all if measured else None
        user_fraction = user / per_user if user else None
        # A rate above its wall is no share of it: the bytes or the bandwidth do not describe this server (the
        # report's rule for a step faster than its wall), and the table says so instead of printing over 100%.
        above = max(fraction or 0.0, user_fraction or 0.0) > 1.0
        out["decode"] = {"tok_s": in_all, "per_user_tok_s": per_user, "bytes_per_step": step,
                         "bandwidth_gbs": bandwidth / 1e9, "bandwidth_source": bandwidth_source,
                         "fraction": None if above else fraction, "per_user_fraction": None if above else user_fraction,
                         "no_fraction": (f"measured above the wall ({100 * max(fraction or 0, user_fraction or 0):.0f}%"
                                         f"): {weights.label} at {bandwidth / 1e9:.1f} GB/s does not describe what "
                                         "this server reads") if above else None}
    if card is None:
        out["prefill"] = {"none": "a CPU has no peak FLOP/s in the CardBook: no prefill wall"}
    else:
        peak = card.peak_flop_per_s("fp16_tensor" if "fp16_tensor" in card.peak_tflops else "bf16_tensor")
        ttft_floor = 2 * weights.params * (prompt_tokens or 0) / peak
        median = point.get("median_ttft_ms")
        out["prefill"] = {"card": card.key, "ttft_floor_ms": 1e3 * ttft_floor,
                          "fraction": (1e3 * ttft_floor) / median if median else None}
    return out


def wall_curve(weights: ServedWeights, context: int, bandwidth: float, batches: list[int]) -> list[dict[str, float]]:
    """The Pareto chart's wall: at each batch b, tok/s in all and per stream that the bandwidth allows."""
    out = []
    for b in batches:
        step = weights.step_bytes(b, context)
        out.append({"batch": b, "tok_s": b * bandwidth / step, "per_user_tok_s": bandwidth / step})
    return out
