"""Errors a user can cause, each carrying the offending value and what to do about it.

Every user-caused failure in iotrace raises a subclass of :class:`IotraceError`. The CLI prints
``str(error)`` as one line on stderr and exits with code 2; nothing else ever reaches the user
as a traceback. Messages follow one shape: what was wrong (naming the file or value), then what
to do, separated by " — ".
"""

from __future__ import annotations

__all__ = [
    "DataFileError",
    "EngineError",
    "InvalidValueError",
    "IotraceError",
    "KernelWrongError",
    "NoGpuError",
    "PluginError",
    "SelfcheckFailedError",
    "StaleNotesError",
    "UnknownCardError",
    "UnknownComputeCapabilityError",
]


class IotraceError(Exception):
    """Base class of every error a user can cause; the CLI turns it into one line and ``exit_code`` (2)."""

    #: The CLI's exit status for this error: 2 for what the user asked for; subclasses may differ.
    exit_code = 2

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} — {fix}" if fix else problem)


class InvalidValueError(IotraceError, ValueError):
    """A number or option outside what the hardware or the formula allows."""


class UnknownCardError(IotraceError, LookupError):
    """A card name that matches nothing in the CardBook."""


class UnknownComputeCapabilityError(IotraceError, LookupError):
    """A compute capability iotrace has no SM limits for."""


class NoGpuError(IotraceError):
    """No local GPU was found and no card was named."""


class DataFileError(IotraceError):
    """A data file (card book, SM limits, profiler export) that cannot be read as expected."""


class PluginError(IotraceError):
    """A plugin that fails to load or does not satisfy its hook specification."""


class EngineError(IotraceError):
    """An engine's server that cannot be started, is not ready in time, or does not answer (a local one or a
    ``--url``): one line naming the engine or the URL, and where its log is."""


class KernelWrongError(IotraceError):
    """A kernel whose output does not match its reference: a failed check, not a usage error (exit 1)."""

    exit_code = 1


class StaleNotesError(IotraceError):
    """Published notes that no longer match what the code computes: a finding for CI, not a usage error (exit 1)."""

    exit_code = 1


class SelfcheckFailedError(IotraceError):
    """A self-check step failed (a wrong kernel, an occupancy mismatch): a finding, not a usage error (exit 1)."""

    exit_code = 1
