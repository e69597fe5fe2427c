"""Step 2: every built-in kernel on its presets: correct against the reference on fresh random inputs, then (on a
GPU) timed, as TFLOP/s, GB/s and a share of the measured ceilings, and against its same-run baselines
(``KernelSpec.baselines``: cuBLAS, SDPA, eager and compiled torch, the 16-bit-cache decode, copies)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from iotrace.cards import Card
from iotrace.plugins.spec import KernelSpec, Shape
from iotrace.selfcheck.record import Step


def shapes_to_check(spec: KernelSpec, gpu: bool, quick: bool) -> list[tuple[str, Shape]]:
    """CPU: the spec's small default shape (the interpreter checks it in seconds). GPU: its presets from real
    models, all of them, or the first in a quick run."""
    if not gpu or not spec.presets:
        return [("default", spec.check_shape(spec.default_shape))]
    named = [(name, spec.check_shape(shape)) for name, shape in spec.presets.items()]
    return named[:1] if quick else named


def _time_baselines(spec: KernelSpec, shape: Shape, dtype: str, ours_us: float, seed: int) -> dict[str, Any]:
    import triton.testing

    from iotrace.kernels.backend import device

    inputs = spec.make_inputs(shape, dtype, device(), seed)
    found: dict[str, Any] = {}
    for name, call in spec.baselines(inputs, shape, dtype).items():
        try:
            call()  # the first call compiles or autotunes (torch.compile, cuBLAS heuristics): not timed
            base_us = 1e3 * triton.testing.do_bench(call, return_mode="median")
        except Exception as exc:  # a baseline torch cannot run on this shape (e.g. no flash kernel for it)
            found[name] = {"error": " ".join(str(exc).split())[:160]}
            continue
        if name.startswith("copy"):  # a bandwidth reference that also writes what it reads: not a rival in time
            found[name] = {"us": round(base_us, 2), "note": "a copy reads and writes: compare GB/s, not time"}
        else:
            found[name] = {"us": round(base_us, 2), "speedup": round(base_us / ours_us, 3)}
    return found


def check_kernels(step: Step, specs: list[KernelSpec], card: Card, gpu: bool, quick: bool,
                  ceilings: dict[str, float], out_of_time: Callable[[], bool]) -> Step:
    from iotrace.kernel_call import KernelCall
    from iotrace.runner import run

    failed = []
    for spec in specs:
        dtype = spec.dtypes[0] if not gpu or "bf16" not in spec.dtypes else "bf16"
        for preset, shape in shapes_to_check(spec, gpu, quick):
            if out_of_time():
                step.rows.append({"kernel": spec.name, "preset": preset, "correct": None,
                                  "note": "not run: the time budget ran out"})
                continue
            started = time.perf_counter()
            try:
                result = run(KernelCall.make(spec, shape, dtype, card), check=True)
            except Exception as exc:  # one kernel's failure is a row, not the end of the run
                failed.append(f"{spec.name} {preset}")
                step.rows.append({"kernel": spec.name, "preset": preset, "correct": False,
                                  "note": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"})
                continue
            row: dict[str, Any] = {
                "kernel": spec.name, "preset": preset, "dtype": dtype, "config": result.config,
                "correct": result.check.correct, "checked_shape": result.check.shape, "seed": result.check.seed,
                "max_err_over_tolerance": result.check.max_err_over_tolerance, "quality": result.check.quality,
                "registers": result.resources[0].registers, "occupancy_pct": result.occupancy.occupancy_pct,
                "mode": result.mode}
            if result.check.correct is not True:
                failed.append(f"{spec.name} {preset}")
                row["note"] = result.check.where or result.check.note
            if result.timing is not None:
                timing = result.timing
                row.update({"us": round(timing.median_us, 2), "tflops": round(timing.tflops, 2),
                            "gbps": round(timing.gbps, 1), "pct_of_roofline": round(timing.pct_of_roofline, 1)})
                if ceilings.get("copy_gbps"):
                    row["pct_of_copy_bw"] = round(100 * timing.gbps / ceilings["copy_gbps"], 1)
                if ceilings.get("bf16_tflops"):
                    row["pct_of_matmul"] = round(100 * timing.tflops / ceilings["bf16_tflops"], 1)
                row["baselines"] = _time_baselines(spec, shape, dtype, timing.median_us, result.check.seed or 0)
            row["seconds"] = round(time.perf_counter() - started, 1)
            step.rows.append(row)
    if failed:
        step.fail(f"wrong or failed: {', '.join(failed)}")
    return step
