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
from iotrace.autotune.static import StaticEntry, StaticPhase, tie_key
from iotrace.autotune.sweep import Sweep, SweepRow, says_synthesised
from iotrace.ceilings import LAUNCH_FLOOR_US, achievable
from iotrace.kernel_call import CallFields

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins.spec import Config, Cost, Shape

__all__ = ["ConfigResult", "TuneResult", "tied_with"]


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


def tied_with(row: ConfigResult, results: list[ConfigResult]) -> list[ConfigResult]:
    """The ranked results whose predicted time equals ``row``'s to three significant figures, ``row`` included
    (empty when ``row`` is not ranked)."""
    key = tie_key(row.entry) if row.rank is not None else None
    return [] if key is None else [r for r in results if r.rank is not None and tie_key(r.entry) == key]


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
    #: A replay's ``provenance.how``: where its times came from (None outside replay mode).
    replayed_from: str | None = None

    @property
    def card(self) -> Card:
        return self.call.card

    @property
    def basis(self) -> str:
        """What the best was chosen on: ``measured`` (times measured on this GPU), ``replayed`` (times from a
        recorded sweep, never called measured; :attr:`times` says whether it was synthesised), or ``predicted`` (the
        cost model)."""
        if self.best is None or self.best.measured_us is None:
            return "predicted"
        return "replayed" if self.mode == "replay" else "measured"

    @property
    def synthesised(self) -> bool:
        """Whether the replayed sweep says its times were synthesised, not measured."""
        return says_synthesised(self.replayed_from)

    @property
    def times(self) -> str | None:
        """Where the best's time came from, in the words shown to a reader: ``measured`` (on this GPU),
        ``replayed`` (from a recorded sweep), ``synthesised`` (from a sweep that says it was synthesised); None
        when the best rests on the model. A replayed time is never called measured."""
        if self.basis == "predicted":
            return None
        if self.basis == "replayed":
            return "synthesised" if self.synthesised else "replayed"
        return "measured"

    @property
    def label(self) -> str:
        """The best's basis as shown: ``measured``, ``replayed``, ``replayed, synthesised`` or ``predicted``."""
        times = self.times
        return "predicted" if times is None else ("replayed, synthesised" if times == "synthesised" else times)

    def tie(self, row: ConfigResult) -> tuple[int, int] | None:
        """``(first rank, configs in the tie)`` when ``row``'s predicted time equals another ranked config's to three
        significant figures (the model cannot tell them apart; :func:`~iotrace.autotune.static.rank` only orders
        them by its tie-break); None when it stands alone or is not ranked."""
        ranks = [r.rank or 0 for r in tied_with(row, self.results)]
        return (min(ranks), len(ranks)) if len(ranks) > 1 else None

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
            best = {**self.best.to_dict(), "basis": self.basis, "times": self.times, "why": self.why}
        if best is not None:  # what its predicted time was divided by (iotrace/ceilings.py)
            ceiling = achievable(self.card)
            best["ceilings"] = {"tensor": ceiling.tensor, "memory": ceiling.memory, "measured": ceiling.measured,
                                "stand_in": ceiling.stand_in, "launch_floor_us": LAUNCH_FLOOR_US}
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
