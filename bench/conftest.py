"""Benchmarks time kernels on a GPU; on a machine without one they skip with the reason."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="benchmarks need an NVIDIA GPU: torch.cuda sees none (bench/gpu_validate.sh)")
    for item in items:
        item.add_marker(skip)
