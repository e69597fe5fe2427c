"""Which interpreter runs each engine, and running one request there.

Each engine runs in a child process started with its own interpreter (the venv holding its pinned build), driven by
the standalone runner shipped in ``iotrace/engines/runner/`` (a request as JSON on stdin, the result as the last line
of stdout). The engine's import, load and every crash stay in the child: iotrace's process never imports vLLM or
llama.cpp. Defaults: iotrace and transformers run in this interpreter; vLLM and llama.cpp in the venvs ``make
engines`` builds, ``.engines/<name>/bin/python`` in the checkout (or under ``$IOTRACE_ENGINES``).

The engines themselves are plugins (:mod:`iotrace.engines.registry`): :data:`ENGINES`, :data:`OWN_VENV` and the
aliases are read from it when first used, so an installed engine plugin is an ``--engine`` like the built-ins.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iotrace.engines.engine_def import default_python, engines_dir  # engines_dir public here as before
from iotrace.errors import InvalidValueError

__all__ = ["ENGINES", "RUNNER", "EngineRun", "EngineSpec", "engines_dir", "interpreter", "interpreter_problem",
           "parse_engine", "rerun_line", "run_engine"]

RUNNER = Path(__file__).resolve().parent / "runner" / "main.py"
SCHEMA = "iotrace.engine-request/1"
#: The engines, in the order the table lists them (built-ins first, then plugins'): from the registry, when read.
ENGINES: tuple[str, ...]
#: Engines whose default interpreter is a venv of their own (``.engines/<name>/bin/python``).
OWN_VENV: tuple[str, ...]


def __getattr__(name: str) -> Any:
    """``ENGINES`` (every engine's name, in the order the table lists them: built-ins first), ``OWN_VENV`` (those
    whose default interpreter is a venv of their own) and ``_ALIASES`` (alias -> name), read from the engine
    registry when asked (PEP 562), so importing this module loads no plugin."""
    from iotrace.engines.registry import registry

    if name == "ENGINES":
        return registry().names
    if name == "OWN_VENV":
        return tuple(n for n, d in registry().engines.items() if d.own_venv)
    if name == "_ALIASES":
        return dict(registry().aliases)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _own_venv(name: str) -> bool:
    from iotrace.engines.registry import registry

    found = registry().engines.get(name)
    return found is not None and found.own_venv


@dataclass(frozen=True)
class EngineSpec:
    """``--engine NAME[=PYTHON]``: an engine and the interpreter given for it (None: the default)."""

    name: str
    python: Path | None = None

    @property
    def label(self) -> str:
        return self.name if self.python is None else f"{self.name}={self.python}"


def parse_engine(text: str) -> EngineSpec:
    """``vllm`` or ``vllm=/path/to/python``; the name (or an alias) checked against :data:`ENGINES`, the engine
    registry's (a broken engine plugin's engines are not there: the fix names it)."""
    from iotrace.engines.registry import registry

    reg = registry()
    name, _, python = text.partition("=")
    name = reg.resolve(name)
    if name not in reg.engines:
        raise InvalidValueError(f"--engine {text!r}: unknown engine {name!r}", reg.unknown(name))
    if _ and not python.strip():
        raise InvalidValueError(f"--engine {text!r} names no interpreter after '='", f"pass {name}=PATH/TO/python")
    return EngineSpec(name, Path(python.strip()).expanduser() if python.strip() else None)


def interpreter(spec: EngineSpec) -> Path:
    """The interpreter that runs ``spec``'s engine (not checked here: a missing one is the engine's error)."""
    if spec.python is not None:
        return spec.python
    from iotrace.engines.registry import registry

    found = registry().engines.get(spec.name)
    return default_python(found) if found is not None else Path(sys.executable)


@dataclass
class EngineRun:
    """One engine's run: what was asked, the runner's result, or the one-line reason there is none."""

    spec: EngineSpec
    python: str
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    error: str | None = None
    wall_s: float = 0.0
    #: the command that reruns this engine alone (the request on stdin)
    argv: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def _missing(spec: EngineSpec, python: Path) -> str:
    if spec.python is None and _own_venv(spec.name):
        from iotrace.engines.registry import registry

        install = registry().engines[spec.name].install or f"make a venv with {spec.name} at {python.parent.parent}"
        return f"no interpreter for {spec.name} at {python}: {install}, or pass --engine {spec.name}=PATH/TO/python"
    return f"the interpreter {python} does not exist: pass --engine {spec.name}=PATH to an existing python"


def interpreter_problem(spec: EngineSpec) -> str | None:
    """Why ``spec``'s interpreter cannot be started (it does not exist, or is not an executable file), in one line;
    None when it can. Cheap (two file checks), so a command asks it of every engine before any engine's work."""
    import os

    python = interpreter(spec)
    if not python.exists():
        return _missing(spec, python)
    if not python.is_file() or not os.access(python, os.X_OK):
        what = "a folder" if python.is_dir() else "not executable"
        return (f"the interpreter {python} is {what}: pass --engine {spec.name}=PATH to a python executable (a "
                f"venv's bin/python)")
    return None


def run_engine(spec: EngineSpec, request: dict[str, Any], timeout_s: float = 3600.0) -> EngineRun:
    """Run ``request`` with ``spec``'s engine in its interpreter. Never raises for the engine's failures: a missing
    interpreter, one without the engine, a crash, a hang past ``timeout_s`` (a hang guard) or a result that is not
    JSON each become :attr:`EngineRun.error`, one line."""
    from iotrace.engines.registry import registry

    python = interpreter(spec)
    request = {"schema": SCHEMA, "engine": spec.name, **request}
    defn = registry().engines.get(spec.name)
    runner = defn.runner if defn is not None and defn.runner is not None else RUNNER
    run = EngineRun(spec, str(python), request, argv=[str(python), str(runner)])
    if defn is not None and not defn.offline:  # an engine plugin that only serves: nothing here runs it offline
        run.error = (f"{spec.name} has no offline runner (its plugin gives none): run it through its server, "
                     "`iotrace bench serve`")
        return run
    problem = interpreter_problem(spec)
    if problem is not None:
        run.error = problem
        return run
    started = time.perf_counter()
    try:
        done = subprocess.run(run.argv, input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        run.error = f"no result after {timeout_s:.0f} s (a hang guard): the engine was stopped"
        return run
    except OSError as exc:
        run.error = f"cannot start {python} ({exc.strerror or exc})"
        return run
    finally:
        run.wall_s = time.perf_counter() - started
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    try:
        result = json.loads(last) if last else None
    except json.JSONDecodeError:
        result = None
    if isinstance(result, dict) and result.get("error"):
        run.error = f"{result.get('stage', 'run')}: {result['error']}"
        run.result = result
    elif isinstance(result, dict) and done.returncode == 0:
        run.result = result
    else:
        run.error = _no_result(done)
    return run


def _no_result(done: subprocess.CompletedProcess) -> str:
    words = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    said = f"; its last words: {words[-1][:200]}" if words else ""
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"crashed ({name}) before its result{said}"
    return f"exited with status {done.returncode} and no result{said}"


def rerun_line(run: EngineRun) -> str:
    """The shell line that reruns one engine alone: the request on stdin, the result on stdout."""
    return f"echo {shlex.quote(json.dumps(run.request))} | {shlex.join(run.argv)}"
