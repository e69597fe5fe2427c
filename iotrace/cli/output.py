"""What every command shares: the one-line-error parser, the ``--json``/``--card``/``--wide``/``--names`` flags, the
format ``-o FILE`` writes (:func:`output_format`, from its extension), and writing a result as JSON or for a person."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from iotrace.errors import InvalidValueError

__all__ = ["EXIT_USAGE", "EXTENSIONS", "SUFFIXES", "OneLineParser", "add_card", "add_json", "add_names", "add_output",
           "add_wide", "answer_format", "console", "emit", "finite_json", "output_format", "progress_lines", "text_of",
           "write_answer", "write_output"]

#: Exit code for every error the user can cause (argparse uses the same).
EXIT_USAGE = 2


#: A negative number as the flag types read it (``-27e9``, ``-1.5k``, ``-8k``, ``-.5``). argparse's own pattern
#: knows only ``-27`` and ``-2.5``, so ``--params -27e9`` looked like an unknown option and failed with "expected one
#: argument" before the command's own check could say what is wrong with the value.
NEGATIVE_NUMBER = re.compile(r"^-(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*[kKmMbBgGtT]?$")


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors, the same prefix as every other error of the CLI (``iotrace: error: ...``) and
    the command's help named: ``iotrace: error: argument --bits: ... (see `iotrace math decode --help`)``, exit 2.
    Every parser of the CLI is one of these (the subcommands' through ``parser_class``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse reads this (a private attribute, stable since Python 3.2) to tell a negative number from a flag.
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"iotrace: error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        # argparse reports arguments no parser knew from the top parser, so the message named `iotrace --help`; name
        # the help of the command they were given to instead.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The deepest (sub)command parser ``parsed`` went through."""
        parser: argparse.ArgumentParser = self
        while True:
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            name = None if sub is None else getattr(parsed, sub.dest, None)
            if sub is None or name not in sub.choices:
                return parser
            parser = sub.choices[name]


def usage_with_subcommands(parser: argparse.ArgumentParser, *forms: str) -> str:
    """The usage of a command that also runs alone (``bench``, ``recipes``): its own options with no subcommand
    (argparse would draw ``import ...`` after them as if a subcommand were required), then each subcommand's
    ``forms`` (``"import FILE [options]"``) on a line of its own."""
    formatter = parser._get_formatter()
    actions = [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]
    formatter.add_usage(None, actions, parser._mutually_exclusive_groups, prefix="usage: ")
    own = formatter.format_help().strip().removeprefix("usage: ").replace("%", "%%")
    return "\n".join([own, *(f"       %(prog)s {form}" for form in forms)])


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def add_card(parser: argparse.ArgumentParser, required_hint: str = "") -> None:
    parser.add_argument("--card", metavar="NAME",
                        help=f"a CardBook card (e.g. rtx3090, h100; see `iotrace cards`){required_hint}")


def add_wide(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wide", action="store_true",
                        help="draw as into a pipe or a file: no cell cut to fit the terminal, each table as wide as "
                             "its cells need")


def add_names(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--names", choices=("short", "full"), default="short",
                        help="kernel names in text tables: short (default: a long demangled name as its base name, "
                             "e.g. cutlass::Kernel, and a key; the full names listed once below the table) or full "
                             "(whole, in the table)")


#: What ``-o FILE`` writes, by the file's extension: the format names ``--format`` takes (``term``: the text a
#: terminal shows, without colour).
EXTENSIONS = {".txt": "term", ".md": "md", ".html": "html", ".htm": "html", ".json": "json", ".png": "png",
              ".svg": "svg"}
#: The extension each format is named with, in messages, and what a person calls it.
SUFFIXES = {"term": ".txt", "md": ".md", "html": ".html", "json": ".json", "png": ".png", "svg": ".svg"}
_CALLED = {"term": "text", "md": "Markdown", "html": "HTML", "json": "JSON", "png": "PNG", "svg": "SVG"}


def add_output(parser: argparse.ArgumentParser, writes: Sequence[str], what: str = "") -> None:
    """``-o/--output FILE``: what it writes follows its extension (:func:`output_format`)."""
    listed = ", ".join(SUFFIXES[f] for f in writes)
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help=f"write {what or 'the result'} to FILE, in the format its extension names ({listed})")


def output_format(command: str, path: Path | None, writes: Sequence[str], given: str | None = None,
                  default: str | None = "term", flag: str = "--format") -> str:
    """The format a command writes: ``-o PATH``'s extension says it (``.txt``, ``.md``, ``.html``, ``.json``, ``.png``,
    ``.svg``; :data:`EXTENSIONS`), or ``given`` (``--format``), or ``default``.

    One :class:`InvalidValueError` line (exit 2) when the extension names a format ``command`` cannot write (naming
    the file and the extensions it can), when ``given`` and the extension disagree (``--format md -o x.html``), and
    when ``PATH`` has no extension and neither ``given`` nor ``default`` says a format. ``writes``: the formats the
    command can write, in the order its messages list them.
    """
    if path is None:
        return given or default or writes[0]
    can = ", ".join(SUFFIXES[f] for f in writes)
    suffix = path.suffix.lower()
    if not suffix:
        if given or default:
            return given or default  # type: ignore[return-value]
        raise InvalidValueError(f"-o {path} has no extension, so it says no format",
                                f"name it FILE{SUFFIXES[writes[0]]} ({command} writes {can})")
    fmt = EXTENSIONS.get(suffix)
    if fmt is None or fmt not in writes:
        if len(writes) == 1:
            raise InvalidValueError(f"-o {path} is not a {can} file ({command} writes {can} files only)",
                                    f"name it {path.stem}{can}")
        raise InvalidValueError(f"-o {path}: {command} cannot write a {suffix} file",
                                f"it writes {can}: name the file with one of those extensions")
    if given is not None and given != fmt:
        said = f"{flag} {given}" if flag == "--format" else flag  # "--format md", "--json"
        raise InvalidValueError(f"{said} and -o {path} disagree (a {suffix} file is {_CALLED[fmt]})",
                                f"drop {flag}, or name the file FILE{SUFFIXES.get(given, '.' + given)}")
    return fmt


def answer_format(command: str, path: Path | None, writes: Sequence[str]) -> str | None:
    """The format ``-o PATH`` asks of a command that prints its answer and also writes a file (``occupancy``,
    ``tune``), or None without ``-o``; checked before any work (:func:`output_format`), and for an image, that
    kaleido and a browser are there."""
    if path is None:
        return None
    fmt = output_format(command, path, writes, default=None)
    if fmt in ("png", "svg"):
        from iotrace.render.image_export import check_export

        check_export()
    return fmt


def write_answer(path: Path, fmt: str, *, figure: Callable[[], Any], data: Callable[[], Any],
                 draw: Callable[[Any], None], markdown: Callable[[], str] | None = None) -> None:
    """A command's answer into ``path`` as ``fmt`` (:func:`answer_format`): its ``figure()`` as HTML, PNG or SVG, its
    ``data()`` as JSON, ``markdown()``, or what ``draw(console)`` prints as text. Silent: the command says "wrote PATH"
    after printing its answer."""
    if fmt in ("html", "png", "svg"):
        from iotrace.render.html_figure import write_figure

        write_figure(figure(), path, fmt)
        return
    if fmt == "json":
        text = json.dumps(finite_json(data()), indent=2, allow_nan=False)
    elif fmt == "md" and markdown is not None:
        text = markdown()
    else:
        text = text_of(draw)
    write_output(path, text, announce=False)


def write_output(path: Path | None, text: str, announce: bool = True) -> None:
    """``text`` to stdout (``path`` None) or into ``path``, then "wrote PATH" on stdout (unless not ``announce``: a
    command that prints its answer too says it after); an unwritable path is one :class:`InvalidValueError` line."""
    if path is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as exc:
        raise InvalidValueError(f"cannot write {path} ({exc.strerror or exc})", "choose a writable path") from exc
    if announce:
        print(f"wrote {path}")


def text_of(draw: Callable[[Any], None]) -> str:
    """What ``draw(console)`` prints, as plain text at natural width (what a file or a pipe gets: no cell cut, no
    colour)."""
    import io

    from iotrace.render.console import make_console

    drawn = make_console(file=io.StringIO(), record=True)
    draw(drawn)
    return drawn.export_text()


def console(wide: bool = False):
    """The rich console every command draws on (imported on use: rich is not needed to parse flags); at natural
    width with ``wide`` or when stdout is not a terminal (see :func:`iotrace.render.console.natural_output`)."""
    from iotrace.render.console import make_console

    return make_console(wide=wide)


@contextlib.contextmanager
def progress_lines(command: str) -> Iterator[Callable[[str], None]]:
    """A long command's progress on stderr: ``say(phase)`` writes one line per phase, ``iotrace bench [  3.2 s]
    warm-up`` (seconds since the command began), and leaving the block writes ``done``. Lines, not a spinner: a
    spinner redraws one line and prints nothing into a pipe, a line per phase reads the same in a terminal, a pipe
    and a log, and shows where the time went. Never on stdout, which holds the result (a table, JSON)."""
    started = time.perf_counter()

    def say(phase: str) -> None:
        sys.stderr.write(f"iotrace {command} [{time.perf_counter() - started:6.1f} s] {phase}\n")
        sys.stderr.flush()

    yield say
    say("done")


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
