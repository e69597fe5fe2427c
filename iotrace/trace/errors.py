"""Errors a profiler export can cause. Both are :class:`iotrace.errors.IotraceError` subclasses: one line, exit 2.

Kept apart from ``iotrace/errors.py`` so the trace package owns its vocabulary; importing this module imports
nothing heavy. Both pickle with the arguments they were made from, so an error raised while a worker process
loads a file (:func:`iotrace.trace.load_ranks`) reaches the caller with the same message, path and fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iotrace.errors import DataFileError, IotraceError

__all__ = ["TraceFormatError", "TraceToolError"]


class TraceFormatError(DataFileError):
    """A file that is not a profiler export iotrace can read, or one that is damaged; names the file and the fault."""

    def __init__(self, path: str | Path, problem: str, fix: str = "") -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {problem}", fix)

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce(self)


class TraceToolError(IotraceError):
    """Reading this export needs a tool or module that is not installed (``nsys``, ``ncu_report``)."""

    def __init__(self, path: str | Path, problem: str, fix: str) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {problem}", fix)

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce(self)


def _reduce(error: TraceFormatError | TraceToolError) -> tuple[Any, ...]:
    # An exception pickles as cls(*error.args), and args holds only the joined message: rebuild it from its parts.
    return type(error), (error.path, error.problem.removeprefix(f"{error.path}: "), error.fix), error.__dict__
