"""Engines as pluggy plugins (iotrace.engines.registry): the four built-ins through the hook, a plugin module through
IOTRACE_ENGINE_PLUGINS or an installed entry point, a broken one as one line with the built-ins still working, the
names launch.py has always had, and the plugin guide's engine example as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from iotrace.engines import launch, registry
from iotrace.engines.engine_def import EngineDef, ServeArgs
from iotrace.engines.launch import EngineSpec, engines_dir, interpreter, parse_engine, run_engine
from iotrace.engines.server import Server
from iotrace.errors import InvalidValueError, PluginError
from tests.conftest import CLI_ENV

BUILTINS = ("iotrace", "transformers", "vllm", "llama.cpp")
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "contributing" / "plugins.md"

GOOD = '''
from iotrace.engines.registry import EngineDef, ServeArgs, hookimpl


def argv(args: ServeArgs) -> list[str]:
    return [str(args.python), "-m", "echo_server", "--port", str(args.port), *args.extra_args]


@hookimpl
def iotrace_engines():
    return [EngineDef(name="echo", aliases=("echo-server",), own_venv=True, server_argv=argv,
                      ready_path="/health", version_of=lambda python: "echo 2.0")]
'''


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator:
    """``load(name=source, ...)``: write each module into a folder on sys.path, name them all in
    IOTRACE_ENGINE_PLUGINS, and load the engines afresh; afterwards, the process's registry as it was."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("IOTRACE_DISABLE_PLUGIN_AUTOLOAD", "1")  # only what the test names: no installed plugin

    def load(**modules: str) -> registry.EngineRegistry:
        for name, source in modules.items():
            if source:
                (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        monkeypatch.setenv(registry.ENV_ENGINE_PLUGINS, ",".join(modules))
        return registry.reload()

    yield load
    for name in list(sys.modules):
        if name.startswith("engine_plugin_"):
            del sys.modules[name]
    monkeypatch.undo()
    registry.reload()


def test_the_builtins_come_through_the_hook_with_the_names_launch_always_had() -> None:
    reg = registry.registry()
    assert reg.names == BUILTINS and launch.ENGINES == BUILTINS
    assert set(reg.owners.values()) == {"iotrace.engines.builtins"} and reg.broken == ()
    assert reg.sources == {"iotrace.engines.builtins": "built-in"}
    assert launch.OWN_VENV == ("vllm", "llama.cpp")
    assert launch._ALIASES == {"llama-cpp": "llama.cpp", "llamacpp": "llama.cpp", "llama_cpp": "llama.cpp",
                               "hf": "transformers"}
    for alias, name in launch._ALIASES.items():
        assert parse_engine(alias) == EngineSpec(name) and parse_engine(alias.upper()) == EngineSpec(name)
    assert parse_engine("llama-cpp=/opt/py") == EngineSpec("llama.cpp", Path("/opt/py"))
    assert [d.serves for d in reg.engines.values()] == [False, False, True, True]
    assert registry.engine("hf").why_no_server() == ("transformers has no server to start: iotrace runs "
                                                     "transformers offline only (`iotrace bench --engine "
                                                     "transformers`)")
    assert registry.engine("vllm").model_format == "hf" and registry.engine("llama.cpp").model_format == "gguf"


def test_the_builtin_servers_command_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # llama.cpp's threads: engine_threads (tests/test_engines.py)
    args = ServeArgs(python=Path("/v/bin/python"), gguf=Path("/m/model.gguf"), model_dir=Path("/m/hf"), port=8123,
                     context=1024, extra_args=("--max-num-seqs", "4"))
    assert registry.engine("vllm").argv(args) == [
        "/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/hf", "--dtype", "float32",
        "--enforce-eager", "--max-model-len", "1024", "--host", "127.0.0.1", "--port", "8123", "--max-num-seqs", "4"]
    assert registry.engine("llama-cpp").argv(args) == [
        "/v/bin/python", "-m", "llama_cpp.server", "--model", "/m/model.gguf", "--host", "127.0.0.1", "--port",
        "8123", "--n_ctx", "1024", "--interrupt_requests", "False", "--n_threads", "3", "--n_threads_batch", "3",
        "--max-num-seqs", "4"]
    assert registry.engine("vllm").server_env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    with pytest.raises(PluginError, match=r"^iotrace has no server to start"):
        registry.engine("iotrace").argv(args)
    assert registry.engine("iotrace").version(Path(sys.executable)).startswith("iotrace ")


def test_a_plugin_module_adds_an_engine_every_name_of_launch_sees(plugins) -> None:
    reg = plugins(engine_plugin_echo=GOOD)
    assert reg.broken == () and reg.names == (*BUILTINS, "echo")
    assert reg.owners["echo"] == "engine_plugin_echo"
    assert reg.sources["engine_plugin_echo"] == "from IOTRACE_ENGINE_PLUGINS"
    names, own_venv = launch.ENGINES, launch.OWN_VENV  # read from the registry on each access
    assert names == (*BUILTINS, "echo") and own_venv == ("vllm", "llama.cpp", "echo")
    assert parse_engine("Echo-Server") == EngineSpec("echo")
    assert interpreter(EngineSpec("echo")) == engines_dir() / "echo" / "bin" / "python"
    server = Server("echo-server")
    assert server.engine is reg.engines["echo"] and server.python == engines_dir() / "echo" / "bin" / "python"
    assert reg.engines["echo"].version(Path("/x")) == "echo 2.0"
    # A serving-only engine: the offline bench says so in one line, before looking for its interpreter.
    run = run_engine(EngineSpec("echo"), {})
    assert run.error == ("echo has no offline runner (its plugin gives none): run it through its server, "
                         "`iotrace bench serve`")


def _line(plugin: str, hook: str, error: str, fix: str) -> str:
    return f"engine plugin '{plugin}' (from IOTRACE_ENGINE_PLUGINS) is broken: {hook} {error} — {fix}"


BROKEN = {
    "raises": ('''
        from iotrace.engines.registry import hookimpl

        @hookimpl
        def iotrace_engines():
            raise RuntimeError("boom")
        ''', "iotrace_engines", "raised RuntimeError: boom", "fix the plugin's iotrace_engines, or remove the plugin"),
    "wrong_type": ('''
        from iotrace.engines.registry import hookimpl

        @hookimpl
        def iotrace_engines():
            return {"name": "x"}
        ''', "iotrace_engines", "returned dict, not a list of EngineDef", "return a list of EngineDef instances"),
    "wrong_item": ('''
        from iotrace.engines.registry import hookimpl

        @hookimpl
        def iotrace_engines():
            return ["sglang"]
        ''', "iotrace_engines", "returned 'sglang', not a named EngineDef",
        "derive from iotrace.engines.engine_def.EngineDef and set `name`"),
    "bad_field": ('''
        from iotrace.engines.registry import EngineDef, hookimpl

        @hookimpl
        def iotrace_engines():
            return [EngineDef(name="My Engine")]
        ''', "iotrace_engines",
        "raised ValueError: EngineDef name 'My Engine' is not lower-case letters, digits, '.', '_' or '-'",
        "fix the plugin's iotrace_engines, or remove the plugin"),
    "import_error": ('''
        raise ImportError("the SDK is missing")
        ''', "import", "raised ImportError: the SDK is missing",
        "fix the error in the plugin's module (or what it imports), or remove the plugin"),
    "missing": ("", "import", "raised ModuleNotFoundError: No module named 'engine_plugin_missing'",
                "check the module name, and that its folder is on sys.path (PYTHONPATH) or its package is installed"),
    "name_clash": ('''
        from iotrace.engines.registry import EngineDef, hookimpl

        @hookimpl
        def iotrace_engines():
            return [EngineDef(name="vllm")]
        ''', "iotrace_engines", "returned engine 'vllm', which 'iotrace.engines.builtins' provides too",
        "rename one, or remove one of the two plugins"),
    "alias_clash": ('''
        from iotrace.engines.registry import EngineDef, hookimpl

        @hookimpl
        def iotrace_engines():
            return [EngineDef(name="sglang", aliases=("hf",))]
        ''', "iotrace_engines", "returned alias 'hf' of 'sglang', which 'iotrace.engines.builtins' has for "
        "'transformers'", "rename one, or remove one of the two plugins"),
    "name_is_alias": ('''
        from iotrace.engines.registry import EngineDef, hookimpl

        @hookimpl
        def iotrace_engines():
            return [EngineDef(name="llama-cpp")]
        ''', "iotrace_engines", "returned engine 'llama-cpp', which 'iotrace.engines.builtins' has as an alias of "
        "'llama.cpp'", "rename one, or remove one of the two plugins"),
    "bad_signature": ('''
        from iotrace.engines.registry import hookimpl

        @hookimpl
        def iotrace_engines(config):
            return []
        ''', "iotrace_engines", None, "see iotrace/engines/hookspecs.py for the contract"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_is_one_line_and_the_others_keep_working(plugins, case: str) -> None:
    source, hook, error, fix = BROKEN[case]
    name = f"engine_plugin_{case}"
    reg = plugins(engine_plugin_echo=GOOD, **{name: source})
    (failure,) = reg.broken
    assert (failure.plugin, failure.hook, failure.fix, failure.what) == (name, hook, fix, "engine plugin")
    if error is None:  # pluggy's own words for a wrong signature; the line names the plugin, the hook and the spec
        assert failure.error.startswith("does not match iotrace's engine hook spec: ") and "config" in failure.error
    else:
        assert failure.error == error
        assert failure.line == _line(name, hook, error, fix)
    assert "\n" not in failure.line
    assert reg.names == (*BUILTINS, "echo")  # the built-ins and the good plugin
    assert parse_engine("llama-cpp") == EngineSpec("llama.cpp") and parse_engine("echo") == EngineSpec("echo")
    with pytest.raises(InvalidValueError) as unknown:
        parse_engine("sglang")
    assert str(unknown.value) == (f"--engine 'sglang': unknown engine 'sglang' — use one of iotrace, transformers, "
                                  f"vllm, llama.cpp, echo; not listed, as broken: {failure.line}")
    with pytest.raises(PluginError) as asked:
        registry.engine(name)  # the plugin's own name answers with its line
    assert str(asked.value) == failure.problem + " — " + fix


def test_an_installed_entry_point_is_loaded_and_autoload_off_skips_it(plugins, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "engine_plugin_installed.py").write_text(GOOD, encoding="utf-8")
    info = tmp_path / "iotrace_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: iotrace-echo\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[iotrace.engines]\necho = engine_plugin_installed\n", encoding="utf-8")
    monkeypatch.setenv("IOTRACE_DISABLE_PLUGIN_AUTOLOAD", "0")
    reg = plugins()
    assert reg.names == (*BUILTINS, "echo") and reg.owners["echo"] == "echo"
    assert reg.sources["echo"] == "entry point 'echo = engine_plugin_installed' of iotrace-echo 0.1"
    monkeypatch.setenv("IOTRACE_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert registry.reload().names == BUILTINS


def test_an_engine_def_refuses_wrong_fields() -> None:
    with pytest.raises(ValueError, match="aliases must be a tuple of lower-case names"):
        EngineDef(name="x", aliases="x-alias")  # a string is not a tuple of names
    with pytest.raises(ValueError, match="ready_path must be a path starting with '/'"):
        EngineDef(name="x", ready_path="health")
    with pytest.raises(TypeError, match="server_argv must be callable"):
        EngineDef(name="x", server_argv=["python", "-m", "x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model_format must be 'gguf' or 'hf'"):
        EngineDef(name="x", model_format="onnx")  # type: ignore[arg-type]
    wrong = EngineDef(name="x", server_argv=lambda args: "python -m x")  # type: ignore[arg-type,return-value]
    with pytest.raises(PluginError, match=r"^engine 'x': server_argv returned str 'python -m x', not a non-empty list"):
        wrong.argv(ServeArgs(Path("p"), Path("m.gguf"), None, 1))
    assert EngineDef(name="x").version(Path("p")) == "unknown (the engine plugin gives no version_of)"
    assert EngineDef(name="x", version_of=lambda p: 1 / 0).version(Path("p")) == (
        "unknown (version_of raised ZeroDivisionError: division by zero)")


def _guide_blocks() -> dict[str, str]:
    block = re.compile(r'^```\w+ title="(?P<title>[^"]+)"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL)
    return {m["title"]: m["body"] for m in block.finditer(GUIDE.read_text(encoding="utf-8"))}


def test_the_guides_engine_plugin_runs_as_written(tmp_path: Path) -> None:
    """The page's module, written out as a reader would, and its command run from that folder, print what the page
    shows (the page writes /path/to for this machine's paths)."""
    blocks = _guide_blocks()
    (tmp_path / "sglang_engine.py").write_text(blocks["sglang_engine.py"], encoding="utf-8")
    (command,) = [line[2:] for line in blocks["engines"].splitlines() if line.startswith("$ ")]
    assert command == "PYTHONPATH=. IOTRACE_ENGINE_PLUGINS=sglang_engine python -m iotrace.engines.registry"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "IOTRACE_ENGINE_PLUGINS")}
    env.update(CLI_ENV, PYTHONPATH=".", IOTRACE_ENGINE_PLUGINS="sglang_engine", IOTRACE_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run([sys.executable, "-m", "iotrace.engines.registry"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].split(" ")[0] for line in lines] == [*BUILTINS, "sglang"]
    shown = [line.replace("/path/to/iotrace/.engines", str(engines_dir())).replace("/path/to/python", sys.executable)
             for line in blocks["engines output"].splitlines()]
    assert [line for line in shown if line not in lines] == []
    # What the page's EngineDef gives the server.
    sys.path.insert(0, str(tmp_path))
    try:
        import sglang_engine  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("sglang_engine", None)
    (defn,) = sglang_engine.iotrace_engines()
    args = ServeArgs(python=Path("/e/bin/python"), gguf=Path("/m.gguf"), model_dir=Path("/hf"), port=9000,
                     extra_args=("--mem-fraction-static", "0.8"))
    assert defn.argv(args) == ["/e/bin/python", "-m", "sglang.launch_server", "--model-path", "/hf", "--host",
                               "127.0.0.1", "--port", "9000", "--context-length", "512", "--mem-fraction-static",
                               "0.8"]
    assert (defn.own_venv, defn.offline, defn.model_format) == (True, False, "hf")
    assert defn.version(Path(sys.executable)) == "unknown (not installed for " + sys.executable + ")"
    assert blocks["engine pyproject.toml"].strip().splitlines() == ['[project.entry-points."iotrace.engines"]',
                                                                     'sglang = "sglang_engine"']
