"""Achievable ceilings: the share of a card's datasheet peak that the best real kernels reach, as measured.

A datasheet peak is a bound no program meets: the dense tensor-core figure assumes every SM issuing matrix
instructions at boost clock with nothing else to do, and the memory figure counts every pin toggling. Predictions
that divide by the datasheet figure promise speeds nobody measures (the tuner once predicted a 4096³ bf16 GEMM at
960 TFLOP/s on an H100, 97% of its dense peak, where cuBLAS reaches ~75-80%). The cost model divides by the
achievable ceiling instead and names the measurement it rests on; the roofline floor stays the datasheet's, so
"% of peak" keeps its usual meaning.

One measured entry per architecture; a card of an architecture with none uses the Hopper measurement and says it
is a stand-in (``Ceiling.stand_in``). Add an entry from ``iotrace selfcheck`` on a card of that architecture (its
section 1, "card ceilings", measures both roofs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["LAUNCH_FLOOR_US", "Ceiling", "achievable"]

#: The shortest GPU time of one launch: SwiGLU over one token (1,536 elements) took 1.17 µs on an H200, replayed from
#: a CUDA graph so no host launch cost is in it (bench/recorded/h200-2026-12-04-selfcheck.md, section 2). However
#: little a kernel does, its blocks must be scheduled, run and retired; no prediction goes below this.
LAUNCH_FLOOR_US = 1.17


@dataclass(frozen=True)
class Ceiling:
    """The achievable share of one card's tensor-core and memory peaks, with what it was measured on."""

    tensor: float
    memory: float
    measured: str
    #: True when the card's architecture has no measurement of its own and another's stands in for it.
    stand_in: bool

    def words(self) -> str:
        """One line for a report: the fractions and their basis."""
        basis = f"{self.measured}{'; a stand-in: this architecture has no measurement of its own' * self.stand_in}"
        return (f"achievable ceilings: {self.tensor:.0%} of the dense tensor-core peak, {self.memory:.0%} of the "
                f"memory bandwidth ({basis})")


#: Measured ceilings by architecture (the CardBook's ``architecture``). Hopper, on an H200 (989.4 dense bf16
#: TFLOP/s, 4,800 GB/s): torch.matmul (cuBLAS) in bf16 at 8192³ ran at 769 to 798 TFLOP/s (mean of ten after three
#: warm-ups, repeated on two machines, 2026-10-28 and 2026-11-04; issue 46 quotes it) and at 4096³ at 720.1 TFLOP/s;
#: a device-to-device copy moved 4,177 GB/s read + written (bench/recorded/h200-2026-12-04-selfcheck.md, section 1).
_MEASURED: dict[str, Ceiling] = {
    "hopper": Ceiling(tensor=0.80, memory=0.87, stand_in=False,
                      measured="measured on an H200: cuBLAS bf16 8192³ at 790 TFLOP/s, a copy at 4,177 GB/s"),
}
_STAND_IN = "hopper"


def achievable(card: Card) -> Ceiling:
    """The achievable ceilings of ``card``: its architecture's measurement, or Hopper's as a stated stand-in."""
    own = _MEASURED.get(card.architecture.lower())
    if own is not None:
        return own
    base = _MEASURED[_STAND_IN]
    return Ceiling(base.tensor, base.memory, base.measured, stand_in=True)
