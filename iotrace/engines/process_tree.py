"""Every process a started server became, and stopping all of them: no orphan holds a port or memory afterwards.

A server is started in a session of its own, so its process group holds what it forked (vLLM's API server forks an
engine core, which forks a worker). A process that left the group (``setsid``) is still a descendant while its
parent lives. :class:`ProcessTree` records both, each by pid *and* start time (``/proc/PID/stat``), so a pid the
kernel hands to a stranger later is never signalled; where there is no ``/proc`` it falls back to the group alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessTree", "process_alive"]


@dataclass(frozen=True)
class _Proc:
    state: str
    ppid: int
    pgrp: int
    #: Clock ticks after boot when it started: with the pid, who it is.
    start: int

    @property
    def live(self) -> bool:
        return self.state not in ("Z", "X")  # a zombie is dead, only not yet reaped


def _read(pid: int) -> _Proc | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return _Proc(fields[0], int(fields[1]), int(fields[2]), int(fields[19]))


def _table() -> dict[int, _Proc] | None:
    """Every process, by pid; None where there is no /proc."""
    if not Path("/proc/self/stat").exists():
        return None
    found: dict[int, _Proc] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (proc := _read(int(entry.name))) is not None:
                found[int(entry.name)] = proc
    return found


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    if Path("/proc/self/stat").exists():
        proc = _read(pid)
        return proc is not None and proc.live
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessTree:
    """The processes of one started server: its leader (started with ``start_new_session=True``), its group and its
    descendants, as far as they have been seen (:meth:`snapshot`)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pgid = process.pid  # a new session's leader leads a group of its own id
        #: pid -> start time of every process seen to be the server's
        self.known: dict[int, int] = {}
        self.snapshot()

    def snapshot(self) -> set[int]:
        """Record every live process of the group and every live descendant of one already known; return the live
        pids. Called at the start, when ready, when asked how the server is, and while stopping."""
        table = _table()
        if table is None:
            return {self.pgid} if self.process.poll() is None else set()
        ours = {pid for pid, start in self.known.items() if pid in table and table[pid].start == start
                and table[pid].live}
        if self.process.poll() is None and self.pgid in table:
            ours.add(self.pgid)
        if ours:  # the group is still ours (not an id a stranger's group got once all of ours ended)
            ours |= {pid for pid, proc in table.items() if proc.pgrp == self.pgid and proc.live}
        children: dict[int, list[int]] = {}
        for pid, proc in table.items():
            children.setdefault(proc.ppid, []).append(pid)
        todo = list(ours)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in ours and table[child].live:
                    ours.add(child)
                    todo.append(child)
        for pid in ours:
            self.known[pid] = table[pid].start
        return ours

    def _signal(self, pids: set[int], sig: signal.Signals) -> None:
        if _table() is None:  # no /proc: the group is all there is to go by
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM to every process of the server, ``grace_s`` for them to exit, SIGKILL to what is left (again,
        until none is: one may have forked meanwhile); the leader reaped. Its exit status (None if it could not be
        reaped within 5 s more)."""
        live = self.snapshot()
        self._signal(live, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while live and time.monotonic() < deadline:
            time.sleep(0.1)
            live = self.snapshot()
        deadline = time.monotonic() + 5.0  # SIGKILL is not refused; the ends are only not instant
        while live and time.monotonic() < deadline:
            self._signal(live, signal.SIGKILL)
            time.sleep(0.05)
            live = self.snapshot()
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.process.wait(timeout=5.0)
        return None
