"""The suite's time budget: each test's wall time recorded by `make test`, and the check that keeps it.

`make test` runs pytest with ``--durations-file=.pytest-durations.json`` (with the ``=``: as two words, once the
file exists pytest reads it as a path to test and never loads tests/conftest.py, which adds the option, so a second
`make test` failed); the conftest hooks record every test's setup + call + teardown time there (on the xdist
controller, once per test), with whether it is marked ``slow``.
tests/test_suite_budget.py then fails when a test over :data:`BUDGET_S` is not marked ``slow``: the fast subset
(`make test-fast`) stays fast, and a slow test is a decision someone wrote down, not an accident.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

#: The most one test may take without the ``slow`` mark (issue 29: "fails when a single test exceeds 60 s").
BUDGET_S = 60.0
#: Where `make test` records the last run (git-ignored).
DURATIONS = Path(__file__).resolve().parents[1] / ".pytest-durations.json"


@dataclass
class Timing:
    """One test's wall time over its three phases, and its marks."""

    nodeid: str
    seconds: float = 0.0
    slow: bool = False
    outcome: str = "passed"


class Recorder:
    """Collects ``pytest_runtest_logreport`` reports into one :class:`Timing` per test."""

    def __init__(self) -> None:
        self.tests: dict[str, Timing] = {}

    def add(self, nodeid: str, phase: str, seconds: float, keywords: dict[str, object], outcome: str) -> None:
        entry = self.tests.setdefault(nodeid, Timing(nodeid))
        entry.seconds += seconds
        entry.slow = entry.slow or "slow" in keywords
        if phase == "call" or outcome != "passed":
            entry.outcome = outcome

    def write(self, path: Path, wall_s: float) -> None:
        tests = sorted(self.tests.values(), key=lambda t: -t.seconds)
        path.write_text(json.dumps({"wall_s": round(wall_s, 1), "tests": [asdict(t) for t in tests]}, indent=1))


def read(path: Path) -> tuple[float, list[Timing]]:
    """The wall time and the tests of a durations file written by :meth:`Recorder.write`."""
    data = json.loads(path.read_text())
    return data["wall_s"], [Timing(**t) for t in data["tests"]]


def over_budget(tests: list[Timing], budget_s: float = BUDGET_S) -> list[Timing]:
    """The tests that took longer than ``budget_s`` without the ``slow`` mark, longest first."""
    return sorted((t for t in tests if t.seconds > budget_s and not t.slow), key=lambda t: -t.seconds)
