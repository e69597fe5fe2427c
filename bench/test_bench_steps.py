"""The step accounting's cost (issue 43): finding an engine's steps and charging every instant of them, against the
plain report of the same trace in the same run (pytest-benchmark, CPU). Run:

    .venv/bin/python -m pytest bench/test_bench_steps.py --benchmark-json=out/bench_steps.json

- The largest corpus Kineto trace (the vLLM V1 H100 trace, 48 MB of JSON, 13,508 kernels, 11 steps): ``step_report``
  on loaded tables, against ``build_report`` of the same tables (which includes it) in the same round.
- A trace grown to about ``IOTRACE_BENCH_GROWN_GB`` (default 2) GB: that trace's events repeated, each copy shifted
  past the last, written once to a temporary file; ``load`` in a fresh process is the baseline (its wall time and
  peak RSS), then ``step_report`` on the loaded tables in the same process. The report reads a 1.9 GB, 6.7 M-event
  Kineto file in 55 CPU-seconds and 6.2 GB of memory (issue 43's figure); the steps must stay a small share of that.

Figures are recorded in extra_info with the versions and the machine, not asserted (a shared machine is too noisy to
gate on); what is asserted is that every step is found and every waterfall sums to its step.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "corpus" / "kineto" / \
    "h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz"
ROUNDS = int(os.environ.get("IOTRACE_BENCH_ROUNDS", "5"))
GROWN_GB = float(os.environ.get("IOTRACE_BENCH_GROWN_GB", "2"))


def _versions() -> dict[str, str]:
    import iotrace

    return {"iotrace": iotrace.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "cpus": str(os.cpu_count()), "command": " ".join(sys.argv)}


def _check(report) -> None:
    from iotrace.trace.reports.step_roles import CATEGORIES

    frame = report.waterfall.frame
    assert len(report.steps) == 11 * (len(frame) // 11) and len(frame) > 0
    assert (frame[[f"{c}_ns" for c in CATEGORIES]].sum(axis=1) == frame["span_ns"]).all()


def test_step_report_against_the_plain_report(benchmark) -> None:
    if not TRACE.exists():
        pytest.skip(f"corpus trace not found at {TRACE} (../shared/corpus holds the real exports)")
    from iotrace.trace import load
    from iotrace.trace.reports.report import build_report
    from iotrace.trace.reports.step_report import step_report

    tables = load(TRACE)
    reports: list[float] = []
    held: dict[str, object] = {}

    def setup() -> None:
        start = time.perf_counter()
        build_report(tables)
        reports.append(time.perf_counter() - start)

    def steps() -> None:
        held["report"] = step_report(tables)

    benchmark.pedantic(steps, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    _check(held["report"])
    steps_s, report_s = benchmark.stats.stats.median, statistics.median(reports)
    benchmark.extra_info.update({**_versions(), "trace": TRACE.name, "steps_s": steps_s, "report_s": report_s,
                                 "steps_share_of_report": steps_s / report_s})


_GROWN = """
import json, sys, time
start = time.perf_counter()
from iotrace.trace import load
from iotrace.trace.reports.step_report import step_report
tables = load(sys.argv[1])
loaded = time.perf_counter()
report = step_report(tables)
done = time.perf_counter()
frame = report.waterfall.frame
cats = [c for c in frame.columns if c.endswith("_ns") and c not in ("span_start_ns", "span_end_ns", "span_ns")]
with open("/proc/self/status") as status:
    peak = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM"))
print(json.dumps({"load_s": loaded - start, "steps_s": done - loaded, "steps": len(report.steps),
                  "sums": bool((frame[cats].sum(axis=1) == frame["span_ns"]).all()), "peak_bytes": peak}))
"""


def _grow(path: Path, gigabytes: float) -> tuple[int, int]:
    """Write the corpus trace's events repeated to about ``gigabytes`` of JSON, each copy shifted past the last
    (correlation ids too, so launches still join); (copies, events)."""
    with gzip.open(TRACE, "rt") as handle:
        document = json.load(handle)
    events = document.pop("traceEvents")
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    period = max(stamps) - min(stamps) + 1000.0
    raw = len(json.dumps(events))
    copies = max(1, int(gigabytes * 1e9 / raw))
    with path.open("w") as out:
        out.write(json.dumps(document)[:-1] + ', "traceEvents": [')
        for copy in range(copies):
            shift, corr = copy * period, copy * 10_000_000
            for index, event in enumerate(events):
                moved = dict(event)
                if isinstance(moved.get("ts"), (int, float)):
                    moved["ts"] = moved["ts"] + shift
                args = moved.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    moved["args"] = {**args, "correlation": args["correlation"] + corr}
                out.write(("," if copy or index else "") + json.dumps(moved))
        out.write("]}")
    return copies, copies * len(events)


def test_step_report_on_a_grown_trace_against_its_load(benchmark, tmp_path: Path) -> None:
    if not TRACE.exists():
        pytest.skip(f"corpus trace not found at {TRACE} (../shared/corpus holds the real exports)")
    grown = tmp_path / "grown.pt.trace.json"
    copies, events = _grow(grown, GROWN_GB)
    held: dict[str, object] = {}

    def run() -> None:
        done = subprocess.run([sys.executable, "-c", _GROWN, str(grown)], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        held["figures"] = json.loads(done.stdout.strip().splitlines()[-1])

    benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    figures = held["figures"]
    assert figures["steps"] == 11 * copies and figures["sums"]
    benchmark.extra_info.update({**_versions(), "bytes": grown.stat().st_size, "events": events, **figures,
                                 "steps_to_load": figures["steps_s"] / figures["load_s"]})
