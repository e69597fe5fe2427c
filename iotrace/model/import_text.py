"""Benchmark output as people paste it: the lines a reader skips, and the JSON values among them.

People paste a terminal, not the file a bench wrote: its output arrives interleaved with the log lines the run printed
on stderr (model loading, ``get_memory_info: [warning] …``), followed by the shell prompt, with Windows line ends, or
cut where the copy stopped. The readers of :mod:`iotrace.model.imported` keep every row they can read and account for
every line they do not read in a :class:`Skipped`: one note per kind of skipped line, with its count and the first
one. :func:`json_values` finds the JSON values (a document, JSON lines, a cut ``-o json`` array) among such lines.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROMPT", "JsonFailure", "Skipped", "is_prompt", "json_values", "normalise_newlines"]

# A shell prompt line: "$", "$ cmd", "user@host:~$ cmd", "[user@host dir]$", "(venv) user@host:~/x# ", PowerShell's
# "PS C:\dir> ". Not a bare "#" or ">" (a Markdown heading or quote).
PROMPT = re.compile(r"^(?:\([^()\s]+\)\s*)?(?:\$|[\w.-]+@[\w.-]+(?::\S*)?\s?[$#%]|\[[\w.-]+@[\w.-]+[^\]]*\][$#]"
                    r"|PS [A-Za-z]:\\[^>]*>)(?:\s.*)?$")


def is_prompt(line: str) -> bool:
    """Whether ``line`` is a shell prompt, with or without a command after it."""
    return bool(PROMPT.match(line.strip()))


def normalise_newlines(text: str) -> str:
    """CRLF (a file saved on Windows, a paste from its terminal) and lone CR read as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _shorten(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class Skipped:
    """The lines a reader did not read, by kind: each kind's count and its first line (with what it said)."""

    #: names line n of the text in a note ("line 42"; a notebook's reader names the cell)
    where: Callable[[int], str] = field(default=lambda number: f"line {number}")
    kinds: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, kind: str, number: int, text: str) -> None:
        """One more line of ``kind``; ``text`` (the line, or why it was not read) is kept for the first."""
        if kind in self.kinds:
            self.kinds[kind][0] += 1
        else:
            self.kinds[kind] = [1, number, text]

    def notes(self) -> tuple[str, ...]:
        """One note per kind, in the order the kinds were first met."""
        out = []
        for kind, (count, number, text) in self.kinds.items():
            first = "" if count == 1 else "the first "
            out.append(f"skipped {count} {kind} ({first}{self.where(number)}: {_shorten(text)})")
        return tuple(out)


#: What :func:`json_values` calls the lines it skips.
NOT_JSON = "line(s) that are not JSON (log output)"
PROMPT_LINE = "shell prompt line(s)"
CUT = "value(s) cut short at the end (the file or the paste stops mid-row)"
DAMAGED = "line(s) of JSON that do not parse"


@dataclass(frozen=True)
class JsonFailure:
    """The first JSON value that did not parse: for a refusal when nothing else could be read."""

    lineno: int
    colno: int
    msg: str


# An array of objects as llama-bench's json_printer opens it ("[" then "  {" on the next line), not a log line's
# "[2024-12-10 10:00:00]" or "[INFO]".
_ARRAY_OPEN = re.compile(r"\[\s*(?:[{\]]|$)")


class _Lines:
    """Line numbers of character offsets in ``text``."""

    def __init__(self, text: str) -> None:
        self.breaks = [m.start() for m in re.finditer("\n", text)]

    def of(self, offset: int) -> int:
        return bisect.bisect_left(self.breaks, offset) + 1

    def end(self, offset: int, size: int) -> int:
        """The offset of the end of the line holding ``offset``."""
        index = bisect.bisect_left(self.breaks, offset)
        return self.breaks[index] if index < len(self.breaks) else size


def _skip_line(text: str, start: int, end: int, number: int, skipped: Skipped) -> None:
    line = text[start:end].strip()
    if line:
        skipped.add(PROMPT_LINE if is_prompt(line) else NOT_JSON, number, line)


def _more_json_after(text: str, offset: int) -> bool:
    """Whether a line after ``offset`` opens a JSON object or array (so a value that failed is not the last)."""
    return re.search(r"\n[ \t]*[{\[]", text[offset:]) is not None


def _array(text: str, start: int, lines: _Lines, skipped: Skipped,
           decoder: json.JSONDecoder) -> tuple[list[Any], int]:
    """The items of an array that does not parse whole (``-o json`` cut before its ``]``, or log lines between its
    items), item by item; returns them and the offset after the array (or the end of the text)."""
    size, pos, items = len(text), start + 1, []
    while True:
        while pos < size and text[pos] in " \t\n,":
            pos += 1
        if pos >= size:
            skipped.add(CUT, lines.of(start), f"the array opened at line {lines.of(start)} never closes: "
                                              f"{len(items)} whole item(s) read")
            return items, size
        if text[pos] == "]":
            return items, pos + 1
        line_end = lines.end(pos, size)
        if text[pos] == "{" or _ARRAY_OPEN.match(text, pos):
            try:
                value, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                if not _more_json_after(text, pos):
                    skipped.add(CUT, lines.of(pos), f"the item opened here is cut short; the {len(items)} whole "
                                                    "item(s) before it read")
                    return items, size
                skipped.add(DAMAGED, lines.of(pos), text[pos:line_end])
                pos = line_end
                continue
            items.append(value)
            continue
        _skip_line(text, pos, line_end, lines.of(pos), skipped)
        pos = line_end


def json_values(text: str, skipped: Skipped) -> tuple[list[tuple[int, Any]], JsonFailure | None]:
    """Every JSON value that opens a line of ``text``, as (its first line, the value), and the first failure.

    Lines between values are skipped (log output, a shell prompt) and noted in ``skipped``; a value that does not
    parse is noted as cut when nothing follows it, else as damaged, and the reading goes on at the next line; an
    array that does not parse whole is read item by item (a ``-o json`` run cut short keeps its finished tests).
    """
    decoder, lines, size = json.JSONDecoder(), _Lines(text), len(text)
    values: list[tuple[int, Any]] = []
    failure: JsonFailure | None = None
    pos = 0
    while pos < size:
        line_end = lines.end(pos, size)
        line = text[pos:line_end]
        body = line.lstrip()
        if body[:1] not in ("{", "["):
            _skip_line(text, pos, line_end, lines.of(pos), skipped)
            pos = line_end + 1
            continue
        start = pos + len(line) - len(body)
        number = lines.of(start)
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if body[0] == "[" and not _ARRAY_OPEN.match(text, start):
                _skip_line(text, pos, line_end, number, skipped)  # "[2024-12-10 10:00:00] INFO …": a log line
                pos = line_end + 1
                continue
            failure = failure or JsonFailure(exc.lineno, exc.colno, exc.msg)
            if body[0] == "[":
                value, end = _array(text, start, lines, skipped, decoder)
                if not value:
                    break
            elif not _more_json_after(text, start):
                skipped.add(CUT, number, body)
                break
            else:
                skipped.add(DAMAGED, number, body)
                pos = line_end + 1
                continue
        values.append((number, value))
        line_end = lines.end(end, size) if end < size else size
        tail = text[end:line_end].strip()  # a prompt printed on the line a file without a final newline ends
        if tail:
            skipped.add(PROMPT_LINE if is_prompt(tail) else NOT_JSON, lines.of(end), tail)
        pos = line_end + 1
    return values, failure
