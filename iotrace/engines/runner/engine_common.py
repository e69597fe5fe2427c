"""What every engine module of the runner shares: the request's fields, the repetition loop's record, the greedy
choice, the named range around each forward pass and the profiled repetition. Standalone (no iotrace, no engine
imports; torch only where a caller passes it in): it runs in any engine's interpreter."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

#: The range each runner puts around every forward pass while a profiler runs, named
#: ``iotrace/step <phase> requests=R tokens=T context=C`` (:func:`step_range_name`): phase ``prefill``, ``decode`` or
#: ``mixed``; R the requests in the batch; T the tokens the forward processes (the prompt's for a prefill, one per
#: request for a decode); C the KV length after the step, the largest over the requests. The trace reader
#: (iotrace.trace.reports.steps) parses exactly this format.
STEP_RANGE = "iotrace/step"
#: The phases a step range names.
PHASES = ("prefill", "decode", "mixed")


@dataclass
class Rep:
    """One timed repetition of one request: the prefill (its first token) and each decode step after it."""

    prefill_s: float
    #: seconds from the prefill's end to each decode step's token (one per step)
    step_s: list[float] = field(default_factory=list)
    #: the engine's own counters for this repetition, where it has them
    counters: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class Clock:
    """The runner's clock: ``time.perf_counter`` marks (CPU runs; a GPU engine's step returns once its token is
    on the host, so the mark follows the device)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.last = now - self.last, now
        return elapsed


def work(request: dict) -> tuple[list[int], int, int]:
    """(prompt token ids, decode steps, timed repetitions) of the request."""
    return [int(t) for t in request["prompt_ids"]], int(request["gen_tokens"]), int(request["reps"])


def same_tokens(runs: list[list[int]]) -> bool:
    return all(r == runs[0] for r in runs)


def step_range_name(phase: str, requests: int, tokens: int, context: int) -> str:
    """``iotrace/step decode requests=1 tokens=1 context=6``: one forward pass's range name (:data:`STEP_RANGE`)."""
    if phase not in PHASES:
        raise ValueError(f"step phase {phase!r} is not one of {', '.join(PHASES)}")
    return f"{STEP_RANGE} {phase} requests={int(requests)} tokens={int(tokens)} context={int(context)}"


class StepRanges:
    """``with steps("decode", 1, 1, 6): forward()``: a ``torch.profiler.record_function`` range named by
    :func:`step_range_name`, entered only while a torch profiler records (this runner's or the engine's own), and
    counted per phase then. Without a profiler the range would still cost ~14 µs a step (measured here: 13.6 µs per
    enter/exit on torch 2.13's CPU build, against 0.2 µs for the check), a share of a GPU's millisecond decode step."""

    def __init__(self, torch: Any) -> None:
        self._range = torch.profiler.record_function
        # torch.autograd._profiler_enabled: whether any torch profiler records in this process (the C flag that
        # record_function itself consults); where a build lacks it, always enter (correct, ~14 µs a step dearer).
        self._recording = getattr(torch.autograd, "_profiler_enabled", None) or (lambda: True)
        #: the ranges entered since the last :meth:`reset`, per phase
        self.counts: Counter[str] = Counter()

    def __call__(self, phase: str, requests: int, tokens: int, context: int) -> contextlib.AbstractContextManager:
        if not self._recording():
            return contextlib.nullcontext()
        self.counts[phase] += 1
        return self._range(step_range_name(phase, requests, tokens, context))

    def reset(self) -> None:
        self.counts.clear()

    def run(self) -> dict[str, int]:
        """The ranges entered, ``{"prefill": n, "decode": m}`` (and ``"mixed"`` where any was)."""
        out = {"prefill": self.counts["prefill"], "decode": self.counts["decode"]}
        if self.counts["mixed"]:
            out["mixed"] = self.counts["mixed"]
        return out


#: The repetitions recorded with the profiler after the unprofiled timed ones: one. Its trace holds gen + 1 steps,
#: enough for a per-step waterfall (the reader takes each step apart), and a trace grows with every step (measured
#: here, gzipped with shapes: 0.10 MB a step for vLLM, 0.17 for transformers, 0.24 for iotrace's decoder); its decode
#: rate against the unprofiled repetitions' mean is the profiler's cost.
PROFILED_REPS = 1


def trace_name(engine: str) -> str:
    """The file a runner writes its trace to inside the request's ``profile`` folder: ``<engine>.pt.trace.json.gz``."""
    return f"{engine}.pt.trace.json.gz"


def decode_tok_s(records: list[Rep]) -> float | None:
    """Decode tok/s over ``records`` as the comparison reads it (the mean of each record's steps over their time)."""
    rates = [len(r.step_s) / sum(r.step_s) for r in records if r.step_s and sum(r.step_s) > 0]
    return sum(rates) / len(rates) if rates else None


def profile_result(trace: str, timed: list[Rep], profiled: list[Rep], steps: StepRanges, profiler: str) -> dict:
    """The result's ``profile``: the trace, the profiled repetitions (:data:`PROFILED_REPS`), decode tok/s without and
    with the profiler (the runner's clock, the same work), the step ranges written and which profiler recorded them.
    ``profiled``: the profiled repetitions' records (one per request)."""
    return {"trace": trace, "reps": PROFILED_REPS,
            "decode_tok_s_unprofiled": decode_tok_s(timed), "decode_tok_s_profiled": decode_tok_s(profiled),
            "steps_run": steps.run(), "profiler": profiler, "profiled_reps": [r.to_dict() for r in profiled]}


@contextlib.contextmanager
def torch_profiler(torch: Any, folder: str, engine: str):
    """Record the block with the torch profiler (CPU, and CUDA where there is a GPU; shapes, no Python stacks) and
    write its Chrome trace, gzipped, to ``folder/<engine>.pt.trace.json.gz``. Yields the trace's path."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    path = os.path.join(folder, trace_name(engine))
    with torch.profiler.profile(activities=activities, record_shapes=True, with_stack=False) as prof:
        yield path
    plain = path[: -len(".gz")]
    prof.export_chrome_trace(plain)
    gzip_file(plain, path)


def gzip_file(source: str, target: str) -> None:
    """``source`` gzipped into ``target``, then ``source`` removed."""
    with open(source, "rb") as raw, gzip.open(target, "wb", compresslevel=6) as packed:
        shutil.copyfileobj(raw, packed)
    os.remove(source)
