"""The walls beside a model run's figures: identities 1-3 applied to one decode step and one prefill.

A decode step of a batch of B sequences at context depth S streams every weight once and each sequence's KV cache
once: bytes/step = W + B · KV(S) (identity 1 with identity 3's KV term; activations are left out, they are
kilobytes). The decode wall is then B · bandwidth / bytes-per-step tokens per second. A prefill of S tokens costs
about 2 · N · S FLOPs (identity 2), so its wall is peak / (2 · N) tokens per second.

A wall is for the dtype the device behind it runs: a run's own wall (the copy bandwidth measured in the run) is for
the run's dtype; a GPU card's wall from a CPU run is for the dtype that card would run (:func:`card_dtype`), its
weights and KV cache costed at that element size (:func:`weight_bytes_at`). A CPU run is never shown as a fraction
of a GPU's wall: the wall is there for reference, its fraction is None with :data:`CPU_NOT_A_FRACTION` as the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iotrace.identities import kv_cache_bytes, prefill_tokens_per_s

__all__ = ["CPU_NOT_A_FRACTION", "ELEMENT_BYTES", "GPU_DEFAULT_DTYPE", "DecodeWall", "card_dtype", "decode_step_bytes",
           "decode_wall", "prefill_wall", "weight_bytes_at"]

#: Bytes of one element of each dtype the model bench runs (IEEE 754 binary32, bfloat16, binary16).
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: What a GPU runs when no --dtype says otherwise: the bench's own GPU default (iotrace bench --help: "bf16 on a GPU").
GPU_DEFAULT_DTYPE = "bf16"
#: Why a CPU run has no fraction of a GPU card's wall: the two are different machines, the ratio means nothing.
CPU_NOT_A_FRACTION = "a CPU run is not a fraction of a GPU's wall"


def card_dtype(run_dtype: str, on_gpu: bool, requested: str | None) -> str:
    """The dtype a GPU card's walls are for. On a GPU the run's own (the card ran it); from a CPU run, the --dtype
    given if a GPU would run it in the bench (fp16, bf16), else the GPU default bf16: a CPU's fp32 is not what the
    card would run, and costing the card's wall at 4 bytes a weight halved it."""
    if on_gpu:
        return run_dtype
    return requested if requested in ("fp16", "bf16") else GPU_DEFAULT_DTYPE


def weight_bytes_at(weight_bytes: float, run_dtype: str, dtype: str) -> float:
    """The weights of a run loaded in ``run_dtype`` (every tensor dequantised to it) at ``dtype``'s element size:
    the same elements, each ``ELEMENT_BYTES[dtype]`` bytes."""
    return float(weight_bytes) / ELEMENT_BYTES[run_dtype] * ELEMENT_BYTES[dtype]


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
    #: where the bandwidth came from: "CardBook <card>" or "measured copy (this run, CPU)"
    bandwidth_source: str
    #: the dtype the weights and KV cache are costed at (None: not stated, as an imported file's)
    dtype: str | None = None
    #: the weights' part of ``step_bytes``
    weight_bytes: float | None = None
    #: why the run measured beside this wall is not shown as a fraction of it (None: it is)
    no_fraction: str | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.bandwidth_bytes_per_s / self.step_bytes

    def fraction(self, measured_tokens_per_s: float) -> float | None:
        """The measured decode rate as a fraction of the wall; None where :attr:`no_fraction` says why not."""
        if self.no_fraction is not None:
            return None
        return measured_tokens_per_s / self.tokens_per_s

    def to_dict(self, measured_tokens_per_s: float) -> dict[str, Any]:
        """The wall as the bench's JSON has it, with ``measured_tokens_per_s``'s fraction of it."""
        return {"tok_s": self.tokens_per_s, "bandwidth_gbs": self.bandwidth_bytes_per_s / 1e9,
                "bandwidth_source": self.bandwidth_source, "dtype": self.dtype, "weight_bytes": self.weight_bytes,
                "bytes_per_step": self.step_bytes, "fraction": self.fraction(measured_tokens_per_s),
                "no_fraction": self.no_fraction}


def decode_wall(step_bytes: float, batch: int, bandwidth_bytes_per_s: float, source: str, *, dtype: str | None = None,
                weight_bytes: float | None = None, no_fraction: str | None = None) -> DecodeWall:
    return DecodeWall(float(step_bytes), float(bandwidth_bytes_per_s), int(batch), source, dtype,
                      None if weight_bytes is None else float(weight_bytes), no_fraction)


def prefill_wall(peak_flop_per_s: float, params: float) -> float:
    """Identity 2: the compute-bound prefill rate in tok/s, peak / (2 · N)."""
    return prefill_tokens_per_s(peak_flop_per_s, params)
