"""What a profiled run can fail on. Each is an :class:`iotrace.errors.IotraceError`: one line, exit 2 from the CLI.

Every message says what went wrong (naming the tool, file or range) and what to do, and the tool errors offer a
path that needs less: ``--cupti`` needs neither Nsight tool, ``--nsys`` and ``--cupti`` need no counter permission.
"""

from __future__ import annotations

from iotrace.errors import IotraceError

__all__ = ["ChildFailedError", "CountersNotPermittedError", "NoKernelsInRangeError", "ProfilerError",
           "ProfilerTimeoutError", "ToolNotFoundError"]


class ProfilerError(IotraceError):
    """Base of the profiled-run errors."""


class ToolNotFoundError(ProfilerError):
    """``nsys`` or ``ncu`` is neither on PATH nor in a CUDA toolkit or Nsight install iotrace knows to look in."""


class CountersNotPermittedError(ProfilerError):
    """Nsight Compute was refused the GPU performance counters (``ERR_NVGPUCTRPERM``)."""


class ChildFailedError(ProfilerError):
    """The profiled child run (or the profiler around it) exited with an error; the message ends with its stderr."""


class NoKernelsInRangeError(ProfilerError):
    """The export holds no kernel launched inside the kernel's NVTX range ``iotrace/<kernel>``."""


class ProfilerTimeoutError(ProfilerError):
    """A profiler subprocess ran past its time limit and was stopped."""
