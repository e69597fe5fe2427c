"""How a run was stopped from outside: Ctrl-C (SIGINT) or SIGTERM, both raised where the program is.

Python turns SIGINT into ``KeyboardInterrupt`` but lets SIGTERM (a job scheduler, ``timeout``, ``kill``) end the
process at once: no ``finally`` runs, so an engine server started in its own session outlives iotrace and a
partial result is lost. :func:`raise_on_sigterm` makes SIGTERM raise :class:`Terminated`, a ``KeyboardInterrupt``,
so every path that cleans up after Ctrl-C cleans up after it too; the CLI then exits 143, as a shell reports it
(128 + 15, the POSIX signal number of SIGTERM), and the words name the signal that came.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["Terminated", "cause", "exit_code", "raise_on_sigterm"]

_terminated = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is (see the module docstring)."""


def _raise(signum: int, frame: FrameType | None) -> None:
    _terminated.set()
    raise Terminated()


def raise_on_sigterm() -> None:
    """Raise :class:`Terminated` on SIGTERM from now on; only from the main thread, and only over the default action
    (a host program's own handler is left alone)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise)


def cause() -> str:
    """The words for what stopped the run: ``SIGTERM`` once one came, else ``Ctrl-C``."""
    return "SIGTERM" if _terminated.is_set() else "Ctrl-C"


def exit_code() -> int:
    """The exit status a shell would report for that signal: 143 for SIGTERM, 130 for SIGINT (128 + its number)."""
    return 128 + (signal.SIGTERM if _terminated.is_set() else signal.SIGINT)
