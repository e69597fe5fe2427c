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


def test_autoload_can_be_switched_off(installed_plugin: dict[str, str]) -> None:
    env = {**installed_plugin, "IOTRACE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    listed = run_cli("kernels", "--json", env=env)
    assert "example-scale" not in {row["name"] for row in json.loads(listed.stdout)}


def test_plugin_named_in_the_environment() -> None:
    env = {"PYTHONPATH": str(PLUGINS), "IOTRACE_PLUGINS": "iotrace_example_kernel"}
    ran = run_cli("run", "example-scale", "--card", "l4", "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["correct"] is True


@pytest.mark.parametrize(("module", "expected"), [
    ("iotrace_bad_plugin", "plugin 'iotrace_bad_plugin' does not match iotrace's hook specs"),
    ("iotrace_clashing_plugin",
     "kernel 'gemm' is provided by both 'iotrace.kernels.gemm' and 'iotrace_clashing_plugin'"),
    ("iotrace_no_such_module", "plugin module 'iotrace_no_such_module' (from IOTRACE_PLUGINS) cannot be imported"),
])
def test_broken_plugins_are_one_line_errors(module: str, expected: str) -> None:
    result = run_cli("kernels", env={"PYTHONPATH": str(PLUGINS), "IOTRACE_PLUGINS": module})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
