"""Whether the machine was busy before a measurement (the load average against the cores), and the threads an engine
gets by default.

A speed measured while other processes compete for the cores reads low with no sign of it in the figures (llama.cpp
at 3.8 tok/s for a 135M model on a loaded 2-core machine, issue 46). The kernel's one-minute load average counts
the tasks running or waiting to run (proc(5), /proc/loadavg); sampled before the engines start, it is other work,
not ours.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BUSY_SHARE", "MachineLoad", "engine_threads", "machine_load"]

#: A one-minute load average of half the cores or more before a run means other work held about half the machine:
#: enough to move a CPU engine's tok/s by tens of percent, so the run says so (a threshold, not a measurement).
BUSY_SHARE = 0.5


@dataclass(frozen=True)
class MachineLoad:
    """The one-minute load average before a run, and the cores it is measured against."""

    load_1min: float | None
    cores: int

    @property
    def busy(self) -> bool:
        return self.load_1min is not None and self.load_1min >= BUSY_SHARE * self.cores

    def label(self) -> str | None:
        """The line a table shows when the machine was busy (None when it was not, or cannot say)."""
        if not self.busy:
            return None
        return (f"the machine was busy before this run: load average {self.load_1min:.2f} on {self.cores} cores "
                "(other processes competing for them): every CPU figure here may read low; rerun on a quiet machine")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "busy": self.busy}


def machine_load() -> MachineLoad:
    """The load now (before the run starts); None where the platform has no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has none; the figures are then said nothing about
        load = None
    return MachineLoad(load, os.cpu_count() or 1)


def engine_threads() -> int:
    """The threads every engine gets without ``--threads``: ``OMP_NUM_THREADS`` where it is set to a positive number
    (the variable torch, vLLM's CPU backend and llama.cpp's OpenMP build read: whoever set it gave this process that
    share of the cores), else every core. Two processes that each take every core oversubscribe them, and a CPU
    engine's time then grows several-fold (PyTorch docs, "CPU threading and TorchScript inference")."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return os.cpu_count() or 1
