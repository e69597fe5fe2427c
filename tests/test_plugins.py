"""Third-party kernels: installed through the `iotrace` entry-point group or named in IOTRACE_PLUGINS,
then listed, run and costed like the built-ins; broken plugins are refused with one line naming them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import PLUGINS, run_cli


@pytest.fixture
def installed_plugin(tmp_path: Path) -> dict[str, str]:
    """A site directory holding the example plugin as an installed distribution (real dist-info metadata)."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(PLUGINS / "iotrace_example_kernel.py", site)
    info = site / "iotrace_example_kernel-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: iotrace-example-kernel\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[iotrace]\nexample = iotrace_example_kernel\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_entry_point_plugin_is_listed_run_and_costed(installed_plugin: dict[str, str]) -> None:
    listed = run_cli("kernels", "--json", env=installed_plugin)
    assert listed.returncode == 0, listed.stderr
    names = {row["name"]: row for row in json.loads(listed.stdout)}
    assert names["example-scale"]["presets"] == {"1m": {"n": 1 << 20}}
    ran = run_cli("run", "example-scale", "--card", "a100", "--shape", "n=5000", "--json", env=installed_plugin)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["correct"] is True and out["flops"] == 5000 and out["bytes"] == 40000
    assert out["resources"][0]["kernel"] == "_scale_kernel" and out["resources"][0]["target"] == "sm_80"
    # A100 SXM4 80GB: 2039 GB/s, so the floor is 40000 B / 2039e9 B/s.
    assert out["roofline_floor_us"] == pytest.approx(40000 / 2039e9 * 1e6)


def test_a_broken_entry_point_does_not_stop_the_next(installed_plugin: dict[str, str]) -> None:
    """Entry points load one by one: one whose module is gone is reported with its package, the others still load."""
    site = Path(installed_plugin["PYTHONPATH"].split(os.pathsep)[0])
    info = site / "iotrace_gone-0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: iotrace-gone\nVersion: 0.2\n")
    (info / "entry_points.txt").write_text("[iotrace]\ngone = iotrace_gone_module\n")
    listed = run_cli("kernels", "--json", env=installed_plugin)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["example-scale"]["plugin"] == "example" and not rows["example-scale"]["broken"]
    assert rows["gone"]["broken"]["message"] == (
        "plugin 'gone' (entry point 'gone = iotrace_gone_module' of iotrace-gone 0.2) is broken: import raised "
        "ModuleNotFoundError: No module named 'iotrace_gone_module' — reinstall or uninstall iotrace-gone (an iotrace "
        "plugin), or set IOTRACE_DISABLE_PLUGIN_AUTOLOAD=1")
    assert listed.stderr == f"iotrace: warning: {rows['gone']['broken']['message']}\n"


def test_without_a_failures_list_the_first_failure_is_raised() -> None:
    """The trace formats' manager is built without a failures list: a broken trace plugin is still an error there,
    one line naming it (their own behaviour, kept)."""
    from iotrace.errors import PluginError
    from iotrace.plugin_manager import PluginFailure, build, collect, hookimpl
    from iotrace.trace import hookspecs
    from iotrace.trace.parser import TraceParser

    class Misspelt:
        @hookimpl
        def iotrace_trace_parser(self) -> list[TraceParser]:
            return []

    class Wrong:
        @hookimpl
        def iotrace_trace_parsers(self) -> str:
            return "nsys"

    with pytest.raises(PluginError, match=r"^trace plugin 'misspelt' \(built-in\) is broken: iotrace_trace_parser "
                                          r"is not a hook of iotrace's trace hook spec — "):
        build(hookspecs, [("misspelt", Misspelt())], "iotrace.no-such-group", what="trace plugin",
              contract="iotrace's trace hook spec")
    pm = build(hookspecs, [("wrong", Wrong())], "iotrace.no-such-group", what="trace plugin")
    with pytest.raises(PluginError, match=r"^trace plugin 'wrong' is broken: iotrace_trace_parsers returned str, not "
                                          r"a list of TraceParser — return a list of TraceParser instances$"):
        collect(pm, "iotrace_trace_parsers", TraceParser, what="trace plugin", noun="trace format")
    failures: list[PluginFailure] = []
    assert collect(pm, "iotrace_trace_parsers", TraceParser, noun="trace format", failures=failures) == {}
    assert [(f.plugin, f.hook, f.error) for f in failures] == [
        ("wrong", "iotrace_trace_parsers", "returned str, not a list of TraceParser")]


def test_autoload_can_be_switched_off(installed_plugin: dict[str, str]) -> None:
    env = {**installed_plugin, "IOTRACE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    listed = run_cli("kernels", "--json", env=env)
    assert "example-scale" not in {row["name"] for row in json.loads(listed.stdout)}


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_plugin_named_in_the_environment() -> None:
    env = {"PYTHONPATH": str(PLUGINS), "IOTRACE_PLUGINS": "iotrace_example_kernel"}
    ran = run_cli("run", "example-scale", "--card", "l4", "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["correct"] is True


#: Broken plugin modules, one per way a plugin can fail: module -> (its source, the hook named, the error).
BROKEN: dict[str, tuple[str, str, str]] = {
    "broken_import": ("import iotrace_missing_dependency_xyz\n", "import",
                      "raised ModuleNotFoundError: No module named 'iotrace_missing_dependency_xyz'"),
    "broken_abstract": ("""
from typing import ClassVar
from iotrace.plugins import KernelSpec, hookimpl

class HalfDoneSpec(KernelSpec):
    name: ClassVar[str] = "half-done"

    def make_inputs(self, shape, dtype, device, seed):
        return {}

@hookimpl
def iotrace_kernels():
    return [HalfDoneSpec()]
""", "iotrace_kernels", "raised TypeError: Can't instantiate abstract class HalfDoneSpec with abstract methods "
        "compile_units, cost, default_config, launch_kernel, make_outputs, reference, space, tolerance"),
    "broken_raises": ("""
from iotrace.plugins import hookimpl

@hookimpl
def iotrace_kernels():
    raise RuntimeError("boom")
""", "iotrace_kernels", "raised RuntimeError: boom"),
    "broken_returns": ("""
from iotrace.plugins import hookimpl

@hookimpl
def iotrace_kernels():
    return {"scale": 1.5}
""", "iotrace_kernels", "returned dict, not a list of KernelSpec"),
    "broken_item": ("""
from iotrace.plugins import hookimpl

@hookimpl
def iotrace_kernels():
    return ["scale"]
""", "iotrace_kernels", "returned 'scale', not a named KernelSpec"),
    "broken_clash": ("""
from iotrace.kernels.gemm import GemmSpec
from iotrace.plugins import hookimpl

@hookimpl
def iotrace_kernels():
    return [GemmSpec()]
""", "iotrace_kernels", "returned kernel 'gemm', which 'iotrace.kernels.gemm' provides too"),
    "broken_signature": ("""
from iotrace.plugins import hookimpl

@hookimpl
def iotrace_kernels(card):
    return []
""", "iotrace_kernels", "does not match iotrace's hook specs: hookimpl definition: iotrace_kernels(card) "
        "Argument(s) {'card'} are declared in the hookimpl but can not be found in the hookspec"),
    "broken_hook_name": ("""
from iotrace.plugins import hookimpl

@hookimpl
def iotrace_kernel():
    return []
""", "iotrace_kernel", "is not a hook of iotrace's hook specs"),
    "iotrace_no_such_module": ("", "import", "raised ModuleNotFoundError: No module named 'iotrace_no_such_module'"),
}


@pytest.fixture
def broken_plugins(tmp_path: Path) -> Path:
    """A folder holding every module of :data:`BROKEN` (but the one that does not exist)."""
    for module, (source, _, _) in BROKEN.items():
        if source:
            (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
    return tmp_path


def _plugins_env(folder: Path, *modules: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(PLUGINS)]), "IOTRACE_PLUGINS": ",".join(modules),
            "IOTRACE_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _line(module: str) -> str:
    """The start of the one line a broken module is: the plugin, where it came from, the hook and the error."""
    _, hook, error = BROKEN[module]
    return f"plugin {module!r} (from IOTRACE_PLUGINS) is broken: {hook} {error} — "


@pytest.mark.parametrize("module", list(BROKEN))
def test_running_a_broken_plugin_is_one_line_naming_plugin_hook_and_error(broken_plugins: Path, module: str) -> None:
    result = run_cli("run", module, "--card", "a100", env=_plugins_env(broken_plugins, module))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("iotrace: error: " + _line(module)), result.stderr
    assert result.stdout == ""


def test_a_kernel_of_a_broken_plugin_is_named_by_its_failure(broken_plugins: Path) -> None:
    """The abstract spec cannot be made, yet its module names the kernel: asking for the kernel gives the failure."""
    result = run_cli("run", "half-done", "--card", "a100", env=_plugins_env(broken_plugins, "broken_abstract"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["iotrace: error: " + _line("broken_abstract")
                                          + "implement every abstract method of iotrace.plugins.spec.KernelSpec"]


@pytest.mark.slow
def test_broken_plugins_leave_every_other_kernel_and_command_working(broken_plugins: Path, tmp_path: Path) -> None:
    """Slow: six CLI processes, runs and a tune among them (each compiles a kernel for a card): 33 s on an idle 2-core
    machine, 51-73 s on one at load average 6-9."""
    env = _plugins_env(broken_plugins, *BROKEN, "iotrace_example_kernel", "iotrace_bad_plugin",
                       "iotrace_clashing_plugin")
    listed = run_cli("kernels", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    good = {row["name"]: row for row in rows if not row["broken"]}
    assert {"gemm", "rmsnorm", "attention-decode", "example-scale"} <= set(good)
    assert good["gemm"]["plugin"] == "iotrace.kernels.gemm" and good["example-scale"]["plugin"] == (
        "iotrace_example_kernel")
    broken = {row["plugin"]: row["broken"] for row in rows if row["broken"]}
    assert set(broken) == {*BROKEN, "iotrace_bad_plugin", "iotrace_clashing_plugin"}
    for module, (_, hook, error) in BROKEN.items():
        assert (broken[module]["hook"], broken[module]["error"]) == (hook, error)
        assert broken[module]["message"].startswith(_line(module))
    assert broken["broken_abstract"]["provides"] == ["half-done"]
    # stderr: one warning line per broken plugin, the same line
    warnings = listed.stderr.splitlines()
    assert sorted(warnings) == sorted(f"iotrace: warning: {b['message']}" for b in broken.values())

    # The table in a pipe: every good kernel, every broken plugin marked broken, every preset whole.
    code, text, err = _piped(tmp_path, "kernels", env=env)
    assert code == 0, err
    table = _table(text)
    assert set(table) == set(good) | {"half-done", *(set(broken) - {"broken_abstract"})}
    for module in broken:
        name = "half-done" if module == "broken_abstract" else module
        assert " ".join(table[name][1].split()).startswith(f"plugin {module!r} (from IOTRACE_PLUGINS) is broken: ")
    for name, row in good.items():
        assert table[name][4] == (f"{len(row['presets'])}: {', '.join(row['presets'])}" if row["presets"] else "—")
    assert "…" not in text

    ran = run_cli("run", "example-scale", "--card", "a100", "--shape", "n=5000", "--json", env=env)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    assert json.loads(ran.stdout)["correct"] is True
    tuned = run_cli("tune", "example-scale", "--card", "a100", "--shape", "n=5000", "--static", "--no-cache", "--json",
                    env=env)
    assert tuned.returncode == 0 and tuned.stderr == "", tuned.stderr
    best = json.loads(tuned.stdout)["best"]
    assert best["config"]["BLOCK"] in (256, 1024) and best["config"]["num_warps"] in (2, 4)
    gemm = run_cli("run", "gemm", "--card", "a100", "--shape", "M=64,N=64,K=64", "--json", env=env)
    assert gemm.returncode == 0 and json.loads(gemm.stdout)["correct"] is True  # the built-in, not the clash


METHODS = """
from iotrace.plugins import hookimpl
from iotrace_example_kernel import ScaleSpec


class NoSpaceSpec(ScaleSpec):
    name = "no-space"

    def space(self, shape, dtype, card, backend="triton"):
        raise KeyError("BLOCK")


class NoInputsSpec(ScaleSpec):
    name = "no-inputs"

    def make_inputs(self, shape, dtype, device, seed):
        raise ValueError("cannot make\\n inputs")


@hookimpl
def iotrace_kernels():
    return [NoSpaceSpec(), NoInputsSpec()]
"""


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_kernel_method_that_raises_is_one_line_naming_the_kernel_and_method(tmp_path: Path) -> None:
    """A plugin that loads but whose kernel's own method raises: `kernels` marks that kernel broken (the listing calls
    ``space``) and lists its sibling; `run` of a kernel whose ``make_inputs`` raises is one line, exit 2."""
    (tmp_path / "broken_methods.py").write_text(METHODS, encoding="utf-8")
    env = _plugins_env(tmp_path, "broken_methods")
    listed = run_cli("kernels", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert not rows["no-inputs"]["broken"] and rows["no-inputs"]["plugin"] == "broken_methods"
    assert rows["no-space"]["plugin"] == "broken_methods"
    message = ("kernel 'no-space' (plugin 'broken_methods', from IOTRACE_PLUGINS) is broken: NoSpaceSpec.space raised "
               "KeyError: 'BLOCK' — fix NoSpaceSpec.space, or remove the plugin")
    assert rows["no-space"]["broken"]["message"] == message
    assert listed.stderr == f"iotrace: warning: {message}\n"
    ran = run_cli("run", "no-inputs", "--card", "a100", env=env)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr == ("iotrace: error: kernel 'no-inputs' (plugin 'broken_methods', from IOTRACE_PLUGINS) is "
                          "broken: NoInputsSpec.make_inputs raised ValueError: cannot make inputs — fix "
                          "NoInputsSpec.make_inputs, or remove the plugin\n")


def test_an_unknown_kernel_names_the_broken_plugins(broken_plugins: Path) -> None:
    """A name no plugin provides may be the broken plugin's kernel: the error says which plugins are broken; with
    one, why."""
    one = run_cli("run", "no-such-kernel", "--card", "a100", env=_plugins_env(broken_plugins, "broken_raises"))
    assert one.returncode == 2
    (line,) = one.stderr.splitlines()
    assert line.startswith("iotrace: error: no kernel called 'no-such-kernel' — installed: ")
    assert line.endswith("; not listed, as broken: " + _line("broken_raises")
                         + "fix the plugin's iotrace_kernels, or remove the plugin")


def _piped(tmp_path: Path, *args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``iotrace ARGS > file`` with no COLUMNS (unlike run_cli): the exit code, what the file holds, and stderr."""
    import subprocess
    import sys

    full_env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full_env.update(NO_COLOR="1", **env)
    out = tmp_path / "stdout.txt"
    with out.open("w", encoding="utf-8") as handle:
        done = subprocess.run([sys.executable, "-m", "iotrace", *args], stdout=handle, stderr=subprocess.PIPE,
                              text=True, env=full_env, timeout=120)
    return done.returncode, out.read_text(encoding="utf-8"), done.stderr


def _table(text: str) -> dict[str, list[str]]:
    """A boxed rich table's rows by their first cell, a cell wrapped over lines joined back with spaces."""
    rows: dict[str, list[str]] = {}
    last: list[str] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells[0]:
            last = rows[cells[0]] = cells
        else:
            for i, cell in enumerate(cells):
                last[i] = f"{last[i]} {cell}".strip() if cell else last[i]
    return rows


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_kernels_in_a_pipe_lists_every_preset(tmp_path: Path) -> None:
    """In a pipe every preset is listed whole (the cell wraps), never cut to three names and "…"."""
    rows = {row["name"]: row for row in json.loads(run_cli("kernels", "--json").stdout)}
    code, text, err = _piped(tmp_path, "kernels", env={})
    assert code == 0, err
    table = _table(text)
    assert set(table) == set(rows)
    for name, row in rows.items():
        assert table[name][4] == f"{len(row['presets'])}: {', '.join(row['presets'])}", name
    assert "…" not in text
