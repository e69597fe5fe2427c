"""Capture with Nsight Systems: ``nsys profile`` around the child run, then ``nsys export`` to SQLite.

Flags, from the Nsight Systems User Guide, "CLI Profile Command Switch Options" and "CLI Export Command Switch Options"
(https://docs.nvidia.com/nsight-systems/UserGuide/index.html):

- ``--trace=cuda,nvtx``: CUDA API and kernel activity, and NVTX ranges (the ``iotrace/<kernel>`` range);
- ``--sample=none --cpuctxsw=none``: no CPU sampling or context-switch trace, which iotrace does not read and which
  cost overhead and file size;
- ``--cuda-graph-trace=node``: each kernel of a replayed CUDA graph is traced as a kernel (the default, ``graph``,
  records one range per graph launch), so graph-captured decode steps show their kernels;
- ``--output=<base>``: nsys appends ``.nsys-rep``; ``--force-overwrite=true`` replaces a file of the same name;
- ``nsys export --type=sqlite --output=<base>.sqlite``: the SQLite schema iotrace's loader reads (``.nsys-rep`` itself
  is not readable without nsys).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from iotrace.trace.profilers.capture import Capture, CapturePaths
from iotrace.trace.profilers.errors import ChildFailedError
from iotrace.trace.profilers.process import run_logged, tail
from iotrace.trace.profilers.tools import Tool

__all__ = ["capture", "export_argv", "profile_argv"]


def profile_argv(nsys: str, base: Path, child: Sequence[str]) -> list[str]:
    return [nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--cuda-graph-trace=node",
            f"--output={base}", "--force-overwrite=true", *child]


def export_argv(nsys: str, report: Path, sqlite: Path) -> list[str]:
    return [nsys, "export", "--type=sqlite", f"--output={sqlite}", "--force-overwrite=true", str(report)]


def capture(tool: Tool, paths: CapturePaths, child: Sequence[str], *, timeout_s: float,
            env: Mapping[str, str] | None = None) -> Capture:
    """Profile ``child`` and export the report; returns the ``.nsys-rep`` and the ``.sqlite`` iotrace loads."""
    report, sqlite = paths.with_suffix(".nsys-rep"), paths.with_suffix(".sqlite")
    result = Capture(capture=report, export=sqlite)
    argv = profile_argv(tool.path, paths.stem, child)
    result.commands.append(argv)
    done = run_logged(argv, timeout_s=timeout_s, log=paths.log, what="nsys profile", env=env)
    result.seconds += done.seconds
    legacy = paths.with_suffix(".qdrep")  # Nsight Systems before 2021.4 named its reports .qdrep
    if not report.is_file() and legacy.is_file():
        report = result.capture = legacy
    if done.failed_status != 0 or not report.is_file():
        why = f"exit {done.failed_status}" if done.failed_status != 0 else f"exit 0 but no {report.name}"
        raise ChildFailedError(f"the profiled run failed under nsys ({why}): {tail(done.stderr or done.stdout)}",
                               f"the full output is in {paths.log}; run the child alone to see it: "
                               f"{' '.join(child)}")
    argv = export_argv(tool.path, report, sqlite)
    result.commands.append(argv)
    done = run_logged(argv, timeout_s=timeout_s, log=paths.log, what="nsys export", env=env)
    result.seconds += done.seconds
    if done.returncode != 0 or not sqlite.is_file():
        raise ChildFailedError(f"nsys export of {report} to SQLite failed (exit {done.returncode}): "
                               f"{tail(done.stderr or done.stdout)}",
                               f"the report is kept; export it by hand: {' '.join(argv)}")
    return result
