"""Benchmarks marked ``gpu`` time kernels on a GPU through iotrace's ``kernel_bench`` fixture (iotrace/pytest_plugin.py,
loaded through the ``pytest11`` entry point); on a machine without a GPU they skip with the reason, here at collection
and again in the fixture. The others (trace loading, bench/test_bench_trace.py) run on CPU anywhere. Gate a change
with ``--benchmark-compare --benchmark-compare-fail=median:5% --iotrace-roofline-floor 0.8``
(see docs/commands/bench.md, "Regression gates")."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def pytest_configure(config: pytest.Config) -> None:
    # pyproject registers the marker for the tests; repeat it so `pytest bench/...` from any rootdir accepts it.
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU; skipped with the reason on machines without one")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="benchmarks need an NVIDIA GPU: torch.cuda sees none (bench/gpu_validate.sh)")
    for item in gpu_items:
        item.add_marker(skip)
