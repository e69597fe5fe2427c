"""The child run a profiler launches: ``python -m iotrace run KERNEL ...`` with every choice spelled out.

The parent has already resolved the shape, dtype, config and seed, so the child is given all of them explicitly: the
profiled run is exactly the one the manifest records, and rerunning the child argv alone reproduces it. The child
launches the kernel through ``KernelSpec.launch``, i.e. inside the NVTX range ``iotrace/<kernel>`` the profilers
filter on.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iotrace.errors import InvalidValueError
from iotrace.kernel_call import CallFields, KernelCall

__all__ = ["RunPlan", "child_argv", "flag", "mapping_text"]


@dataclass(frozen=True)
class RunPlan(CallFields):
    """One kernel run, fully resolved: the call, its config and seed; what the child runs and the manifest records."""

    call: KernelCall
    config: dict[str, Any]
    seed: int
    check: bool = True
    card: str | None = None  # --card given to the child; None lets it use $IOTRACE_CARD or the local GPU
    extra: dict[str, Any] = field(default_factory=dict)


def flag(dest: str) -> str:
    """An option's command-line spelling from its argparse ``dest``: ``clock_control`` → ``--clock-control``."""
    return "--" + dest.replace("_", "-")


def mapping_text(values: Mapping[str, Any]) -> str:
    """``{"M": 64, "USE_TMA": True}`` → ``M=64,USE_TMA=true``: the ``K=V,...`` form ``iotrace run`` parses."""
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            parts.append(f"{key}={'true' if value else 'false'}")
        elif isinstance(value, int):
            parts.append(f"{key}={value}")
        else:  # the CLI's K=V parser takes whole numbers and switches only
            raise InvalidValueError(f"{key}={value!r} cannot be passed to the child run on its command line",
                                    "use whole-number or true/false values")
    return ",".join(parts)


def child_argv(plan: RunPlan, python: str | None = None) -> list[str]:
    """The child's argv: the same interpreter, ``-m iotrace run``, and no profiler flag (so it runs in-process)."""
    argv = [python or sys.executable, "-m", "iotrace", "run", plan.kernel, "--shape", mapping_text(plan.shape),
            "--dtype", plan.dtype, "--backend", plan.backend, "--seed", str(plan.seed)]
    if plan.config:
        argv += ["--config", mapping_text(plan.config)]
    if plan.card is not None:
        argv += ["--card", plan.card]
    if not plan.check:
        argv.append("--no-check")
    return argv
