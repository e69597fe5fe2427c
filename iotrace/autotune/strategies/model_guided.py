"""Model-guided: measure the cost model's top-k, then hill-climb from the best measured config through its
neighbours (one parameter one step away) until no neighbour is faster. With no budget it stops there; with one,
what is left goes to the remaining configs in the model's order (so a budget of the whole space is exhaustive).

The model knows what it cannot see (L2 reuse, bank conflicts), so it is trusted for the shortlist only and the
measurements decide the rest; the local search is a greedy first-improvement walk, as Kernel Tuner's
``greedy_mls`` strategy does from random starts (KernelTuner/kernel_tuner:kernel_tuner/strategies/greedy_mls.py).
"""

from __future__ import annotations

import math
import random

from iotrace.autotune.strategies import Evaluator, SearchSpace

SUMMARY = "measure the model's top-k, then local search around the best"

#: The shortlist: 5% of the space, at least 3 configs. Recorded sweeps are what tune this (bench/).
TOP_K_FRACTION = 0.05
TOP_K_MIN = 3


def top_k(size: int) -> int:
    return min(size, max(TOP_K_MIN, math.ceil(TOP_K_FRACTION * size)))


def search(space: SearchSpace, evaluate: Evaluator, rng: random.Random) -> None:
    times: dict[int, float] = {}
    for index in space.by_prediction()[:top_k(len(space))]:
        found = evaluate(index)
        if found is not None:
            times[index] = found
    if not times:
        return
    best = min(times, key=times.__getitem__)
    improved = True
    while improved:
        improved = False
        around = [i for i in space.neighbours(best) if i not in times]
        around.sort(key=lambda i: (space.predicted_us[i], i))  # the model's favourite neighbour first
        for index in around:
            found = evaluate(index)
            times[index] = math.inf if found is None else found
            if times[index] < times[best]:
                best, improved = index, True
                break
    if space.budget is not None:
        for index in space.by_prediction():
            evaluate(index)  # a config measured already costs nothing; the evaluator stops at the budget
