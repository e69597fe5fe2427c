"""Run one profiler subprocess with a time limit, keep its output in a log, and show its tail when it fails."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from iotrace.trace.profilers.errors import ProfilerTimeoutError

__all__ = ["Finished", "run_logged", "tail"]

# Nsight Systems may exit 0 when the program it profiled failed, saying so instead (its wording since 2021.x).
_APP_FAILED = re.compile(r"target application returned non-zero exit code (-?\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Finished:
    """A subprocess that ended by itself: its argv, exit status, output and wall time."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def failed_status(self) -> int:
        """The exit status that says the run failed: the tool's own, else the one it reports for the program it ran
        (0 when both succeeded)."""
        if self.returncode != 0:
            return self.returncode
        match = _APP_FAILED.search(self.output)
        return int(match.group(1)) if match else 0


def tail(text: str, lines: int = 12, width: int = 2000) -> str:
    """The last ``lines`` non-empty lines of ``text`` joined with " | ", so a failure still prints as one line."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    joined = " | ".join(kept)
    return joined if len(joined) <= width else "…" + joined[-width:]


def run_logged(argv: Sequence[str], *, timeout_s: float, log: Path, what: str,
               env: Mapping[str, str] | None = None) -> Finished:
    """Run ``argv`` to completion (or ``timeout_s``), append its output to ``log`` and return it.

    The child gets its own process group so that a timeout stops the profiler *and* the Python run under it; a plain
    ``subprocess.run(timeout=...)`` kills only the direct child and leaves the profiled program running.
    """
    argv = tuple(str(a) for a in argv)
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            env=dict(env) if env is not None else None, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        _append(log, argv, stdout, stderr, f"killed after {timeout_s:g} s")
        raise ProfilerTimeoutError(f"{what} did not finish within {timeout_s:g} s and was stopped (log: {log})",
                                   "raise --timeout, or profile a smaller shape (--shape) or fewer kernels "
                                   "(--launch-count)") from None
    except BaseException:  # Ctrl-C reaches only iotrace (the child has its own session): stop the profiler too
        _kill_group(proc)
        proc.wait()
        raise
    seconds = time.monotonic() - started
    _append(log, argv, stdout, stderr, f"exit {proc.returncode} after {seconds:.1f} s")
    return Finished(argv, proc.returncode, stdout, stderr, seconds)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have ended on its own meanwhile
        os.killpg(proc.pid, signal.SIGKILL)  # the group we created above: the profiler and everything it started


def _append(log: Path, argv: tuple[str, ...], stdout: str, stderr: str, status: str) -> None:
    import shlex

    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {shlex.join(argv)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- {status}\n\n")
