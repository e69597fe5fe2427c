"""Step 4: the tuner. On a GPU: a brute-force (exhaustive) sweep of a GEMM and an attention space for one shape
each, saved as recorded sweeps under the output folder; the model-guided strategy replayed on the same sweeps (the
evaluations it spends to reach 95% of the brute-force best); every statically pruned config launched for real to
prove it cannot run (so pruning never drops a config that could have been the best); and the same tune rerun warm
from the cache. On the CPU: a static tune (compile, prune, rank) and the replay on the committed sweeps, which are
synthesised and say so."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iotrace.selfcheck.record import Step

ROOT = Path(__file__).resolve().parents[2]
#: (kernel, dtype, preset, --fix for a full run, --fix for a quick one): slices sized to sweep in about a minute.
SWEEPS = [
    ("gemm", "bf16", "square-4096", "BLOCK_K=64", "BLOCK_K=64,num_warps=8"),
    ("attention-prefill", "bf16", "llama-3-8b-prefill-2k", "USE_TMA=0", "USE_TMA=0,num_warps=4"),
]
#: The CPU run's static tune: four GEMM configs on sm_90, the README's example (one exceeds shared memory).
STATIC = ["gemm", "--card", "h100", "--preset", "square-4096", "--fix",
          "BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,num_warps=8,USE_TMA=0", "--static"]
TUNE_TIMEOUT_S = 600
#: The issue's goal: model-guided search reaches 95% of the brute-force best.
TARGET_FRACTION = 0.95


def _tune(args: list[str]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "iotrace", "tune", *args, "--json"], capture_output=True, text=True,
                          timeout=TUNE_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"iotrace tune {' '.join(args)}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout), time.perf_counter() - started


def evaluations_to_reach(path: Path, fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """The smallest evaluation budget at which model-guided search reaches ``fraction`` of the sweep's best, and
    random search's mean fraction at that budget (10 seeds), on a recorded sweep."""
    from iotrace.autotune.replay import curve, replay_once, static_of
    from iotrace.autotune.sweep import load_sweep
    from iotrace.plugins import kernel

    sweep = load_sweep(path)
    spec = kernel(sweep.kernel)
    launchable = len(static_of(spec, sweep).static.launchable)
    budget = next((b for b in range(1, launchable + 1)
                   if replay_once(spec, sweep, "model", b, seed=0)[1] >= fraction), None)
    random_at = curve(spec, sweep, "random", [budget or launchable], seeds=10)[0].fraction_mean
    return {"sweep": path.name, "how": sweep.provenance.get("how", ""), "configs": len(sweep.rows),
            "launchable": launchable, "model_evaluations_to_95pct": budget,
            "share_of_space": None if budget is None else round(budget / launchable, 3),
            "random_fraction_at_that_budget": round(random_at, 3)}


def _pruned_cannot_launch(kernel_name: str, shape: dict[str, int], dtype: str, configs: list[dict[str, Any]],
                          limit: int = 8) -> tuple[int, list[str]]:
    """Launch pruned configs for real: each must fail to launch. Returns (tried, configs that launched anyway)."""
    from iotrace.plugins import kernel

    spec = kernel(kernel_name)
    inputs = spec.make_inputs(spec.check_shape(shape), dtype, "cuda", seed=0)
    outputs = spec.make_outputs(inputs)
    launched = []
    for config in configs[:limit]:
        try:
            spec.launch(inputs, outputs, config)
            import torch

            torch.cuda.synchronize()
            launched.append(json.dumps(config, sort_keys=True))
        except Exception:  # Triton's OutOfResources (or the driver's launch error): what pruning predicted
            continue
    return min(limit, len(configs)), launched


def check_tuner(step: Step, out: Path, gpu: bool, quick: bool, out_of_time: Callable[[], bool]) -> Step:
    if not gpu:
        result, seconds = _tune(STATIC)
        pruned = [c for c in result["configs"] if c["pruned"]]
        step.rows.append({"tune": "gemm static on h100 (sm_90)", "configs": len(result["configs"]),
                          "pruned": len(pruned), "best": result["best"]["config"] if result["best"] else None,
                          "basis": result["best"]["basis"] if result["best"] else None, "seconds": round(seconds, 1)})
        for sweep in sorted((ROOT / "bench" / "sweeps").glob("*.json")):
            if not out_of_time():
                step.rows.append(evaluations_to_reach(sweep))
        if not pruned or result["best"] is None:
            step.fail("the static tune pruned nothing or chose nothing; the 5-stage config must exceed sm_90's "
                      "shared memory")
        return step
    sweeps = out / "sweeps"
    sweeps.mkdir(parents=True, exist_ok=True)
    problems = []
    for kernel_name, dtype, preset, fix_full, fix_quick in SWEEPS:
        if out_of_time():
            step.rows.append({"kernel": kernel_name, "note": "not run: the time budget ran out"})
            continue
        path = sweeps / f"{kernel_name}-{preset}.json"
        args = [kernel_name, "--dtype", dtype, "--preset", preset, "--fix", fix_quick if quick else fix_full,
                "--strategy", "exhaustive", "--cache", str(out / "tune.sqlite3")]
        cold, cold_s = _tune([*args, "--record", str(path)])
        _, warm_s = _tune(args)
        pruned = [c["config"] for c in cold["configs"] if c["pruned"]]
        tried, launched = _pruned_cannot_launch(kernel_name, cold["shape"], dtype, pruned)
        row = {"kernel": kernel_name, "preset": preset, "configs": len(cold["configs"]), "pruned": len(pruned),
               "pruned_share": round(len(pruned) / max(1, len(cold["configs"])), 3),
               "pruned_launched_for_real": tried, "pruned_but_launched": launched,
               "best": cold["best"]["config"] if cold["best"] else None,
               "best_us": cold["best"]["measured_us"] if cold["best"] else None,
               "cold_s": round(cold_s, 1), "warm_s": round(warm_s, 1),
               "warm_speedup": round(cold_s / warm_s, 1) if warm_s else math.inf,
               **evaluations_to_reach(path)}
        step.rows.append(row)
        if launched:
            problems.append(f"{kernel_name}: {len(launched)} pruned configs launched anyway")
        if cold["best"] is None:
            problems.append(f"{kernel_name}: no verified config")
    if problems:
        step.fail("; ".join(problems))
    return step
