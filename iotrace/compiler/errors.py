"""How compiling a kernel for its resources fails: the config does not compile, or a compiler is missing."""

from __future__ import annotations

from iotrace.errors import IotraceError

__all__ = ["CompileError", "ToolMissingError"]


class CompileError(IotraceError):
    """A kernel config that does not compile for a target (the compiler's message is kept)."""


class ToolMissingError(IotraceError):
    """A compiler iotrace needs (nvcc) is not installed."""
