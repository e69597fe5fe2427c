"""Benchmarks marked ``gpu`` time kernels on a GPU; on a machine without one they skip with the reason. The others
(trace loading, bench/test_bench_trace.py) run on CPU anywhere."""

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
