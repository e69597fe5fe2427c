"""Search strategies behind one interface: ``search(space, evaluate, rng)``.

A strategy only decides *which* config to evaluate next. ``evaluate(i)`` measures config ``i`` (or replays it, or
returns it from the cache), returns its time in µs or None when it failed or gave a wrong answer, and raises
:class:`BudgetSpent` when the budget (evaluations or seconds) is used up; asking for a config twice costs nothing.
So a strategy is a few lines, and each one is tested by replaying recorded sweeps (tests/test_autotune_strategies.py
loops over :data:`STRATEGIES`, so a new strategy is tested by default).

Modules are imported when first asked for, as Kernel Tuner's ``interface.py`` does, so an unused strategy costs
nothing at start-up.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

from iotrace.autotune.space import neighbours
from iotrace.errors import InvalidValueError
from iotrace.plugins.spec import Config

__all__ = ["STRATEGIES", "BudgetSpent", "Evaluator", "SearchSpace", "Strategy", "strategy"]

#: Strategy name -> module (each defines ``search`` and ``SUMMARY``).
STRATEGIES = {
    "exhaustive": "iotrace.autotune.strategies.exhaustive",
    "random": "iotrace.autotune.strategies.random_sample",
    "model": "iotrace.autotune.strategies.model_guided",
}


class BudgetSpent(Exception):
    """Raised by an evaluator when the budget is used up; the tuner catches it and keeps the best so far."""


#: Measure config ``i`` of the space: its time in µs, or None when it failed or was wrong.
Evaluator = Callable[[int], float | None]


@dataclass
class SearchSpace:
    """What a strategy may look at: the launchable configs and the cost model's time for each."""

    configs: list[Config]
    predicted_us: list[float]
    #: The evaluation budget, when one was given: a strategy that would stop early may spend the rest usefully.
    budget: int | None = None
    _neighbours: dict[int, list[int]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.configs)

    def neighbours(self, index: int) -> list[int]:
        """Configs one parameter step away (see :func:`iotrace.autotune.space.neighbours`)."""
        if index not in self._neighbours:
            self._neighbours[index] = neighbours(self.configs, index)
        return self._neighbours[index]

    def by_prediction(self) -> list[int]:
        return sorted(range(len(self.configs)), key=lambda i: (self.predicted_us[i], i))


class Strategy(Protocol):
    SUMMARY: str

    def search(self, space: SearchSpace, evaluate: Evaluator, rng: random.Random) -> None: ...


def strategy(name: str) -> ModuleType:
    """The strategy module called ``name``; an unknown name lists the known ones."""
    if name not in STRATEGIES:
        raise InvalidValueError(f"unknown strategy {name!r}", f"use one of {', '.join(STRATEGIES)}")
    return importlib.import_module(STRATEGIES[name])
