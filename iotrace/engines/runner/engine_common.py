"""What every engine module of the runner shares: the request's fields, the repetition loop's record, and the
greedy choice. Standalone (no iotrace, no engine imports): it runs in any engine's interpreter."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


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
