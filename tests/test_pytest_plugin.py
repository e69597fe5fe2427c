"""The pytest plugin's gates, tested with controlled timings in real pytest sessions (pytester, in subprocesses).

Each session benchmarks a ``time.sleep`` of known length through ``kernel_bench.measure`` with a declared cost on a
synthetic 1 GB/s card, so the roofline fraction is known in advance: 2 MB in a 2 ms sleep is at most 100% of the
roofline, 1 MB in it at most 50% (a sleep only ever lasts longer than asked).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

BENCH_MODULE = '''
import itertools
import os
import time

from iotrace.cards import Card
from iotrace.plugins.spec import Cost

CARD = Card(key="synthetic", name="Synthetic 1 GB/s", vendor="test", architecture="none", sm_count=1,
            memory_bandwidth_gbs=1.0, memory_gb=1.0, peak_tflops={"fp32": 1.0})
SLEEP_S = float(os.environ.get("BENCH_SLEEP_S", "0.002"))
BYTES = float(os.environ.get("BENCH_BYTES", "2e6"))


def test_copy(kernel_bench):
    if os.environ.get("BENCH_NOISY") == "1":  # alternate 1 ms and 8 ms: a coefficient of variation near 0.8
        lengths = itertools.cycle([0.001, 0.008])
        work = lambda: time.sleep(next(lengths))
    else:
        work = lambda: time.sleep(SLEEP_S)
    result = kernel_bench.measure(work, cost=Cost(0.0, BYTES, "fp32", "bytes copied once"), card=CARD,
                                  rounds=8, warmup=1, info={"shape": {"bytes": int(BYTES)}, "dtype": "fp32"})
    assert result is None or result.rounds == 8  # None under --benchmark-disable
    if os.environ.get("BENCH_BASELINE") == "1" and result is not None:  # a suite's same-run baseline ratio
        kernel_bench.benchmark.extra_info["speedup_vs_memcpy"] = 1.25
'''


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest sessions here are plain ones even when this suite runs under xdist: pytest-benchmark disables itself
    when it sees PYTEST_XDIST_WORKER in the environment (pytest_benchmark/session.py), which a worker's child
    inherits."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def bench(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Run a pytest session over the bench module with the given timing; returns the run result."""
    pytester.makepyfile(test_bench=BENCH_MODULE)
    storage = f"file://{pytester.path / 'storage'}"

    def run(*args: str, sleep_s: float = 0.002, nbytes: float = 2e6, noisy: bool = False):
        monkeypatch.setenv("BENCH_SLEEP_S", str(sleep_s))
        monkeypatch.setenv("BENCH_BYTES", str(nbytes))
        monkeypatch.setenv("BENCH_NOISY", "1" if noisy else "0")
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--benchmark-storage={storage}", *args)

    return run


def test_extra_info_holds_the_card_cost_and_roofline(bench, pytester: pytest.Pytester) -> None:
    result = bench("--benchmark-json=out.json", "--iotrace-max-cv=10")
    result.assert_outcomes(passed=1)
    [stored] = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    info = stored["extra_info"]
    assert info["card"] == "synthetic" and info["card_name"] == "Synthetic 1 GB/s"
    assert info["shape"] == {"bytes": 2000000} and info["dtype"] == "fp32" and info["bytes"] == 2e6
    assert info["intensity"] == 0.0 and info["tflops"] == 0.0 and info["bound"] == "memory"
    assert info["roofline_floor_s"] == pytest.approx(2e-3)
    # The sleep only ever overshoots (more on a loaded machine): the figures are checked against the median found.
    median = info["median_s"]
    assert median == pytest.approx(stored["stats"]["median"]) and median >= 2e-3
    assert info["pct_of_roofline"] == pytest.approx(100 * 2e-3 / median)  # the 2 ms floor over the median
    assert info["gbps"] == pytest.approx(2e6 / median / 1e9)
    assert stored["stats"]["rounds"] == info["rounds"] == 8
    assert info["cv"] == pytest.approx(stored["stats"]["stddev"] / stored["stats"]["mean"])
    assert info["noisy"] is False and "perf_counter" in info["method"]
    result.stdout.fnmatch_lines(["*iotrace: median, spread and roofline of each benchmark*",
                                 "ok * test_bench.py::test_copy: median *µs, CV *% over 8 rounds, *% of the roofline "
                                 "on synthetic (*GB/s, 0.00 TFLOP/s)"])


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_run_slower_than_its_stored_baseline_fails_the_compare_gate(bench) -> None:
    bench("--benchmark-autosave", "--iotrace-max-cv=10").assert_outcomes(passed=1)
    # Gated on the minimum with wide margins: a loaded machine's sleep overshoots (seen: a baseline of 2 ms
    # sleeps with a 12 ms median, CV 90%), but no round can be faster than its sleep, so the minimum stays put.
    same = bench("--benchmark-compare", "--benchmark-compare-fail=min:300%", "--iotrace-max-cv=10")
    assert same.ret == 0, same.stdout.str()  # the gate passes a run like its baseline...
    slower = bench("--benchmark-compare", "--benchmark-compare-fail=min:300%", "--iotrace-max-cv=10",
                   sleep_s=0.04)
    assert slower.ret != 0  # ...and fails one twenty times slower, though the test itself passed
    slower.stderr.fnmatch_lines(["*Performance has regressed*", "*test_copy*min*"])  # pytest-benchmark's logger
    slower.stdout.fnmatch_lines(["test_bench.py .*"])  # (the regression ends the session before its summary)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_run_under_the_roofline_floor_fails_the_roofline_gate(bench) -> None:
    # 1 MB at 1 GB/s is a 1 ms floor; a 2 ms sleep reaches at most 50% of it.
    low = bench("--iotrace-roofline-floor=0.8", "--iotrace-max-cv=10", nbytes=1e6)
    low.assert_outcomes(failed=1)
    low.stdout.fnmatch_lines(["*test_copy reached *% of its attainable roofline on synthetic*"
                              "under --iotrace-roofline-floor 80%*", "UNDER-ROOF * test_bench.py::test_copy: *"])
    # 1% of the roofline is a 100 ms allowance: a loaded machine's overshoot does not reach it.
    bench("--iotrace-roofline-floor=0.01", "--iotrace-max-cv=10", nbytes=1e6).assert_outcomes(passed=1)
    bench("--iotrace-max-cv=10", nbytes=1e6).assert_outcomes(passed=1)  # no floor given: reported, not gated


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_noisy_run_is_reported_as_noisy_and_not_judged(bench) -> None:
    bench("--benchmark-autosave", "--iotrace-max-cv=10").assert_outcomes(passed=1)
    noisy = bench("--benchmark-compare", "--benchmark-compare-fail=median:10%", "--iotrace-roofline-floor=0.99",
                  "--iotrace-max-cv=0.05", noisy=True)
    # Slower than the baseline and under the floor, yet neither gate judges it: measured, so it passes (never
    # "skipped": skipped means nothing was measured), with a warning and its NOISY line.
    assert noisy.ret == 0, noisy.stdout.str()
    noisy.assert_outcomes(passed=1, warnings=1)
    noisy.stdout.fnmatch_lines(["*PytestWarning: test_bench.py::test_copy too noisy to judge: CV*"])
    noisy.stdout.fnmatch_lines(["*iotrace: 1 benchmark(s) too noisy to judge (CV over --iotrace-max-cv 5%)*",
                                "NOISY test_bench.py::test_copy: CV *% over 8 rounds > --iotrace-max-cv 5%*"])
    assert "Performance has regressed" not in noisy.stdout.str() + noisy.stderr.str()


def test_benchmark_disable_runs_once_and_judges_nothing(bench) -> None:
    bench("--benchmark-disable", "--iotrace-roofline-floor=0.99", nbytes=1e6).assert_outcomes(passed=1)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_kernel_benchmarks_skip_without_a_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gpu='''
def test_gemm(kernel_bench):
    kernel_bench("gemm", shape={"M": 256, "N": 256, "K": 256}, dtype="fp16")
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kernel benchmarks need an NVIDIA GPU: torch.cuda sees none*"])


def test_bad_option_values_are_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for option, message in (("--iotrace-roofline-floor=-1", "must be a number above 0"),
                            ("--iotrace-roofline-floor=2", "must be a fraction above 0 and at most 1"),
                            ("--iotrace-rounds=0", "must be 1 or more")):
        result = pytester.runpytest_subprocess(option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{option.split('=')[0]}*{message}*"])


def test_the_plugin_imports_nothing_heavy() -> None:
    code = ("import sys, iotrace.pytest_plugin; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton', 'pandas', 'numpy', "
            "'plotly', 'pytest_benchmark'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent)
    assert done.stdout.strip() == "[]"


@pytest.mark.gpu
def test_a_kernel_benchmark_on_the_gpu_stores_gpu_time_and_its_roofline(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gpu='''
def test_rmsnorm(kernel_bench):
    case = kernel_bench.case("rmsnorm", shape={"rows": 4096, "hidden": 4096, "residual": 0}, dtype="fp16")
    baseline_s = kernel_bench.time(case.call)
    result = kernel_bench(case, extra={"same_kernel_ms": baseline_s * 1e3})
    assert 0 < result.pct_of_roofline <= 100 and result.rounds == 20
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-json=out.json",
                                           "--iotrace-max-cv=1")
    result.assert_outcomes(passed=1)
    [stored] = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    info = stored["extra_info"]
    assert info["kernel"] == "rmsnorm" and info["device"] and info["torch"] and info["triton"]
    assert "CUDA" in info["method"] and info["bound"] == "memory" and info["gbps"] > 0
    # The stored statistics are GPU time: the same kernel timed the same way agrees within a factor of two.
    assert 0.5 < stored["stats"]["median"] / (info["same_kernel_ms"] * 1e-3) < 2


def test_the_summary_states_the_same_run_baseline_comparisons(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """A suite's ratio against its same-run baseline (extra_info ``speedup_vs_*``) is printed, not only stored."""
    monkeypatch.setenv("BENCH_BASELINE", "1")
    result = bench("--iotrace-max-cv=10")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ok * test_bench.py::test_copy: median *TFLOP/s); 1.25× vs memcpy"])
