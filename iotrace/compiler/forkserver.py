"""A fork server for compile workers: one process imports torch and Triton once, then forks a worker per job.

A fresh ``python -m iotrace.compiler`` pays about 2-3 s of imports (a kernel module imports torch) before its first
compile, which is most of a small batch's time; a worker forked from the server pays milliseconds. Each forked
worker takes the caller's environment, ``sys.path`` and working directory with its job and imports the kernel
modules itself, fresh from disk, as a fresh worker would. Shared by every compile of a process (notes, the
autotuner, ``iotrace run`` and the tests that call them in one pytest worker).

POSIX only: where ``os.fork`` is missing or a server does not start, :func:`run_job` answers None and
:mod:`iotrace.compiler.pool` starts a plain worker as before. ``IOTRACE_COMPILE_FORKSERVER=0`` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

__all__ = ["WorkerGone", "run_job", "serve"]

#: Servers kept alive at once, one per distinct environment (a test that sets a variable gets its own).
MAX_SERVERS = 2


class WorkerGone(Exception):
    """The forked worker died (or timed out and was killed) before answering; ``str()`` is its last words."""


class _Server:
    def __init__(self, env: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="iotrace-compile-")
        self.path = os.path.join(self.dir, "s")
        self.owner = os.getpid()
        self.proc = subprocess.Popen([sys.executable, "-m", "iotrace.compiler", "--serve", self.path], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if self.proc.stdout is None or self.proc.stdout.readline().strip() != b"ready":
            self.close()
            raise OSError("the compile fork server did not start")

    def close(self) -> None:
        if self.owner == os.getpid():  # a forked copy of this process leaves its parent's server alone
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_servers: dict[tuple[tuple[str, str], ...], _Server] = {}
_lock = threading.Lock()


def _server(env: dict[str, str]) -> _Server | None:
    key = tuple(sorted((k, v) for k, v in env.items() if k != "PYTHONPATH"))
    with _lock:
        found = _servers.get(key)
        if found is not None and (found.owner != os.getpid() or found.proc.poll() is not None):
            _servers.pop(key).close()
            found = None
        if found is None:
            while len(_servers) >= MAX_SERVERS:
                _servers.pop(next(iter(_servers))).close()
            try:
                found = _servers[key] = _Server(env)
            except OSError:
                return None
        else:
            _servers[key] = _servers.pop(key)  # most recently used last
        return found


@atexit.register
def _close_all() -> None:
    with _lock:
        while _servers:
            _servers.popitem()[1].close()


def run_job(job: dict[str, Any], env: dict[str, str], timeout_s: float) -> list[dict[str, Any]] | None:
    """The answers of a compile job from a worker forked by this environment's server; None where no server runs
    here (then the caller starts a plain worker). Raises :class:`TimeoutError` past ``timeout_s`` (the worker is
    killed) and :class:`WorkerGone` when the worker dies without answering."""
    if not hasattr(os, "fork") or os.environ.get("IOTRACE_COMPILE_FORKSERVER") == "0":
        return None
    server = _server(env)
    if server is None:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(server.path)
        except OSError:
            return None
        conn.settimeout(timeout_s)
        stream = conn.makefile("rwb")
        request = {"job": job, "env": env, "path": [p for p in sys.path if p], "cwd": os.getcwd()}
        stream.write(json.dumps(request).encode() + b"\n")
        stream.flush()
        pid = 0
        try:
            pid = int(stream.readline() or 0)
            reply = stream.readline()
        except TimeoutError:
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            raise
        if not reply:
            raise WorkerGone("no output")
        answer = json.loads(reply)
        if "crash" in answer:
            raise WorkerGone(answer["crash"])
        return answer["answers"]


def serve(path: str) -> None:
    """The server (``python -m iotrace.compiler --serve PATH``): import what every worker imports, listen on the
    Unix socket ``PATH``, fork a worker per connection; exit when the parent closes stdin."""
    import torch  # noqa: F401  (imported once here, not once per worker)
    import triton.compiler  # noqa: F401

    from iotrace.compiler import worker

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked workers are reaped by the kernel
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
            os._exit(0)
        if listener in ready:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _work(conn, worker)
            conn.close()


def _work(conn: socket.socket, worker: Any) -> None:
    """One forked worker: take the caller's environment, path and directory, answer the job, exit."""
    stream = conn.makefile("rwb")
    try:
        request = json.loads(stream.readline())
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[:] = [request["cwd"], *request["path"], *(p for p in sys.path if p not in request["path"])]
        stream.write(f"{os.getpid()}\n".encode())
        stream.flush()
        try:
            reply: dict[str, Any] = {"answers": worker.answer(request["job"])}
        except BaseException as exc:  # what would end a fresh worker with a traceback: its last line
            reply = {"crash": f"{type(exc).__name__}: {exc}"}
        stream.write(json.dumps(reply).encode() + b"\n")
        stream.flush()
    finally:
        os._exit(0)
