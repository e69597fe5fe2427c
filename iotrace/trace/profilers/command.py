"""``iotrace run KERNEL --nsys | --ncu | --cupti``: the flags and the entry point (wired in by ``iotrace.cli``)."""

from __future__ import annotations

import argparse
from typing import Any

from iotrace.errors import InvalidValueError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the profiler flags to the ``run`` parser."""
    tools = parser.add_mutually_exclusive_group()
    tools.add_argument("--nsys", action="store_true", help="run under Nsight Systems (not built yet)")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the run asks for a profiler."""
    return bool(getattr(args, "nsys", False))


def main(args: argparse.Namespace, spec: Any, shape: dict, dtype: str, card: Any, config: dict) -> None:
    raise InvalidValueError("profiled runs are not built yet", "see the profiling issue")
