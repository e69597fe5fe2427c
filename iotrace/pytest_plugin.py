"""pytest plugin (entry point ``pytest11``): pytest-benchmark regression gates for iotrace kernels.

The ``kernel_bench`` fixture wraps pytest-benchmark's ``benchmark`` fixture. It times an iotrace kernel on the GPU
with CUDA events (L2 flushed before every round, as ``triton.testing.do_bench`` does; kernels under 50 µs replayed
from a CUDA graph so launch overhead does not swamp them), after warm-up rounds, and hands each round's *GPU* time to
pytest-benchmark, so its table, its saved JSON and ``--benchmark-compare-fail`` all work on GPU time. Each benchmark's
``extra_info`` holds the card, config, shape, dtype, TFLOP/s, GB/s, % of the attainable roofline, intensity, median
and coefficient of variation. Two gates come on top of ``--benchmark-compare-fail``:

- ``--iotrace-roofline-floor 0.8`` fails a benchmark that reaches less than that fraction of its attainable roofline
  on its card (identity 4, ``iotrace.runner``): a bar that holds across machines better than seconds do;
- ``--iotrace-max-cv 0.05`` refuses to judge a noisy benchmark (rounds' standard deviation over their mean above the
  threshold): it passes with a warning, is listed as NOISY in the summary (its figures are still saved) and is left
  out of ``--benchmark-compare-fail`` and the roofline gate, instead of flapping. A measured run is never reported as
  skipped: skipped means nothing was measured.

The summary also prints each benchmark's comparisons with its same-run baselines (``speedup_vs_*``,
``fraction_of_copy_bandwidth`` in ``extra_info``, as ``bench/test_bench_kernels.py`` records them).

``kernel_bench.measure(fn, cost=..., card=...)`` times any callable with a declared :class:`~iotrace.plugins.spec.Cost`
on the host clock, which is how the gates are tested without a GPU. On a machine without one, kernel benchmarks skip
with the reason.

Loaded by every pytest run once iotrace is installed, so it imports nothing heavy at import time: torch, Triton and
the kernels are imported inside the fixture.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pytest

from iotrace.argtypes import count_at_least, positive_number

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import Cost

__all__ = ["BenchResult", "KernelBench", "KernelCase", "kernel_bench"]

#: Under this median a kernel is timed from a CUDA graph (the runner uses the same bar).
GRAPH_BELOW_S = 50e-6
#: Bytes zeroed before each round to push the kernel's data out of L2 (do_bench uses 256 MB).
L2_FLUSH_BYTES = 256 * 2**20

_NOISY = pytest.StashKey[dict[str, str]]()
_RESULTS = pytest.StashKey[dict[str, "tuple[BenchResult, str, dict[str, Any]]"]]()


def _fraction(text: str) -> float:
    value = positive_number(text)
    if value > 1:  # no kernel beats its roofline: a floor above 1 would fail every benchmark
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction above 0 and at most 1, e.g. 0.8")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("iotrace", "iotrace kernel benchmarks (regression gates on pytest-benchmark)")
    group.addoption("--iotrace-roofline-floor", type=_fraction, default=None, metavar="FRACTION",
                    help="fail a kernel benchmark reaching less than FRACTION of its attainable roofline on its card "
                         "(e.g. 0.8); off by default")
    group.addoption("--iotrace-max-cv", type=positive_number, default=0.05, metavar="CV",
                    help="a benchmark whose rounds vary more than this coefficient of variation (stddev/mean) is "
                         "reported as noisy and not judged by any gate (default 0.05)")
    group.addoption("--iotrace-rounds", type=count_at_least(1), default=20, metavar="N",
                    help="timed rounds per kernel benchmark (default 20)")
    group.addoption("--iotrace-warmup", type=count_at_least(0), default=3, metavar="N",
                    help="untimed warm-up rounds before them (default 3)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_NOISY] = {}
    config.stash[_RESULTS] = {}


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, {})
    if results:
        terminalreporter.write_sep("-", "iotrace: median, spread and roofline of each benchmark")
        for nodeid, (result, verdict, extra) in results.items():
            terminalreporter.write_line(
                f"{verdict:<11} {nodeid}: median {result.median_s * 1e6:.1f} µs, CV {result.cv:.1%} over "
                f"{result.rounds} rounds, {result.pct_of_roofline:.1f}% of the roofline on {result.card} "
                f"({result.gbps:.1f} GB/s, {result.tflops:.2f} TFLOP/s){_baselines_text(extra)}")
    noisy = config.stash.get(_NOISY, {})
    if noisy:
        limit = config.getoption("iotrace_max_cv")
        terminalreporter.write_sep("-", f"iotrace: {len(noisy)} benchmark(s) too noisy to judge "
                                        f"(CV over --iotrace-max-cv {limit:.0%})")
        for nodeid, why in noisy.items():
            terminalreporter.write_line(f"NOISY {nodeid}: {why}")


def _baselines_text(extra: dict[str, Any]) -> str:
    """``; 1.32× vs cublas, 0.91 of copy bandwidth``: the same-run comparisons a suite put in ``extra_info`` (read at
    the end of the session, so ratios added after ``kernel_bench`` returned are there)."""
    parts = [f"{value:.3g}× vs {key.removeprefix('speedup_vs_')}" for key, value in extra.items()
             if key.startswith("speedup_vs_") and isinstance(value, (int, float))]
    if isinstance(extra.get("fraction_of_copy_bandwidth"), (int, float)):
        parts.append(f"{extra['fraction_of_copy_bandwidth']:.3g} of copy bandwidth")
    return "; " + ", ".join(parts) if parts else ""


@dataclass(frozen=True)
class BenchResult:
    """One benchmark's outcome: time statistics of the rounds, and what the median means on the card."""

    median_s: float
    mean_s: float
    stddev_s: float
    cv: float
    rounds: int
    tflops: float
    gbps: float
    pct_of_roofline: float
    intensity: float | None
    roofline_floor_s: float
    bound: str
    card: str
    method: str
    noisy: bool


class _Clock:
    """A clock that advances only by measured time: pytest-benchmark records ``clock()`` after minus before each
    round, so advancing it by a round's CUDA-event time makes every statistic it keeps a statistic of GPU time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _host_timer(fn: Callable[[], Any]) -> tuple[Callable[[], float], str]:
    def once() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return once, "host clock (time.perf_counter) around each call"


def _gpu_timer(fn: Callable[[], Any]) -> tuple[Callable[[], float], str]:
    """CUDA events around one call with L2 flushed first; for short kernels, a CUDA graph of many calls."""
    import statistics

    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once() -> float:
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3

    fn()  # compile and load before anything is timed
    torch.cuda.synchronize()
    estimate = statistics.median(once() for _ in range(5))
    if estimate >= GRAPH_BELOW_S:
        return once, "CUDA events per call, L2 flushed before each (median of rounds)"
    calls = max(1, min(1000, int(1e-3 / max(estimate, 1e-7))))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm the side stream as torch's graph capture guide does
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError as exc:  # a launch that reads the host or allocates cannot be captured: time it per call
        torch.cuda.synchronize()
        return once, f"CUDA events per call, L2 flushed before each (no CUDA graph: {str(exc)[:80]})"

    def replay() -> float:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / calls

    return replay, f"CUDA graph of {calls} calls per round, CUDA events (L2 warm between calls)"


@dataclass
class KernelCase:
    """One kernel ready to launch on the GPU: spec, resolved shape, dtype, config and card, and its tensors."""

    spec: Any
    shape: dict[str, int]
    dtype: str
    config: dict[str, Any]
    backend: str
    card: Card
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    preset: str | None = None

    @property
    def cost(self) -> Cost:
        return self.spec.cost(self.shape, self.dtype)

    def call(self) -> None:
        """One launch, inside the kernel's NVTX range (``KernelSpec.launch``)."""
        self.spec.launch(self.inputs, self.outputs, self.config, self.backend)

    def info(self) -> dict[str, Any]:
        import platform

        import torch
        import triton

        return {"kernel": self.spec.name, "shape": self.shape, "dtype": self.dtype, "config": self.config,
                "backend": self.backend, "preset": self.preset, "device": torch.cuda.get_device_name(0),
                "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                "python": platform.python_version()}


class KernelBench:
    """What the ``kernel_bench`` fixture returns: call it with a kernel name (or a :meth:`case`), :meth:`time` a
    baseline on the same GPU clock, or :meth:`measure` any callable with a declared cost."""

    def __init__(self, benchmark: Any, request: pytest.FixtureRequest) -> None:
        self.benchmark = benchmark
        self.request = request
        self.config = request.config

    def case(self, kernel: str, *, shape: dict[str, int] | None = None, preset: str | None = None,
             dtype: str | None = None, config: dict[str, Any] | None = None, card: str | None = None,
             backend: str = "triton", seed: int = 0) -> KernelCase:
        """Resolve ``kernel`` on GPU 0 and make its inputs (skips with the reason where there is no GPU), so a test can
        time baselines on the same tensors before benchmarking it."""
        _require_gpu()
        from iotrace.kernel_call import KernelCall
        from iotrace.plugins import kernel as find_kernel
        from iotrace.runner import resolve_config

        call = KernelCall.make(find_kernel(kernel), shape, dtype, card, backend, preset=preset)
        spec = call.spec
        resolved = resolve_config(call, config)
        inputs = spec.make_inputs(call.shape, call.dtype, "cuda", seed)
        return KernelCase(spec, call.shape, call.dtype, resolved, backend, call.card, inputs, spec.make_outputs(inputs),
                          preset)

    def __call__(self, kernel: str | KernelCase, *, extra: dict[str, Any] | None = None,
                 **case: Any) -> BenchResult | None:
        """Benchmark an iotrace kernel (a name, with :meth:`case`'s keywords, or a prepared case) on GPU 0."""
        made = kernel if isinstance(kernel, KernelCase) else self.case(kernel, **case)
        timer, method = _gpu_timer(made.call)
        return self._run(timer, method, made.cost, made.card, {**made.info(), **(extra or {})})

    def time(self, fn: Callable[[], Any]) -> float:
        """Median seconds of ``fn`` on the GPU, timed as a kernel is (for baselines; nothing is stored or judged)."""
        import statistics

        _require_gpu()
        timer, _ = _gpu_timer(fn)
        rounds = self.config.getoption("iotrace_rounds")
        return statistics.median(timer() for _ in range(rounds))

    def measure(self, fn: Callable[[], Any], *, cost: Cost, card: Card, rounds: int | None = None,
                warmup: int | None = None, info: dict[str, Any] | None = None,
                timer: Callable[[], float] | None = None, method: str | None = None) -> BenchResult | None:
        """Time ``fn`` (host clock unless ``timer`` returns one call's seconds) and judge it against ``cost`` on
        ``card``, exactly as a kernel is judged. Returns None under ``--benchmark-disable``."""
        if timer is None:
            timer, method = _host_timer(fn)
        return self._run(timer, method or "given timer", cost, card, dict(info or {}), rounds, warmup)

    def _run(self, timer: Callable[[], float], method: str, cost: Cost, card: Card, info: dict[str, Any],
             rounds: int | None = None, warmup: int | None = None) -> BenchResult | None:
        from iotrace.runner import roofline_of

        rounds = rounds if rounds is not None else self.config.getoption("iotrace_rounds")
        warmup = warmup if warmup is not None else self.config.getoption("iotrace_warmup")
        clock = _Clock()

        def round_() -> None:
            clock.now += timer()

        if self.benchmark.disabled:
            round_()
            return None
        # pytest-benchmark 5.x reads its timer from this attribute for every round (fixture._make_runner).
        self.benchmark._timer = clock
        self.benchmark.pedantic(round_, rounds=max(1, rounds), warmup_rounds=warmup, iterations=1)
        stats = self.benchmark.stats.stats
        median, mean, stddev = stats.median, stats.mean, stats.stddev
        cv = stddev / mean if mean > 0 else 0.0
        roof = roofline_of(cost, card)
        floor_s = roof.floor_us * 1e-6
        result = BenchResult(
            median_s=median, mean_s=mean, stddev_s=stddev, cv=cv, rounds=len(stats.data),
            tflops=cost.flops / median / 1e12 if median > 0 else 0.0,
            gbps=cost.bytes / median / 1e9 if median > 0 else 0.0,
            pct_of_roofline=100.0 * floor_s / median if median > 0 else 0.0,
            intensity=cost.intensity if cost.bytes else None, roofline_floor_s=floor_s, bound=roof.bound,
            card=card.key, method=method, noisy=cv > self.config.getoption("iotrace_max_cv"))
        self.benchmark.extra_info.update({
            **{key: value for key, value in info.items() if value is not None},
            **asdict(result), "card_name": card.name, "flops": cost.flops, "bytes": cost.bytes, "peak": cost.peak,
            "cost_formula": cost.formula, "kind": "measured (time); modelled (cost, roofline)"})
        self._judge(result)
        return result

    def _judge(self, result: BenchResult) -> None:
        node = self.request.node
        floor = self.config.getoption("iotrace_roofline_floor")
        under = floor is not None and result.pct_of_roofline < 100.0 * floor
        verdict = "NOISY" if result.noisy else "UNDER-ROOF" if under else "ok"
        self.config.stash[_RESULTS][node.nodeid] = (result, verdict, self.benchmark.extra_info)
        if result.noisy:
            limit = self.config.getoption("iotrace_max_cv")
            why = (f"CV {result.cv:.1%} over {result.rounds} rounds > --iotrace-max-cv {limit:.0%} "
                   f"(median {result.median_s * 1e6:.1f} µs): not judged")
            self.config.stash[_NOISY][node.nodeid] = why
            _leave_out_of_compare(self.config, node.nodeid)
            # Measured and saved, but not judged: a pass with a warning, never a skip (nothing was skipped).
            warnings.warn(pytest.PytestWarning(f"{node.nodeid} too noisy to judge: {why}"), stacklevel=2)
            return
        if under:
            pytest.fail(f"{node.name} reached {result.pct_of_roofline:.1f}% of its attainable roofline on "
                        f"{result.card} ({result.median_s * 1e6:.1f} µs against a {result.roofline_floor_s * 1e6:.1f}"
                        f" µs {result.bound}-bound floor), under --iotrace-roofline-floor {floor:.0%}", pytrace=False)


def _leave_out_of_compare(config: pytest.Config, nodeid: str) -> None:
    """Drop a benchmark from the runs pytest-benchmark compares against, so --benchmark-compare-fail skips it too."""
    session = getattr(config, "_benchmarksession", None)
    for benches in getattr(session, "compared_mapping", {}).values():
        benches.pop(nodeid, None)


def _require_gpu() -> None:
    import torch

    from iotrace.kernels.backend import interpreting

    if not torch.cuda.is_available():
        pytest.skip("kernel benchmarks need an NVIDIA GPU: torch.cuda sees none (bench/gpu_validate.sh runs them)")
    if interpreting():
        pytest.skip("kernel benchmarks need the GPU: TRITON_INTERPRET=1 runs kernels on the CPU interpreter")


@pytest.fixture
def kernel_bench(benchmark: Any, request: pytest.FixtureRequest) -> KernelBench:
    """Benchmark an iotrace kernel with GPU-correct timing and the iotrace gates (see the module docstring)."""
    return KernelBench(benchmark, request)
