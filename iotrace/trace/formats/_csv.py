"""CSV helpers for the text exports: find the header after a tool's preamble, parse numbers the tools write."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from iotrace.trace.errors import TraceFormatError
from iotrace.trace.parser import read_bytes

__all__ = ["find_header", "number", "read_rows"]

_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][+-]?\d+)?$")


def read_rows(path: Path, gzipped: bool) -> list[list[str]]:
    """All CSV rows of a text file (gunzipped when needed)."""
    try:
        text = read_bytes(path, gzipped).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, f"is not UTF-8 text at byte {exc.start}", "the file is damaged") from exc
    if "\x00" in text:
        raise TraceFormatError(path, "holds NUL bytes, which no CSV export writes", "the file is damaged")
    try:
        return [row for row in csv.reader(io.StringIO(text)) if row]
    except csv.Error as exc:
        raise TraceFormatError(path, f"is not well-formed CSV ({exc})", "the file is damaged") from exc


def find_header(rows: list[list[str]], needed: set[str]) -> int | None:
    """Index of the first row holding every name in ``needed`` (preamble lines such as ``==PROF==`` come first)."""
    for index, row in enumerate(rows):
        if needed <= {cell.strip() for cell in row}:
            return index
    return None


def number(text: str) -> float | None:
    """A number as ncu and nsys write it (``32,746,880``, ``1.5e3``); None for empty or ``n/a``.

    Raises ValueError for NaN, infinities and anything else that is not a number.
    """
    cleaned = text.strip().strip('"')
    if cleaned in ("", "n/a", "N/A", "-"):
        return None
    if not _NUMBER.match(cleaned) or not any(ch.isdigit() for ch in cleaned):
        raise ValueError(f"{cleaned[:40]!r} is not a number")
    value = float(cleaned.replace(",", ""))
    if not math.isfinite(value):
        raise ValueError(f"{cleaned[:40]!r} is not a finite number")
    return value
