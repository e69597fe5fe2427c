"""Random sampling: configs drawn without replacement, uniformly, until the budget ends (with no budget: all).
The baseline any guided strategy must beat (Bergstra and Bengio, "Random Search for Hyper-Parameter Optimization",
JMLR 13, 2012)."""

from __future__ import annotations

import random

from iotrace.autotune.strategies import Evaluator, SearchSpace

SUMMARY = "uniform random order without replacement"


def search(space: SearchSpace, evaluate: Evaluator, rng: random.Random) -> None:
    order = list(range(len(space)))
    rng.shuffle(order)
    for index in order:
        evaluate(index)
