"""Compare the search strategies on recorded sweeps: fraction of the brute-force best reached against evaluations.

    .venv/bin/python bench/strategy_replay.py bench/sweeps/*.json

For each sweep: the share of configs pruned statically (configs that cannot launch on the card, so never the
best); what a further cut on the cost model alone would remove (configs predicted over 1.25x, 1.5x, 2x the best
prediction) and whether it would keep the measured best (evidence for or against adding such a cut); then each
strategy at 5, 10, 20, 50 and 100% of the launchable configs, averaged over 20 seeds for
random search. Needs no GPU: the sweep answers every measurement.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from iotrace.autotune.replay import curve, static_of
from iotrace.autotune.space import config_key
from iotrace.autotune.strategies import STRATEGIES
from iotrace.autotune.sweep import load_sweep
from iotrace.plugins import kernel

FRACTIONS = (0.05, 0.1, 0.2, 0.5, 1.0)
MODEL_CUTS = (1.25, 1.5, 2.0)


def main(paths: list[str]) -> None:
    for path in paths:
        sweep = load_sweep(Path(path))
        spec = kernel(sweep.kernel)
        static = static_of(spec, sweep)
        launchable = len(static.static.launchable)
        pruned = len(sweep.rows) - launchable
        print(f"\n{path}\n  {sweep.provenance.get('how', '')}")
        print(f"  {len(sweep.rows)} configs, {pruned} pruned statically ({pruned / len(sweep.rows):.0%}); "
              f"best measured {sweep.best_us:.4g} µs")
        predicted = {config_key(r.config): r.entry.predicted_us for r in static.results
                     if r.entry.predicted_us is not None}
        fastest = min(predicted.values())
        best_row = min((r for r in sweep.rows if r.verified is not False and r.measured_us is not None),
                       key=lambda r: r.measured_us or math.inf)
        best_pred = predicted.get(config_key(best_row.config))
        if best_pred is None:
            print("  the measured best is pruned by today's static phase: the model and the sweep disagree")
            continue
        for cut in MODEL_CUTS:
            cut_out = sum(1 for t in predicted.values() if t > cut * fastest)
            print(f"  a model cut at {cut}x the best prediction would drop {cut_out / len(sweep.rows):.0%} more; "
                  f"the measured best {'survives' if best_pred <= cut * fastest else 'would be LOST'}")
        budgets: list[int | None] = [max(1, math.floor(f * launchable)) for f in FRACTIONS]
        print("  strategy     " + "".join(f"{f:>9.0%}" for f in FRACTIONS) + "   (fraction of the best reached)")
        for name in STRATEGIES:
            points = curve(spec, sweep, name, budgets, seeds=20 if name == "random" else 1)
            print(f"  {name:<12} " + "".join(f"{p.fraction_mean:>9.3f}" for p in points))


if __name__ == "__main__":
    main(sys.argv[1:])
