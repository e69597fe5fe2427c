"""The records a tune returns: one :class:`ConfigResult` per config, and the :class:`TuneResult` around them.

``TuneResult.to_dict`` is ``iotrace tune --json``; ``TuneResult.to_sweep`` is the ``--record`` file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace import __version__
from iotrace.autotune.backends import Measurement
from iotrace.autotune.fingerprint import Fingerprint, triton_version
from iotrace.autotune.static import StaticEntry, StaticPhase
from iotrace.autotune.sweep import Sweep, SweepRow
from iotrace.kernel_call import CallFields

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins.spec import Config, Cost, Shape

__all__ = ["ConfigResult", "TuneResult"]


@dataclass(frozen=True)
class ConfigResult:
    """One config's static entry and, when it was evaluated, its measurement."""

    entry: StaticEntry
    rank: int | None
    measurement: Measurement | None = None

    @property
    def config(self) -> Config:
        return self.entry.config

    @property
    def measured_us(self) -> float | None:
        return self.measurement.time_us if self.measurement else None

    @property
    def verified(self) -> bool | None:
        return self.measurement.verified if self.measurement else None

    def to_dict(self) -> dict[str, Any]:
        """The keys of ``iotrace tune --json``'s ``configs`` list."""
        main, occ = self.entry.main, self.entry.occupancy
        return {"config": self.config, "registers": main.registers if main else None,
                "shared_mem_bytes": main.shared_mem_bytes if main else None,
                "spills": self.entry.spills if main else None,
                "occupancy_pct": occ.occupancy_pct if occ else None,
                "limiters": list(occ.limiters) if occ else [], "pruned": self.entry.pruned,
                "predicted_us": self.entry.predicted_us, "measured_us": self.measured_us, "verified": self.verified}


@dataclass
class TuneResult(CallFields):
    call: KernelCall
    fingerprint: Fingerprint
    mode: str
    strategy: str
    cost: Cost
    results: list[ConfigResult]
    best: ConfigResult | None
    why: str
    static: StaticPhase | None
    evaluations: int
    measured: int
    seconds: float
    cache_path: Path | None
    #: The shape bucket the result stands for (every size rounded up to a power of two; see ``space.shape_bucket``).
    bucket: Shape = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)





    @property
    def card(self) -> Card:
        return self.call.card

    @property
    def basis(self) -> str:
        """``measured`` when the best was chosen on measured times, ``predicted`` when on the cost model."""
        return "measured" if self.best is not None and self.best.measured_us is not None else "predicted"

    def ranked(self) -> list[ConfigResult]:
        """Measured configs fastest first, then the rest by predicted time, then the pruned ones."""
        def order(r: ConfigResult) -> tuple[int, float, int]:  # (group, time or rank, rank)
            if r.measured_us is not None and r.verified is not False:
                return (0, r.measured_us, r.rank or 0)
            if r.rank is not None:
                return (1, r.rank, 0)
            return (2, 0.0, 0)
        return sorted(self.results, key=order)

    def to_dict(self) -> dict[str, Any]:
        """``iotrace tune --json``: ``{"card", "kernel", "shape", "configs", "best"}``."""
        best = None
        if self.best is not None:
            best = {**self.best.to_dict(), "basis": self.basis, "why": self.why}
        return {"card": self.card.key, "kernel": self.kernel, "shape": self.shape,
                "configs": [r.to_dict() for r in self.ranked()], "best": best}

    def to_sweep(self, command: str = "") -> Sweep:
        """The measured part of this run as a recorded sweep (``--record``)."""
        from datetime import UTC, datetime

        how = (f"measured on {self.fingerprint.name} (driver {self.fingerprint.driver}, CUDA {self.fingerprint.cuda}) "
               f"by `iotrace tune` in {self.mode} mode, strategy {self.strategy}")
        rows = [SweepRow(r.config, r.entry.resources_dict(), r.measured_us, r.verified,
                         r.measurement.note if r.measurement else (r.entry.pruned or "")) for r in self.results]
        return Sweep(self.kernel, self.backend, self.dtype, dict(self.shape), self.fingerprint.to_dict(),
                     {"how": how, "command": command, "iotrace": __version__, "triton": triton_version(),
                      "date": datetime.now(UTC).isoformat(timespec="seconds"), "evaluations": self.evaluations},
                     rows)
