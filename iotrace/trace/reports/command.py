"""``iotrace report`` and ``iotrace diff``: their flags and entry points (wired into the CLI by ``iotrace.cli``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iotrace.errors import InvalidValueError


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, metavar="TRACE", help="the export; its format is found from its content")


def add_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, metavar="BEFORE")
    parser.add_argument("after", type=Path, metavar="AFTER")


def report_main(args: argparse.Namespace) -> None:
    raise InvalidValueError("`iotrace report` is not built yet", "see the reports issue")


def diff_main(args: argparse.Namespace) -> None:
    raise InvalidValueError("`iotrace diff` is not built yet", "see the reports issue")
