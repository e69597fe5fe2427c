"""An engine's server (iotrace.engines.server): started on a free loopback port, waited for, read, and stopped with
every process it spawned — checked by process id — on a normal exit, an error, a timeout and Ctrl-C.

The fast tests drive a fake server: a real subprocess (a small ``http.server`` script) that spawns two children, one
that ignores SIGTERM (so only SIGKILL ends it) and one that moves to a session of its own (so only the descendant walk
finds it). The slow test starts llama.cpp's real server from its venv with the pinned GGUF.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from iotrace.engines.engine_def import EngineDef, ServeArgs
from iotrace.engines.server import RemoteServer, Server, free_port
from iotrace.errors import EngineError, PluginError

FAKE = r'''
import http.server, json, os, signal, subprocess, sys, time

mode, port, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
open(os.path.join(folder, f"leader-{os.getpid()}.pid"), "w").write(str(os.getpid()))
if mode == "fail":
    print("loading the model", flush=True)
    print("warming up", file=sys.stderr, flush=True)
    print("Error: cannot read model.gguf (bad magic)", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "hang":  # never listens, and ignores SIGTERM: only SIGKILL ends it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
if mode == "race" and not os.path.exists(os.path.join(folder, "raced")):
    open(os.path.join(folder, "raced"), "w").close()
    print(f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already "
          "in use", file=sys.stderr, flush=True)
    print("INFO:     Waiting for application shutdown.", file=sys.stderr, flush=True)
    sys.exit(1)
# Two children: one in the group that ignores SIGTERM, one in a session of its own.
stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
stubborn.stdout.readline()  # its handler is set before anyone signals it
runaway = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
open(os.path.join(folder, "children.json"), "w").write(json.dumps([stubborn.pid, runaway.pid]))
if mode == "slow":
    time.sleep(3.0)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "fake-model", "owned_by": "fake",
                                                           "max_model_len": 256}]}).encode()
        elif self.path == "/metrics":
            body = b"# HELP fake:requests Requests.\n# TYPE fake:requests counter\nfake:requests 0\n"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process, read from /proc independently of the module under test (a zombie, dead
    and waiting to be reaped, is not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2] not in "ZX"


@pytest.fixture(autouse=True)
def _linux() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("the process checks read /proc (Linux)")


def _fake(tmp_path: Path, mode: str) -> EngineDef:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE, encoding="utf-8")

    def argv(args: ServeArgs) -> list[str]:
        return [str(args.python), str(script), mode, str(args.port), str(tmp_path), *args.extra_args]

    return EngineDef(name="fake", server_argv=argv, version_of=lambda python: "fake 1.0")


def _server(tmp_path: Path, mode: str, **kwargs) -> Server:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    options = {"python": Path(sys.executable), "gguf": gguf, "log_dir": tmp_path / "logs", "timeout_s": 30.0,
               "stop_grace_s": 1.0, **kwargs}
    return Server(_fake(tmp_path, mode), **options)


def _pids(tmp_path: Path) -> list[int]:
    """Every process the fake servers of this test started: their leaders and the children of the last one."""
    leaders = [int(p.read_text()) for p in tmp_path.glob("leader-*.pid")]
    children = tmp_path / "children.json"
    return leaders + (json.loads(children.read_text()) if children.exists() else [])


def test_a_server_is_ready_read_and_stopped_with_every_process_it_spawned(tmp_path: Path) -> None:
    lines: list[str] = []
    with _server(tmp_path, "serve", progress=lines.append) as server:
        pids = _pids(tmp_path)
        assert len(pids) == 3 and pids[0] == server.pid and all(_running(pid) for pid in pids)
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.log_path == tmp_path / "logs" / "fake-server.log"
        assert server.argv[1:3] == [str(tmp_path / "fake_server.py"), "serve"] and str(server.port) in server.argv
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as answer:
            assert json.loads(answer.read())["data"][0]["id"] == "fake-model"
        info = server.info()
        assert (info.engine, info.model, info.models, info.max_model_len) == ("fake", "fake-model", ("fake-model",),
                                                                             256)
        assert info.version == "fake 1.0"  # no /version: the engine's own, from its interpreter
        assert info.metrics == ("fake:requests",) and info.props is None
        assert info.endpoints == {"/v1/models": "ok", "/version": "not exposed (HTTP 404)",
                                  "/props": "not exposed (HTTP 404)", "/metrics": "ok"}
        assert server.ready_s is not None and 0 < server.ready_s < 30
    assert [pid for pid in pids if _running(pid)] == []  # the stubborn child took SIGKILL, the runaway was found
    assert server.returncode == -15 and server.pid is None
    assert lines[0] == f"fake: starting its server on {server.url} (log: {server.log_path})"
    assert lines[-1].startswith(f"fake: ready at {server.url} after ")
    assert server.log_path.read_text().startswith(f"$ {sys.executable} {tmp_path / 'fake_server.py'} serve ")
    server.stop()  # idempotent


def test_a_server_killed_mid_run_says_so_and_its_orphans_are_still_stopped(tmp_path: Path) -> None:
    with _server(tmp_path, "serve") as server:
        pids = _pids(tmp_path)
        assert server.failure() is None  # running
        os.kill(server.pid, signal.SIGKILL)  # its children live on, reparented: only what was recorded finds them
        deadline = time.monotonic() + 10
        while server.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        said = server.failure()
        assert said is not None and said.startswith("fake's server was killed by SIGKILL; its last lines: $ ")
        assert said.endswith(f" — its log: {server.log_path}") and "\n" not in said
        assert [pid for pid in pids[1:] if _running(pid)] == pids[1:]
    assert server.returncode == -9 and [pid for pid in pids if _running(pid)] == []


def test_ctrl_c_inside_the_block_leaves_no_process(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), _server(tmp_path, "serve"):
        pids = _pids(tmp_path)
        assert all(_running(pid) for pid in pids)
        raise KeyboardInterrupt
    assert len(pids) == 3 and [pid for pid in pids if _running(pid)] == []


def test_ctrl_c_while_waiting_for_ready_leaves_no_process(tmp_path: Path) -> None:
    def interrupt(line: str) -> None:
        if "starting (" in line and (tmp_path / "children.json").exists():  # waiting, its children spawned
            raise KeyboardInterrupt

    server = _server(tmp_path, "slow", progress=interrupt, progress_every_s=0.25)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    pids = _pids(tmp_path)
    assert len(pids) == 3 and [pid for pid in pids if _running(pid)] == []
    assert server.pid is None and server.ready_s is None


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_progress_is_one_line_every_few_seconds_while_waiting(tmp_path: Path) -> None:
    lines: list[str] = []
    with _server(tmp_path, "slow", progress=lines.append, progress_every_s=0.5) as server:
        assert server.ready_s is not None and server.ready_s >= 2.0
    waiting = [line for line in lines if line.startswith("fake: starting (")]
    assert len(waiting) >= 2 and all(line.endswith(" s)…") for line in waiting)


def test_a_server_that_exits_at_once_is_one_line_with_its_last_log_lines(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as caught:
        _server(tmp_path, "fail").start()
    message = str(caught.value)
    log = tmp_path / "logs" / "fake-server.log"
    assert "\n" not in message
    assert message.startswith("fake's server exited with status 3 after ")
    assert message.endswith(", before it was ready; its last lines: loading the model | warming up | Error: cannot "
                            f"read model.gguf (bad magic) — its log: {log}")
    assert [pid for pid in _pids(tmp_path) if _running(pid)] == []


def test_a_server_missing_a_module_names_how_to_install_it(tmp_path: Path) -> None:
    engine = EngineDef(name="nomod", server_argv=lambda a: [str(a.python), "-c", "import iotrace_no_such_module"],
                       server_install="pip install iotrace-no-such-module into it")
    with pytest.raises(EngineError) as caught:
        Server(engine, python=Path(sys.executable), gguf=tmp_path / "m.gguf", log_dir=tmp_path).start()
    assert str(caught.value).endswith(f"— its log: {tmp_path / 'nomod-server.log'}; {sys.executable} lacks the module "
                                      "'iotrace_no_such_module': pip install iotrace-no-such-module into it")
    assert "ModuleNotFoundError: No module named 'iotrace_no_such_module'" in str(caught.value)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_server_never_ready_times_out_and_is_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(EngineError) as caught:
        _server(tmp_path, "hang", timeout_s=3.0).start()
    took = time.monotonic() - started
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("fake's server was not ready after 3 s (no HTTP 200 from http://127.0.0.1:")
    assert "/v1/models; stopped); its last lines: $ " in message  # it printed nothing: only the argv line is there
    assert message.endswith(f"its log: {tmp_path / 'logs' / 'fake-server.log'}; a slow start needs a longer timeout")
    (leader,) = _pids(tmp_path)
    assert not _running(leader)  # it ignored SIGTERM: SIGKILL after the grace
    assert 3.0 <= took < 3.0 + 1.0 + 8.0


def test_a_busy_port_given_is_one_line_and_nothing_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EngineError) as caught:
            _server(tmp_path, "serve", port=port).start()
    assert str(caught.value) == (f"port {port} on 127.0.0.1 is in use (another process listens there) — pass another "
                                 "port, or none to have a free one picked")
    assert _pids(tmp_path) == []


def test_a_free_port_lost_to_another_process_is_tried_once_more(tmp_path: Path) -> None:
    lines: list[str] = []
    with _server(tmp_path, "race", progress=lines.append) as server:
        assert server.info().model == "fake-model"
    assert any(line.endswith("was taken before its server bound it; trying another") for line in lines)
    log = server.log_path.read_text()
    assert log.count("$ ") == 2 and "address already in use" in log  # both attempts, in one log
    assert [pid for pid in _pids(tmp_path) if _running(pid)] == []


def test_engines_without_a_server_a_missing_interpreter_and_a_broken_argv_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"^iotrace has no server to start: iotrace's decoder runs offline only"):
        Server("iotrace").start()
    with pytest.raises(PluginError, match=r"^transformers has no server to start"):
        Server("hf").start()
    with pytest.raises(EngineError) as caught:
        _server(tmp_path, "serve", python=tmp_path / "nowhere" / "python").start()
    assert str(caught.value) == (f"no interpreter for fake at {tmp_path / 'nowhere' / 'python'} — install fake into "
                                 "a venv, or pass --engine fake=PATH/TO/python")

    def broken(args: ServeArgs) -> list[str]:
        raise KeyError("port")

    with pytest.raises(PluginError) as bad:
        Server(EngineDef(name="bad", server_argv=broken), python=Path(sys.executable), gguf=tmp_path / "m.gguf").start()
    assert str(bad.value) == "engine 'bad': server_argv raised KeyError: 'port' — fix the engine plugin's server_argv"


def test_a_remote_server_is_read_and_an_unreachable_url_is_one_line(tmp_path: Path) -> None:
    with _server(tmp_path, "serve") as server, RemoteServer(server.url + "/v1/") as remote:
        assert remote.url == server.url and remote.pid is None and remote.log_path is None
        info = remote.info()
        assert (info.model, info.max_model_len, info.engine, info.version, info.argv) == ("fake-model", 256, None,
                                                                                         None, None)
    port = free_port()
    with pytest.raises(EngineError) as caught:
        RemoteServer(f"http://127.0.0.1:{port}").check()
    assert str(caught.value) == (f"no server answers at http://127.0.0.1:{port} (Connection refused) — start it, or "
                                 "check --url")
    with pytest.raises(EngineError, match=r"^--url 'localhost:8000' is not an http\(s\) URL"):
        RemoteServer("localhost:8000").check()


def _llama_cpp_server() -> Path:
    from iotrace.engines.launch import EngineSpec, interpreter

    python = interpreter(EngineSpec("llama.cpp"))
    if not python.exists():
        pytest.skip(f"no llama.cpp engine venv at {python}: `make engines` builds it (`make test` does, unless "
                    "ENGINES=0)")
    site = list(python.parent.parent.glob("lib/python*/site-packages"))
    if not any((s / "uvicorn").is_dir() and (s / "fastapi").is_dir() for s in site):
        pytest.skip(f"llama.cpp's venv at {python.parent.parent} lacks the [server] extra (uvicorn, fastapi): "
                    "`.engines/llama.cpp/bin/pip install 'llama-cpp-python[server]==0.3.36'`, or rebuild it with "
                    "`make engines`")
    return python


@pytest.mark.slow  # loads the pinned model in llama.cpp's own server: 1-3 s to ready, a few more on a loaded machine
def test_llama_cpps_real_server_answers_a_completion_and_leaves_nothing(tmp_path: Path) -> None:
    python = _llama_cpp_server()
    from iotrace.model.gguf_file import pinned_gguf

    with Server("llama-cpp", log_dir=tmp_path, timeout_s=120.0) as server:
        pid = server.pid
        assert pid is not None and _running(pid) and server.argv[:3] == [str(python), "-m", "llama_cpp.server"]
        info = server.info()
        assert info.model == str(pinned_gguf()) and info.engine == "llama.cpp"
        assert info.version == "llama-cpp-python 0.3.36"
        assert info.endpoints["/v1/models"] == "ok" and info.endpoints["/version"] == "not exposed (HTTP 404)"
        body = json.dumps({"model": info.model, "prompt": "The capital of France is", "max_tokens": 4,
                           "temperature": 0}).encode()
        request = urllib.request.Request(server.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            done = json.loads(answer.read())
        assert done["usage"]["completion_tokens"] == 4 and done["choices"][0]["text"].strip()
        assert done["choices"][0]["finish_reason"] == "length"
    assert not _running(pid)
