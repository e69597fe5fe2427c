"""The suite's budget holds: no test over 60 s without the ``slow`` mark in the last `make test` run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.budget import BUDGET_S, DURATIONS, Recorder, Timing, over_budget, read

pytest_plugins = ["pytester"]


def test_the_last_make_test_run_kept_every_unmarked_test_under_the_budget() -> None:
    if not DURATIONS.exists():
        pytest.skip(f"no {DURATIONS.name}: `make test` writes it (pytest --durations-file), then checks it")
    wall_s, tests = read(DURATIONS)
    late = over_budget(tests)
    assert not late, (f"{len(late)} test(s) took more than {BUDGET_S:.0f} s without @pytest.mark.slow in the last "
                      f"run ({wall_s:.0f} s wall): " + "; ".join(f"{t.nodeid} {t.seconds:.1f} s" for t in late)
                      + " — make it cheaper, or mark it slow with the reason")


def test_the_recorder_sums_phases_and_the_check_spares_only_slow_tests(tmp_path: Path) -> None:
    recorder = Recorder()
    for phase, seconds in (("setup", 50.0), ("call", 11.0), ("teardown", 0.5)):
        recorder.add("t.py::late", phase, seconds, {"late": 1}, "passed")
    recorder.add("t.py::slow", "call", 300.0, {"slow": 1}, "passed")
    recorder.add("t.py::quick", "call", 59.9, {}, "failed")
    recorder.write(tmp_path / "d.json", wall_s=400.04)
    wall_s, tests = read(tmp_path / "d.json")
    assert wall_s == 400.0
    assert [t.nodeid for t in tests] == ["t.py::slow", "t.py::late", "t.py::quick"]
    assert over_budget(tests) == [Timing("t.py::late", 61.5, False, "passed")]
    assert tests[2].outcome == "failed"


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_module_sharing_a_module_fixture_runs_on_one_xdist_worker(pytester: pytest.Pytester) -> None:
    """`make test` runs under ``--dist loadgroup``; the conftest groups a module whose tests share a module-scoped
    fixture so the fixture is built once. Checked for real in two workers: the grouped module's tests report one
    worker and the ``@module`` group suffix, the other module's tests spread over both."""
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_shared="""
import os, pytest
@pytest.fixture(scope="module")
def built():
    return os.environ["PYTEST_XDIST_WORKER"]
@pytest.mark.parametrize("i", range(8))
def test_shared(built, i):
    assert built == os.environ["PYTEST_XDIST_WORKER"]
""", test_free="""
import pytest, time
@pytest.mark.parametrize("i", range(8))
def test_free(i):
    time.sleep(0.2)
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=16)
    lines = [line for line in result.outlines if " PASSED " in line]
    shared = {line.split()[0] for line in lines if "test_shared[" in line}
    free = {line.split()[0] for line in lines if "test_free[" in line}
    assert len(shared) == 1 and all(line.rstrip().endswith("@test_shared") for line in lines if "test_shared[" in line)
    assert free == {"[gw0]", "[gw1]"}
