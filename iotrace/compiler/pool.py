"""Fan a batch of units out: the disk cache first, nvcc in this process, Triton in worker processes.

Triton units compile in worker processes (``python -m iotrace.compiler``) started with the interpreter off, several
at once: forked from :mod:`iotrace.compiler.forkserver` where it runs, else started fresh.
Plain subprocesses rather than multiprocessing: a user's script needs no ``__main__`` guard.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from iotrace.compiler import forkserver
from iotrace.compiler.disk_cache import cache_key, load_cached, store
from iotrace.compiler.errors import CompileError
from iotrace.compiler.nvcc import compile_cuda
from iotrace.compiler.resources import Resources, cc_number
from iotrace.compiler.triton_target import STOPPED, WORKER_ENV
from iotrace.plugins.spec import CudaUnit, TritonUnit

__all__ = ["COMPILE_TIMEOUT_S", "UNITS_PER_WORKER", "CompileBatch", "compile_each", "compile_resources"]

#: A compile that takes longer than this (a 1024x1024 tile, say) is abandoned as a config error.
COMPILE_TIMEOUT_S = 180

#: Units one worker process compiles before reporting back. A worker pays about 2 s to import torch and Triton
#: before its first compile, and one config takes a fraction of a second to a few seconds, so a few units per
#: worker keep the start-up cost small while the progress bar still moves.
UNITS_PER_WORKER = 8


@dataclass(frozen=True)
class CompileBatch:
    """The outcome of :func:`compile_each`: one answer per unit, and how many came from the cache."""

    results: list[Resources | CompileError]
    cached: int
    compiled: int
    workers_started: int


def compile_resources(units: list[TritonUnit | CudaUnit], cc: str | tuple[int, int],
                      jobs: int | None = None) -> list[Resources]:
    """Static resources of every unit compiled for ``cc``, from the cache or compiled (in parallel for Triton).

    The first unit that does not compile raises its :class:`CompileError`. A Triton unit whose shared memory alone is
    over what a block may opt in to on ``cc`` cannot launch on any card of it: its compile stops once Triton knows
    that figure (its LLVM IR), before PTX and ptxas, the slow half for a large tile that spills (13 s against 4 s for a
    256 x 256 x 128 GEMM tile on sm_86); its Resources hold the shared memory and no register count (0), for the
    occupancy check to refuse it in the same words.
    """
    from iotrace.sm_limits import sm_limits

    batch = compile_each(units, cc, jobs, smem_limit=sm_limits(cc).smem_per_block_optin)
    for result in batch.results:
        if isinstance(result, CompileError):
            raise result
    return batch.results  # type: ignore[return-value]


def compile_each(units: list[TritonUnit | CudaUnit], cc: str | tuple[int, int], jobs: int | None = None,
                 progress: Callable[[int], None] | None = None, *, smem_limit: int | None = None) -> CompileBatch:
    """Like :func:`compile_resources`, but a unit that does not compile gives its :class:`CompileError` in its place
    instead of stopping the rest (the autotuner prunes such configs). ``progress(n)`` is called as units finish.
    ``smem_limit``: stop a Triton unit whose shared memory is over it before PTX (:func:`compile_resources`); such a
    unit's Resources are partial and not cached. None (the tuner's): compile every unit to the end."""
    target = cc_number(cc)
    results: list[Resources | CompileError | None] = [None] * len(units)
    todo: list[tuple[int, str]] = []
    sources: dict[str, bytes] = {}  # one read of each kernel package per call, however many units share it
    for i, unit in enumerate(units):
        key = cache_key(unit, target, sources)
        results[i] = load_cached(key)
        if results[i] is None:
            todo.append((i, key))
    cached = len(units) - len(todo)
    if progress is not None and cached:
        progress(cached)
    triton_todo = [(i, key) for i, key in todo if isinstance(units[i], TritonUnit)]
    for i, key in todo:
        if isinstance(units[i], CudaUnit):
            try:
                results[i] = compile_cuda(units[i], target)  # type: ignore[arg-type]
                store(key, results[i])  # type: ignore[arg-type]
            except CompileError as exc:
                results[i] = exc
            if progress is not None:
                progress(1)
    batches: list[list[tuple[int, str]]] = []

    def _alone(unit: TritonUnit, cc: int) -> dict[str, Any]:
        try:
            return _run_worker([unit], cc, smem_limit)[0]
        except CompileError as exc:
            return {"error": exc.problem, "fix": exc.fix}

    if triton_todo:
        workers = max(1, min(jobs or os.cpu_count() or 1, len(triton_todo)))
        size = max(1, min(UNITS_PER_WORKER, -(-len(triton_todo) // workers)))
        batches = [triton_todo[start:start + size] for start in range(0, len(triton_todo), size)]

        def work(batch: list[tuple[int, str]]) -> None:
            try:
                answers = _run_worker([units[i] for i, _ in batch], target, smem_limit)  # type: ignore[misc]
            except CompileError as exc:  # the worker died or timed out: one unit did it, so ask each on its own
                if len(batch) == 1:
                    answers = [{"error": exc.problem, "fix": exc.fix}]
                else:
                    answers = [_alone(units[i], target) for i, _ in batch]  # type: ignore[arg-type]
            for (i, key), answer in zip(batch, answers, strict=True):
                if "error" in answer:
                    results[i] = CompileError(answer["error"], answer["fix"])
                else:
                    answer["grid"] = tuple(answer["grid"])
                    results[i] = Resources(**answer)
                    if not answer["compiler"].endswith(STOPPED):  # a stopped compile is no unit's resources
                        store(key, results[i])  # type: ignore[arg-type]
            if progress is not None:
                progress(len(batch))

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for done in concurrent.futures.as_completed([pool.submit(work, b) for b in batches]):
                done.result()
    return CompileBatch([r for r in results if r is not None], cached, len(todo), len(batches))


def _run_worker(units: list[TritonUnit], target: int, smem_limit: int | None = None) -> list[dict[str, Any]]:
    """Compile ``units`` in one worker process, forked or fresh (see :mod:`iotrace.compiler.worker`)."""
    job = json.dumps({"cc": target, "units": [asdict(u) for u in units], "smem_limit": smem_limit})
    # The worker sees this process's sys.path, so a plugin module found only through it imports there too.
    env = {**os.environ, **WORKER_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    timeout_s = COMPILE_TIMEOUT_S * len(units)
    try:  # a worker forked from a server that imported torch and Triton once, where one runs here
        answers = forkserver.run_job(json.loads(job), env, timeout_s)
    except TimeoutError:
        raise _timed_out(units, target) from None
    except forkserver.WorkerGone as exc:
        raise CompileError(f"the Triton compile worker failed: {' '.join(str(exc).split())}",
                           "run `python -m iotrace.compiler` by hand to see the whole error") from None
    if answers is not None:
        return answers
    try:
        done = subprocess.run([sys.executable, "-m", "iotrace.compiler"], input=job, capture_output=True,
                              text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise _timed_out(units, target) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise CompileError(f"the Triton compile worker failed: {' '.join((lines or ['no output'])[-1].split())}",
                           "run `python -m iotrace.compiler` by hand to see the whole error")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _timed_out(units: list[TritonUnit], target: int) -> CompileError:
    return CompileError(f"compiling {', '.join(u.function for u in units)} for sm_{target} took over "
                        f"{COMPILE_TIMEOUT_S} s per kernel", "the config is likely far too large: pick smaller tiles")
