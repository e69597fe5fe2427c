"""Compare the search strategies on recorded sweeps: fraction of the brute-force best reached against evaluations.

    .venv/bin/python bench/strategy_replay.py bench/sweeps/*.json

For each sweep: the share of configs pruned statically (configs that cannot launch on the card, so never the
best), then each strategy at 5, 10, 20, 50 and 100% of the launchable configs, averaged over 20 seeds for
random search. Needs no GPU: the sweep answers every measurement.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from iotrace.autotune.replay import curve
from iotrace.autotune.strategies import STRATEGIES
from iotrace.autotune.sweep import load_sweep
from iotrace.plugins import kernel

FRACTIONS = (0.05, 0.1, 0.2, 0.5, 1.0)


def main(paths: list[str]) -> None:
    for path in paths:
        sweep = load_sweep(Path(path))
        spec = kernel(sweep.kernel)
        launchable = [r for r in sweep.rows if r.measured_us is not None or r.verified is False]
        pruned = len(sweep.rows) - len(launchable)
        print(f"\n{path}\n  {sweep.provenance.get('how', '')}")
        print(f"  {len(sweep.rows)} configs, {pruned} pruned statically ({pruned / len(sweep.rows):.0%}); "
              f"best measured {sweep.best_us:.4g} µs")
        budgets: list[int | None] = [max(1, math.floor(f * len(launchable))) for f in FRACTIONS]
        print("  strategy     " + "".join(f"{f:>9.0%}" for f in FRACTIONS) + "   (fraction of the best reached)")
        for name in STRATEGIES:
            points = curve(spec, sweep, name, budgets, seeds=20 if name == "random" else 1)
            print(f"  {name:<12} " + "".join(f"{p.fraction_mean:>9.3f}" for p in points))


if __name__ == "__main__":
    main(sys.argv[1:])
