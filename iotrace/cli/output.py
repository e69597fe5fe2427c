"""What every command shares: the one-line-error parser, the ``--json``/``--card`` flags, and writing a result as
JSON or for a person."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["EXIT_USAGE", "OneLineParser", "add_card", "add_json", "add_wide", "console", "emit", "finite_json"]

#: Exit code for every error the user can cause (argparse uses the same).
EXIT_USAGE = 2


#: A negative number as the flag types read it (``-27e9``, ``-1.5k``, ``-8k``, ``-.5``). argparse's own pattern
#: knows only ``-27`` and ``-2.5``, so ``--params -27e9`` looked like an unknown option and failed with "expected one
#: argument" before the command's own check could say what is wrong with the value.
NEGATIVE_NUMBER = re.compile(r"^-(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*[kKmMbBgGtT]?$")


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``iotrace math decode: error: ... (see --help)`` and exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse reads this (a private attribute, stable since Python 3.2) to tell a negative number from a flag.
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def add_card(parser: argparse.ArgumentParser, required_hint: str = "") -> None:
    parser.add_argument("--card", metavar="NAME",
                        help=f"a CardBook card (e.g. rtx3090, h100; see `iotrace cards`){required_hint}")


def add_wide(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wide", action="store_true",
                        help="full kernel names, no cell cut to fit the terminal (what a pipe or a file gets)")


def console(wide: bool = False):
    """The rich console every command draws on (imported on use: rich is not needed to parse flags); at natural
    width with ``wide`` or when stdout is not a terminal (see :func:`iotrace.render.console.natural_output`)."""
    from iotrace.render.console import make_console

    return make_console(wide=wide)


def emit(args: argparse.Namespace, data: Any, draw: Callable[[], None]) -> None:
    """``data`` as JSON with ``--json``, else ``draw()`` for a person."""
    if getattr(args, "json", False):
        print(json.dumps(finite_json(data), indent=2, default=_json_default, allow_nan=False))
    else:
        draw()


def finite_json(value: Any) -> Any:
    """JSON has no NaN or infinity: a number that is not finite is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
