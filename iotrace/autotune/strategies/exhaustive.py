"""Exhaustive: every launchable config, in the order the cost model ranks them (so a budget cut keeps the likely
best). With no budget this is the brute force the other strategies are judged against."""

from __future__ import annotations

import random

from iotrace.autotune.strategies import Evaluator, SearchSpace

SUMMARY = "every launchable config, best predicted first"


def search(space: SearchSpace, evaluate: Evaluator, rng: random.Random) -> None:
    for index in space.by_prediction():
        evaluate(index)
