"""The self-check's steps in order, under one time budget, with results written as Markdown and JSON."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from iotrace.errors import InvalidValueError
from iotrace.selfcheck.record import SelfcheckResult, Step

#: The whole run fits one device call of at most 8 minutes (the GPU-validation issue's budget).
DEFAULT_BUDGET_S = 480.0


def selfcheck(out: Path, *, cpu: bool, quick: bool, card_name: str | None = None,
              budget_s: float = DEFAULT_BUDGET_S, progress: Callable[[str], None] = lambda _: None
              ) -> SelfcheckResult:
    """Run every step, writing ``results.json`` and ``results.md`` under ``out``; returns the result."""
    from iotrace.cards import detect
    from iotrace.kernels.backend import interpreting
    from iotrace.plugins import kernels
    from iotrace.selfcheck import (
        ceilings,
        driver_occupancy,
        environment,
        kernel_checks,
        model_bench,
        profiler_checks,
        tuner_checks,
    )

    if budget_s <= 0:
        raise InvalidValueError(f"--budget {budget_s:g} s leaves no time", "give a positive number of seconds")
    out_folder(out)
    gpu = not cpu
    if gpu and interpreting():
        raise InvalidValueError("no GPU is visible (torch.cuda sees none, or TRITON_INTERPRET=1 is set)",
                                "run with --cpu for the CPU self-check, or on a machine with an NVIDIA GPU")
    started = time.perf_counter()

    def out_of_time() -> bool:
        return time.perf_counter() - started > budget_s

    card = detect(card_name if card_name is not None else (None if gpu else "h100"))
    specs = [spec for spec in kernels().values() if type(spec).__module__.startswith("iotrace.kernels.")]
    steps: list[Step] = []

    def timed(name: str, body: Callable[[Step], Step]) -> Step:
        progress(name)
        step = Step(name)
        began = time.perf_counter()
        if out_of_time():
            step.skip("not run: the time budget ran out")
        else:
            try:
                body(step)
            except Exception as exc:  # a step that breaks is recorded as failed; the run goes on
                step.fail(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        step.seconds = time.perf_counter() - began
        steps.append(step)
        return step

    ceiling = timed("card ceilings (copy bandwidth, bf16 matmul)",
                    (lambda s: ceilings.measure(s, quick, card)) if gpu else
                    (lambda s: s.skip(f"no GPU: {card.name}'s CardBook figures stand in for measured ceilings")))
    timed("kernels against their references and baselines",
          lambda s: kernel_checks.check_kernels(s, specs, card, gpu, quick, ceiling.figures, out_of_time))
    timed("occupancy: iotrace against the CUDA driver",
          (lambda s: driver_occupancy.compare(s, specs)) if gpu else
          (lambda s: s.skip("no GPU: the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor needs one "
                            "(the calculator is checked against NVIDIA's cuda_occupancy.h in the tests)")))
    timed("tuner: sweeps, model-guided replay, pruning proved, warm cache" if gpu else
          "tuner: static tune and replay of the committed sweeps",
          lambda s: tuner_checks.check_tuner(s, out, gpu, quick, out_of_time))
    timed("profilers: ncu and nsys captures, loaded back",
          (lambda s: profiler_checks.capture_all(s, specs, out, card.key, quick, out_of_time)) if gpu else
          (lambda s: s.skip("no GPU: Nsight Compute and Nsight Systems need one (the orchestration is tested "
                            "with stand-in tools in tests/test_profilers.py)")))
    timed("model bench: SmolLM2-135M and Llama-3-8B decoded by the kernels, beside the walls and transformers"
          if gpu else "model bench: SmolLM2-135M on the torch path (CPU figures)",
          lambda s: model_bench.run_benches(s, card, gpu, quick, out_of_time))
    result = SelfcheckResult("gpu" if gpu else "cpu", quick, environment.collect(card, gpu), steps,
                             time.perf_counter() - started)
    write(result, out)
    return result


def out_folder(out: Path) -> Path:
    """``out`` as a folder the results can go into: one that exists, or one made now (with its parents).

    :raises InvalidValueError: ``out`` is a file (or anything not a folder), or cannot be made (no such parent that
        can be written, a read-only place such as /proc), named with the reason, before any step runs.
    """
    if out.exists() and not out.is_dir():
        raise InvalidValueError(f"OUT {out} exists and is not a folder",
                                "give a folder for results.md and results.json (a new name is made)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValueError(f"OUT {out} cannot be made ({exc.strerror or exc})",
                                "give a folder that exists or can be created, e.g. ./selfcheck") from None
    try:  # a folder that exists may still refuse files (/proc, a read-only mount): find out now, not at the end
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise InvalidValueError(f"OUT {out} cannot be written to ({exc.strerror or exc})",
                                "give a folder you can write to") from None
    return out


def write(result: SelfcheckResult, out: Path) -> None:
    from iotrace.selfcheck.markdown import render

    (out / "results.json").write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
    (out / "results.md").write_text(render(result))
