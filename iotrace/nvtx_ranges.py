"""NVTX ranges around kernel launches, named so profilers can filter on them.

Every iotrace kernel launch runs inside a range ``iotrace/<kernel>`` (what ``ncu --nvtx-include`` and the
nsys timeline report match on), with a nested range that spells the config, ``config BLOCK_M=128 ...``.
Uses the ``nvtx`` package: ``torch.cuda.nvtx`` raises on CPU builds of torch. With no profiler attached
the two nested ranges cost about a microsecond (one ``nvtx.annotate`` enter and exit: 0.55 µs, ``timeit`` on
the project's 2-core CI machine).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import nvtx

__all__ = ["DOMAIN", "config_text", "kernel_range", "range_name"]

#: The NVTX domain of every iotrace range.
DOMAIN = "iotrace"


def range_name(kernel: str) -> str:
    return f"iotrace/{kernel}"


def config_text(config: Mapping[str, object]) -> str:
    return "config " + " ".join(f"{k}={v}" for k, v in sorted(config.items()))


@contextmanager
def kernel_range(kernel: str, config: Mapping[str, object]) -> Iterator[None]:
    """``with kernel_range("gemm", {"BLOCK_M": 128}): launch()``: the outer range names the kernel, the inner
    one its config."""
    with nvtx.annotate(range_name(kernel), domain=DOMAIN, color="green"), \
            nvtx.annotate(config_text(config), domain=DOMAIN, color="blue"):
        yield
