"""Synthesise stand-in sweeps for the strategy tests until real ones are recorded on a GPU.

    .venv/bin/python bench/synth_sweeps.py            # writes bench/sweeps/*-synth.json (minutes: real compiles)

Every config is really compiled for the card (registers, shared memory, spills, pruning are real), but the
"measured" time is **synthesised**: the cost model's prediction times log-normal noise (sigma = 0.25, seeded; a
draw below the roofline floor is reflected above it, since no kernel beats its roofline), and the fastest config
is marked as a wrong answer, so a strategy that trusts times without the check is caught. Each file says so in
``provenance.how``. Real sweeps replace these: on a GPU, bench/record_sweeps.sh records them into bench/sweeps/,
where tests/test_autotune_strategies.py and bench/strategy_replay.py pick them up.
"""

from __future__ import annotations

import math
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

from iotrace import __version__
from iotrace.autotune.fingerprint import fingerprint, triton_version
from iotrace.autotune.space import kernel_space
from iotrace.autotune.static import static_phase
from iotrace.autotune.sweep import Sweep, SweepRow
from iotrace.cards import lookup
from iotrace.kernel_call import KernelCall
from iotrace.plugins import kernel

OUT = Path(__file__).resolve().parent / "sweeps"
#: Log-normal noise on the model's time: exp(N(0, 0.25)) spans about ±28% at one sigma, the spread between the
#: model's ranking and real GEMM timings one should expect from terms it leaves out (L2 reuse, bank conflicts).
SIGMA = 0.25
SEED = 0

#: (kernel, dtype, preset, card, fixed parameters): slices a 2-core machine compiles in minutes.
TARGETS = [
    ("gemm", "fp16", "square-4096", "h100", {"BLOCK_K": 64}),
    ("attention-prefill", "bf16", "llama-3-8b-prefill-2k", "h100", {}),
]


def synthesise(name: str, dtype: str, preset: str, card_name: str, fix: dict) -> Path:
    spec, card = kernel(name), lookup(card_name)
    shape = spec.check_shape(spec.presets[preset])
    configs = kernel_space(spec, shape, dtype, card, fix=fix)
    phase = static_phase(KernelCall(spec, shape, dtype, card), configs,
                         progress=lambda n: print(".", end="", flush=True))
    rng = random.Random(SEED)
    rows = []
    for entry in phase.entries:
        measured = None
        if entry.prediction is not None:
            measured = entry.prediction.time_us * math.exp(rng.gauss(0.0, SIGMA))
            floor = entry.prediction.roofline_us
            if measured < floor:  # no kernel beats its roofline: reflect the draw across the floor (in log space)
                measured = floor * floor / measured
        rows.append(SweepRow(entry.config, entry.resources_dict(), measured, None if measured is None else True,
                             entry.pruned or ""))
    fastest = min((r for r in rows if r.measured_us is not None), key=lambda r: r.measured_us or math.inf)
    rows[rows.index(fastest)] = SweepRow(fastest.config, fastest.resources, fastest.measured_us, False,
                                         "synthesised wrong answer: the fastest config is marked wrong on purpose")
    fixed = ",".join(f"{k}={v}" for k, v in fix.items())
    how = (f"SYNTHESISED, not measured: real {card.name} cross-compiles (resources, pruning) with times = iotrace's "
           f"cost model x exp(N(0, {SIGMA})) noise (reflected above the roofline floor), seed {SEED}; the fastest "
           "row is marked wrong on purpose. A stand-in for strategy tests until a GPU records the real sweep")
    command = f"python bench/synth_sweeps.py ({name} {dtype} {preset} {card_name}{' ' + fixed if fixed else ''})"
    sweep = Sweep(spec.name, "triton", dtype, shape, fingerprint(card, on_gpu=False).to_dict(),
                  {"how": how, "command": command, "iotrace": __version__, "triton": triton_version(),
                   "date": datetime.now(UTC).isoformat(timespec="seconds"), "sigma": SIGMA, "seed": SEED,
                   "fix": fix}, rows)
    tag = "-" + fixed.replace("=", "").replace(",", "-") if fixed else ""
    path = OUT / f"{name}-{card.key}-{preset}{tag}-synth.json"
    sweep.save(path)
    print(f"\n{path}: {len(rows)} configs, {sum(r.measured_us is None for r in rows)} pruned")
    return path


if __name__ == "__main__":
    wanted = sys.argv[1:]
    for target in TARGETS:
        if not wanted or target[0] in wanted:
            synthesise(*target)
