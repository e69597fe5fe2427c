"""The ``iotrace`` command line: the parser and ``main``; one module per command family registers its commands.

Every command has ``--help``; data commands take ``--json``. A user error (a bad value, an unknown card,
a missing file) prints one line on stderr and exits with code 2; nothing a user can cause ends in a
traceback. Commands call library functions; no library module imports this package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from iotrace import interrupts
from iotrace.cli import bench, identities, kernels, notes, quant, recipes, report, selfcheck, tune
from iotrace.cli.output import EXIT_USAGE, OneLineParser
from iotrace.errors import IotraceError

__all__ = ["EXIT_USAGE", "build_parser", "main"]

#: The command families, in the order `iotrace --help` lists their commands.
FAMILIES = (identities, kernels, bench, recipes, quant, report, selfcheck, notes, tune)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="iotrace", description="Kernel runs and profiler traces as FLOPs, bytes and "
                                                       "occupancy on a named card.")
    parser.add_argument("--version", action="version", version=f"iotrace {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True
    for family in FAMILIES:
        family.register(commands)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iotrace")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except IotraceError as exc:
        print(f"iotrace: error: {exc}", file=sys.stderr)
        return interrupts.exit_code() if exc.exit_code == 130 else exc.exit_code  # an interrupted command's own line
    except BrokenPipeError:  # `iotrace cards | head`: the reader left; not an error of ours or theirs
        _silence_stdout()
        return 0
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: one line, not a traceback; 130 or 143, as a shell reports them
        print(f"iotrace: {'terminated' if isinstance(sys.exc_info()[1], interrupts.Terminated) else 'interrupted'} "
              f"({interrupts.cause()})", file=sys.stderr)
        return interrupts.exit_code()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return 0


def run() -> NoReturn:
    """The ``iotrace`` program (and ``python -m iotrace``): :func:`main`, then exit with its code. SIGTERM unwinds like
    Ctrl-C (servers stopped, finished work kept): set here, for the program's process, not in :func:`main`, which
    tests and scripts call inside processes of their own."""
    interrupts.raise_on_sigterm()
    code = main()
    # kaleido's one-shot export thread ("(run)") and choreographer's browser-pipe reader ("(run_print)") are not
    # daemon threads (kaleido/_sync_server.py, choreographer/_brokers/_sync.py); when a browser dies mid-export one
    # can outlive the answer and keep the interpreter from exiting (seen on a loaded 2-core CI machine: the one-line
    # error printed, the process alive 120 s later). The answer is whole by now: past such a thread, end at once.
    stuck = [t for t in threading.enumerate()
             if t.is_alive() and not t.daemon and t.name.endswith(("(run)", "(run_print)"))]
    if stuck and "kaleido" in sys.modules:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BrokenPipeError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail a second time.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    run()
