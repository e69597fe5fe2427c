"""The Nsight Compute reader against the ncu_report module a GPU machine's own Nsight Compute ships.

A machine with Nsight Compute 2025.3 puts its extras/python/ncu_report on the path, and that module has no
``IAction.sections()`` (an H200 run of ``iotrace run --ncu`` ended in an AttributeError on it, 2026-12-04). The
Makefile installs PyPI's ncu-report 2025.3.1, the same module, beside the venv's current one; a child process reads
every corpus report through it and must agree with this process's reading on every value, saying only that it could
not list the sections captured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from iotrace.trace import load
from iotrace.trace.formats.ncu_rep import NO_SECTIONS
from iotrace.trace.formats.ncu_rep_rules import NO_RULES

OLD_MODULE = Path(sys.prefix) / "ncu-report-2025.3"

_SUMMARY = """
import json, sys
from iotrace.trace import load
from tests.test_ncu_report_versions import summary
print(json.dumps({p: summary(load(p)) for p in sys.argv[1:]}))
"""


def _plain(values) -> list:
    """A column's values as JSON compares them: missing ones (NaN, NA, None) as None."""
    return [None if pd.isna(v) else v.item() if hasattr(v, "item") else v for v in values]


def summary(tables) -> dict:
    """What a reading of a report must agree on, whichever module read it (as JSON, to compare across processes)."""
    kernels, metrics, rules = tables.kernels, tables.metrics, tables.rules
    return {"kernels": kernels["name"].tolist(), "registers": _plain(kernels["registers_per_thread"]),
            "durations": _plain(kernels["duration_ns"]), "metrics": len(metrics),
            "metric_sum": float(metrics["value"].sum()),
            "rules": [_plain(row) for row in rules[["kernel_id", "rule_id", "title", "speedup"]].values],
            "notes": [n for n in tables.meta["notes"] if not n.startswith((NO_SECTIONS, NO_RULES))],
            "no_rules": [n.split(";")[0] for n in tables.meta["notes"] if n.startswith(NO_RULES)]}


@pytest.mark.slow  # two readings of every corpus report, one in a child process: 15 s
def test_every_corpus_report_reads_alike_through_nsight_compute_2025_3s_module(corpus: Path) -> None:
    if not (OLD_MODULE / "ncu_report").is_dir():
        pytest.skip(f"{OLD_MODULE} is not installed (make test installs it: pip install --target DIR "
                    "ncu-report==2025.3.1)")
    files = sorted(str(p) for p in (corpus / "ncu-rep").glob("*.ncu-rep"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(OLD_MODULE), str(Path(__file__).parents[1])])}
    child = subprocess.run([sys.executable, "-c", _SUMMARY, *files], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    old = json.loads(child.stdout)
    for path in files:
        assert old[path] == json.loads(json.dumps(summary(load(path)))), Path(path).name
    # The older module's own reading says once what it could not list, and nothing else changes.
    tables = subprocess.run([sys.executable, "-c", "import sys; from iotrace.trace import load; "
                             "print(*load(sys.argv[1]).meta['notes'], sep='\\n')", files[0]], env=env,
                            capture_output=True, text=True, timeout=300)
    [note] = [n for n in tables.stdout.splitlines() if n.startswith(NO_SECTIONS)]
    assert "ncu-report-2025.3" in note and "iotrace[nsight]" in note
