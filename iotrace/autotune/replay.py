"""Strategies compared offline on a recorded sweep: the fraction of the brute-force best reached against
evaluations spent (how fast a strategy gets close to the best), averaged over seeds for the strategies that draw at
random.

``fraction = best time in the sweep / best time the strategy found`` (1.0: it found the best). A strategy that
returns a config the sweep marks wrong is not credited: replayed measurements keep their verification.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from iotrace.autotune.sweep import Sweep
from iotrace.autotune.tuner import TuneOptions, TuneResult, tune_from_sweep

if TYPE_CHECKING:
    from iotrace.plugins.spec import KernelSpec

__all__ = ["ReplayPoint", "curve", "replay_once", "static_of"]


@dataclass(frozen=True)
class ReplayPoint:
    """One strategy at one budget: evaluations spent and the fraction of the best reached (over seeds)."""

    strategy: str
    budget: int | None
    evaluations_mean: float
    fraction_mean: float
    fraction_min: float
    seeds: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def static_of(spec: KernelSpec, sweep: Sweep) -> TuneResult:
    """The sweep's static phase under today's model (one replayed evaluation): ``.static.launchable`` says which
    configs can run on the sweep's card, ``.results`` carry each config's prediction."""
    return tune_from_sweep(spec, TuneOptions(replay=sweep, budget=1, use_cache=False))


def replay_once(spec: KernelSpec, sweep: Sweep, strategy: str, budget: int | None, seed: int) -> tuple[int, float]:
    """(evaluations spent, fraction of the sweep's best reached) for one seeded run."""
    result = tune_from_sweep(spec, TuneOptions(strategy=strategy, budget=budget, replay=sweep, use_cache=False,
                                               seed=seed))
    if result.best is None or result.best.measured_us is None:
        return result.evaluations, 0.0
    return result.evaluations, sweep.best_us / result.best.measured_us


def curve(spec: KernelSpec, sweep: Sweep, strategy: str, budgets: list[int | None],
          seeds: int = 10) -> list[ReplayPoint]:
    """The strategy at each budget, ``seeds`` runs each (seeds 0..n-1)."""
    points = []
    for budget in budgets:
        runs = [replay_once(spec, sweep, strategy, budget, seed) for seed in range(seeds)]
        points.append(ReplayPoint(strategy, budget, statistics.fmean(r[0] for r in runs),
                                  statistics.fmean(r[1] for r in runs), min(r[1] for r in runs), seeds))
    return points
