"""The suite's budget holds: no test over 60 s without the ``slow`` mark in the last `make test` run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.budget import BUDGET_S, DURATIONS, Recorder, Timing, over_budget, read


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
