"""An engine's own OpenAI-compatible server, started from its pinned interpreter and stopped with every process it
spawned (:class:`Server`), or one already running elsewhere (:class:`RemoteServer`, ``--url``).

A server runs in a session of its own (``start_new_session``): Ctrl-C at the terminal reaches iotrace, not the server,
and iotrace stops the whole process group itself — SIGTERM, a grace period, then SIGKILL — plus any descendant that
left the group, found through ``/proc``. vLLM's API server spawns an engine-core process; a server that outlived
iotrace would hold the port and the memory of the next run. Everything the server prints goes to a log file, whose
last lines are the error when it exits before it is ready.

What a server is (model id, context, version, flags, metrics) is read from what it exposes (:meth:`Server.info`):
``/v1/models``, ``/version`` (vLLM), ``/props`` (llama.cpp's own llama-server), ``/metrics`` (Prometheus).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from iotrace.engines.engine_def import EngineDef, ServeArgs, default_python, engines_dir
from iotrace.engines.launch import EngineSpec
from iotrace.engines.process_tree import ProcessTree
from iotrace.errors import EngineError, PluginError

__all__ = ["PROBES", "RemoteServer", "Server", "ServerInfo", "free_port", "port_in_use"]

#: What :meth:`Server.info` asks a server, in order.
PROBES = ("/v1/models", "/version", "/props", "/metrics")
#: What a server that lost the race for its port prints (uvicorn: "[Errno 98] ... address already in use").
_ADDRESS_IN_USE = ("address already in use", "errno 98", "eaddrinuse")


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now: bound to port 0 and released (another process may take it before the server
    does; :class:`Server` then tries once more on another)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails. SO_REUSEADDR as servers set it (uvicorn does): a port in TIME_WAIT from
    an earlier run is free, one a process listens on is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


#: Loopback requests never go through an http_proxy from the environment (urllib would send them there).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def _get(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> tuple[int | None, bytes, str]:
    """GET ``url``: (HTTP status, body, "") or (None, b"", why no answer came)."""
    request = urllib.request.Request(url, headers=headers or {})
    host = urllib.parse.urlsplit(url).netloc.rpartition("@")[2].rsplit(":", 1)[0].lower()
    opener = _DIRECT if host in _LOOPBACK else urllib.request.build_opener()
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return int(response.status), response.read(), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read() if exc.fp is not None else b"", ""
    except urllib.error.URLError as exc:
        reason = exc.reason
        return None, b"", (reason.strerror or str(reason)) if isinstance(reason, OSError) else str(reason)
    except (OSError, ValueError) as exc:  # a timeout, a reset connection, a malformed URL
        return None, b"", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _last_lines(path: Path, count: int = 3, width: int = 160) -> str:
    """The last ``count`` non-empty lines of a log, each cut to ``width`` characters, joined by `` | ``."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 64 * 1024))  # the end is enough: logs can be long
            lines = [line.strip() for line in file.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return "(its log cannot be read)"
    tail = [line if len(line) <= width else line[: width - 1] + "…" for line in lines[-count:]]
    return " | ".join(tail) if tail else "(its log is empty)"


def _lost_port(path: Path) -> bool:
    """Whether the log says the server could not bind its port (its whole end: later lines may follow it)."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 64 * 1024))
            text = file.read().decode("utf-8", "replace").lower()
    except OSError:
        return False
    return any(word in text for word in _ADDRESS_IN_USE)


def _status(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself; a field its server does not expose is None (``endpoints`` says why)."""

    url: str
    #: The engine, where known: the one started, or guessed from what a ``--url`` server exposes.
    engine: str | None
    #: The first model id of ``/v1/models`` (the one a request names) and all of them.
    model: str | None
    models: tuple[str, ...]
    #: The context the server was sized for (vLLM's ``max_model_len``; llama-server's ``n_ctx`` in /props).
    max_model_len: int | None
    #: The server's version (vLLM's /version, prefixed with the engine: ``vllm 0.32.0``), else the engine's
    #: installed version (``llama-cpp-python 0.3.36``), else None.
    version: str | None
    #: llama-server's /props, as it answered.
    props: dict[str, Any] | None
    #: The metric families of /metrics (Prometheus), or None when not exposed.
    metrics: tuple[str, ...] | None
    #: Each probed path -> ``ok``, ``not exposed (HTTP 404)`` or why it did not answer.
    endpoints: dict[str, str]
    #: The command line that started it (None for a ``--url`` server).
    argv: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_info(url: str, engine: str | None, argv: Sequence[str] | None, local_version: Callable[[], str] | None,
               headers: dict[str, str] | None, timeout_s: float) -> ServerInfo:
    endpoints: dict[str, str] = {}
    bodies: dict[str, bytes] = {}
    for path in PROBES:
        status, body, why = _get(url + path, timeout_s, headers)
        if status == 200:
            endpoints[path], bodies[path] = "ok", body
        elif status is not None:
            endpoints[path] = f"not exposed (HTTP {status})"
        else:
            endpoints[path] = f"no answer ({why})"

    def as_json(path: str) -> Any:
        try:
            return json.loads(bodies[path]) if path in bodies else None
        except ValueError:
            endpoints[path] = "answered, but not with JSON"
            return None

    listed = as_json("/v1/models")
    data = [m for m in (listed.get("data") or []) if isinstance(m, dict)] if isinstance(listed, dict) else []
    models = tuple(str(m.get("id")) for m in data if m.get("id") is not None)
    props = as_json("/props")
    props = props if isinstance(props, dict) else None
    context = data[0].get("max_model_len") if data else None
    if context is None and props is not None:
        context = (props.get("default_generation_settings") or {}).get("n_ctx") or props.get("n_ctx")
    metrics = None
    if "/metrics" in bodies:
        text = bodies["/metrics"].decode("utf-8", "replace").splitlines()
        metrics = tuple(dict.fromkeys(line.split()[2] for line in text if line.startswith("# TYPE ")
                                      and len(line.split()) > 2))
    if engine is None:  # a --url server: what it exposes says which it is
        owner = str(data[0].get("owned_by", "")).lower() if data else ""
        engine = ("vllm" if owner == "vllm" or (metrics and any(m.startswith("vllm:") for m in metrics))
                  else "sglang" if owner == "sglang" else "llama.cpp" if owner == "llamacpp" or props else None)
    served = as_json("/version")
    version = str(served["version"]) if isinstance(served, dict) and served.get("version") else None
    if version is not None and engine is not None:
        version = f"{engine} {version}"  # vLLM says "0.32.0"; named as the engines' own versions are
    elif version is None and local_version is not None:
        version = local_version()
    return ServerInfo(url, engine, models[0] if models else None, models,
                      int(context) if isinstance(context, (int, float)) else None, version, props, metrics,
                      endpoints, tuple(argv) if argv is not None else None)


class Server:
    """An engine's own server on a free loopback port, for the length of a ``with`` block::

        with Server("llama.cpp", progress=print) as server:
            print(server.url, server.info().model)

    :param engine: an engine's name or alias (from the registry), ``--engine``'s :class:`EngineSpec` (its
        interpreter, if it names one), or an :class:`EngineDef` itself (tests, a plugin not registered).
    :param python: the interpreter to start it from; default the spec's, else the engine's default
        (``.engines/<name>/bin/python`` for an engine with a venv of its own).
    :param gguf: the model; default the pinned GGUF. ``model_dir``: its Hugging Face folder, for an engine that
        reads one (default: made from the GGUF once, under the engines folder).
    :param extra_args: the user's flags, appended to the engine's (``--server-args``).
    :param port: the port; default a free one (tried once more on another if the server loses it to another
        process). A given port that is in use is an error at once.
    :param log_dir: where the log ``<engine>-server.log`` goes (a new temporary folder if None); kept afterwards.
    :param timeout_s: how long to wait for ``ready_path`` to answer 200 (a hang guard).
    :param progress: called with one line when starting, every ``progress_every_s`` while waiting, and when ready.
    :param stop_grace_s: how long SIGTERM has before SIGKILL.
    :raises EngineError: on entering: no interpreter, a port in use, the server exiting or not ready in time (the
        log's last lines and its path in the one line).
    :raises PluginError: the engine has no server, or its plugin's ``server_argv`` fails.
    """

    def __init__(self, engine: str | EngineSpec | EngineDef, *, python: Path | None = None, gguf: Path | None = None,
                 model_dir: Path | None = None, extra_args: Sequence[str] = (), context: int = 512,
                 port: int | None = None, host: str = "127.0.0.1", log_dir: Path | None = None,
                 timeout_s: float = 600.0, progress: Callable[[str], None] | None = None,
                 progress_every_s: float = 5.0, stop_grace_s: float = 5.0, env: dict[str, str] | None = None) -> None:
        if isinstance(engine, EngineDef):
            self.engine = engine
        else:
            from iotrace.engines.registry import engine as lookup

            if isinstance(engine, EngineSpec):
                python = python or engine.python
                engine = engine.name
            self.engine = lookup(engine)
        self.name = self.engine.name
        self.python = Path(python) if python is not None else default_python(self.engine)
        self.gguf, self.model_dir = gguf, model_dir
        self.extra_args, self.context = tuple(extra_args), int(context)
        self.host, self.requested_port = host, port
        self.port: int | None = None
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.timeout_s, self.progress_every_s, self.stop_grace_s = timeout_s, progress_every_s, stop_grace_s
        self._progress = progress or (lambda _line: None)
        self.env = dict(env or {})
        self.argv: list[str] = []
        self.log_path: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        #: Seconds from the start to the first 200 of ``ready_path`` (None until ready).
        self.ready_s: float | None = None
        #: The leader's exit status after :meth:`stop` (None while running).
        self.returncode: int | None = None
        self._log: TextIO | None = None
        self._tree: ProcessTree | None = None

    # --- what the caller reads --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (no trailing slash); the OpenAI API is under ``/v1``."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def info(self, timeout_s: float = 10.0) -> ServerInfo:
        """What the running server exposes (model id, context, version, metrics); its version from the engine's
        interpreter where the server does not say."""
        if self.port is None:
            raise EngineError(f"{self.name}'s server is not started", "read info() inside the `with` block")
        return _read_info(self.url, self.name, self.argv, lambda: self.engine.version(self.python), None, timeout_s)

    def failure(self) -> str | None:
        """None while the server runs; once it has exited on its own (killed mid-sweep, crashed), one line: its
        status, its log's last lines and where the log is."""
        if self.process is None or self._tree is None:
            return None
        self._tree.snapshot()  # a child that outlives its leader is still found by stop()
        if self.process.poll() is None:
            return None
        tail = _last_lines(self.log_path) if self.log_path is not None else ""
        return f"{self._failed(_status(self.process.returncode), tail)} — its log: {self.log_path}"

    # --- start ------------------------------------------------------------------------------------------------

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Server:
        """Start the server and wait until it is ready; on any failure or interruption (Ctrl-C) while waiting,
        nothing is left running."""
        if not self.engine.serves:
            raise PluginError(self.engine.why_no_server(), "use an engine with a server: vllm or llama.cpp")
        if not self.python.exists():
            how = self.engine.install or f"install {self.name} into a venv"
            raise EngineError(f"no interpreter for {self.name} at {self.python}",
                              f"{how}, or pass --engine {self.name}=PATH/TO/python")
        if self.requested_port is not None and port_in_use(self.host, self.requested_port):
            raise EngineError(f"port {self.requested_port} on {self.host} is in use (another process listens there)",
                              "pass another port, or none to have a free one picked")
        args = self._serve_args(self.requested_port or 0)  # the model resolved once, before any process starts
        tries = 1 if self.requested_port is not None else 2
        try:
            for attempt in range(tries):
                self.port = self.requested_port or free_port(self.host)
                if self._launch(replace(args, port=self.port), attempt):
                    return self
            raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover
        except BaseException:
            self.stop()  # a failed start, a timeout or Ctrl-C while waiting: no process left behind
            raise

    def _serve_args(self, port: int) -> ServeArgs:
        gguf, model_dir = self.gguf, self.model_dir
        if gguf is None:
            from iotrace.model.gguf_file import pinned_gguf

            gguf = pinned_gguf()
        if model_dir is None and self.engine.model_format == "hf":
            from iotrace.engines.hf_folder import hf_folder

            model_dir = hf_folder(Path(gguf), engines_dir(), self._progress)
        return ServeArgs(python=self.python, gguf=Path(gguf), model_dir=model_dir, port=port, host=self.host,
                         context=self.context, extra_args=self.extra_args)

    def _open_log(self) -> Path:
        folder = self.log_dir or Path(tempfile.mkdtemp(prefix=f"iotrace-serve-{self.name}-"))
        folder.mkdir(parents=True, exist_ok=True)
        path, n = folder / f"{self.name}-server.log", 1
        while path.exists():  # one log per server: several runs into one folder keep each
            n += 1
            path = folder / f"{self.name}-server-{n}.log"
        return path

    def _launch(self, args: ServeArgs, attempt: int) -> bool:
        """Start once and wait: True when ready; False when it lost its free port to another process (try
        again); raises otherwise."""
        self.argv = self.engine.argv(args)
        if self.log_path is None:
            self.log_path = self._open_log()
        self._log = self.log_path.open("a", encoding="utf-8")
        self._log.write(f"$ {' '.join(self.argv)}\n")
        self._log.flush()
        env = {**self.engine.server_env, **os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        started = time.monotonic()
        try:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            raise EngineError(f"cannot start {self.name}'s server ({exc.strerror or exc}): {self.argv[0]}",
                              f"its log: {self.log_path}") from None
        self._tree = ProcessTree(self.process)
        atexit.register(self.stop)  # a caller that never stops it: at least not past iotrace's own exit
        self._progress(f"{self.name}: starting its server on {self.url} (log: {self.log_path})")
        ready_url = self.url + self.engine.ready_path
        next_line = started + self.progress_every_s
        while True:
            code = self.process.poll()
            elapsed = time.monotonic() - started
            if code is not None:
                tail = _last_lines(self.log_path)
                if attempt == 0 and self.requested_port is None and _lost_port(self.log_path):
                    self._progress(f"{self.name}: port {self.port} was taken before its server bound it; trying "
                                   "another")
                    self.stop()
                    return False
                raise EngineError(self._failed(f"{_status(code)} after {elapsed:.0f} s, before it was ready", tail),
                                  self._fix(tail))
            status, _, _ = _get(ready_url, timeout_s=2.0)
            if status == 200:
                self._tree.snapshot()  # what it spawned to serve, while its leader lives to be walked from
                self.ready_s = time.monotonic() - started
                self._progress(f"{self.name}: ready at {self.url} after {self.ready_s:.0f} s")
                return True
            if elapsed > self.timeout_s:
                raise EngineError(self._failed(f"was not ready after {self.timeout_s:g} s (no HTTP 200 from "
                                               f"{ready_url}; stopped)", _last_lines(self.log_path)),
                                  f"its log: {self.log_path}; a slow start needs a longer timeout")
            if time.monotonic() >= next_line:
                self._progress(f"{self.name}: starting ({elapsed:.0f} s)…")
                next_line += self.progress_every_s
            time.sleep(0.25)

    def _failed(self, what: str, tail: str) -> str:
        said = f"; its last lines: {tail}" if tail else ""
        return f"{self.name}'s server {what}{said}"

    def _fix(self, tail: str) -> str:
        fix = f"its log: {self.log_path}"
        missing = re.search(r"No module named '([\w.]+)'", tail)
        if missing:
            how = self.engine.server_install or self.engine.install or "install it there"
            fix += f"; {self.python} lacks the module {missing[1]!r}: {how}"
        if self.log_path is not None and _lost_port(self.log_path):
            fix += "; another process took its port: pass another one, or none"
        return fix

    # --- stop -------------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server and everything it spawned (:class:`~iotrace.engines.process_tree.ProcessTree`): SIGTERM,
        ``stop_grace_s`` to exit, then SIGKILL. Idempotent; also the ``with`` block's exit and an atexit hook."""
        tree, self._tree, self.process = self._tree, None, None
        try:
            if tree is not None:
                self.returncode = tree.stop(self.stop_grace_s)
        finally:
            atexit.unregister(self.stop)
            if self._log is not None:
                self._log.close()
                self._log = None


class RemoteServer:
    """A server already running at ``url`` (``--url``): nothing is started or stopped.

    :raises EngineError: on entering (:meth:`check`): the URL is not http(s), or nothing answers its
        ``/v1/models`` with HTTP 200, one line naming the URL.
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> None:
        url = url.strip().rstrip("/")
        url = url[: -len("/v1")] if url.endswith("/v1") else url  # the API's root is accepted as well
        self.url = url
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.pid: int | None = None
        self.log_path: Path | None = None
        self.ready_s: float | None = None  # not started here: no time to ready
        self.argv: list[str] | None = None
        self.name: str | None = None

    def __enter__(self) -> RemoteServer:
        return self.check()

    def __exit__(self, *exc: object) -> None:
        return None

    def check(self) -> RemoteServer:
        """Raise one line unless the server answers ``/v1/models`` with HTTP 200."""
        scheme, _, rest = self.url.partition("://")
        if scheme not in ("http", "https") or not rest:
            raise EngineError(f"--url {self.url!r} is not an http(s) URL", "pass e.g. http://127.0.0.1:8000")
        status, _, why = _get(self.url + "/v1/models", self.timeout_s, self.headers)
        if status is None:
            raise EngineError(f"no server answers at {self.url} ({why})", "start it, or check --url")
        if status != 200:
            hint = "; it wants an API key" if status in (401, 403) else ""
            raise EngineError(f"the server at {self.url} answered /v1/models with HTTP {status}{hint}",
                              "check --url: it must be an OpenAI-compatible server")
        return self

    def stop(self) -> None:
        """Nothing to stop: the server is not iotrace's."""

    def failure(self) -> str | None:
        """None: iotrace did not start this server, so it has no exit of its own to report (a server gone mid-sweep
        shows as its requests failing, each with its reason)."""
        return None

    def info(self, timeout_s: float | None = None) -> ServerInfo:
        """What the server exposes; its engine guessed from that (vLLM's /version and metrics, ``owned_by``)."""
        found = _read_info(self.url, None, None, None, self.headers, timeout_s or self.timeout_s)
        self.name = found.engine
        return found
