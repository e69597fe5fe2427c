"""``iotrace tune``: its flags and its entry point (wired into the CLI by ``iotrace.cli``)."""

from __future__ import annotations

import argparse

from iotrace.errors import InvalidValueError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", metavar="KERNEL", help="a kernel name (see `iotrace kernels`)")


def main(args: argparse.Namespace) -> None:
    raise InvalidValueError("`iotrace tune` is not built yet", "see the autotuner issue")
