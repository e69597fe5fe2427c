"""``load(path)``: sniff a profiler export by its content and read it into :class:`TraceTables`.

Every failure a file can cause leaves as a :class:`TraceFormatError` (or :class:`TraceToolError` when a tool is
missing) naming the file: parsers raise those for what they anticipate, and the boundary below converts the
rest of what a damaged file can provoke in the standard library, pandas or SQLite, naming the format it was read
as. Nothing half-loaded is returned: the tables are built and checked whole, or not at all.

LLM benchmark results (:mod:`iotrace.trace.formats.bench_results`) are refused in one line that says what they are
and which command reads them; no built-in trace reader is tried on them, so none misreads one as the format it
resembles (a plugin that sniffs one still reads it).
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path

from iotrace.errors import IotraceError
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.formats.bench_results import identify
from iotrace.trace.parser import Head, TraceParser, read_head
from iotrace.trace.registry import BuiltinParser, parsers
from iotrace.trace.tables import TraceTables

__all__ = ["WORKLOAD_FILES", "describe_unknown", "is_export_folder", "load", "sniff"]

#: The files of a rocprof-compute (Omniperf) workload folder, the one kind of folder that is an export: the
#: profile step writes them side by side (ROCm/rocprofiler-compute src/rocprof_compute_profile/profiler_base.py);
#: the first two are required.
WORKLOAD_FILES = ("pmc_perf.csv", "sysinfo.csv", "timestamps.csv", "roofline.csv", "pmc_kernel_top.csv",
                  "pmc_dispatch_info.csv")
# What a damaged file can make the standard library or pandas raise while a parser reads it.
_DAMAGE = (ValueError, TypeError, KeyError, IndexError, LookupError, ArithmeticError, EOFError, UnicodeError,
           zlib.error, sqlite3.Error, json.JSONDecodeError, RecursionError, OSError)


def sniff(head: Head) -> str | None:
    """The name of the format whose parser recognises ``head``, or None."""
    return next((parser.name for parser in _candidates(head, identify(head) is not None)), None)


def _candidates(head: Head, bench_result: bool) -> Iterator[TraceParser]:
    """The parsers that recognise ``head``, highest priority first; none built in for a benchmark result."""
    for parser in parsers():
        if not (bench_result and isinstance(parser, BuiltinParser)) and parser.sniff(head):
            yield parser


def load(path: str | Path) -> TraceTables:
    """Read the profiler export at ``path``, whatever its name, into one :class:`TraceTables`.

    ``path`` is a file, or a folder that is one export: a rocprof-compute workload folder (sysinfo.csv, pmc_perf.csv
    and their siblings), read as its pmc_perf.csv would be.

    :raises TraceFormatError: the file is missing, empty, damaged or of no format iotrace reads.
    :raises TraceToolError: the format needs a tool that is not installed (``nsys``, ``ncu_report``).
    """
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "does not exist", "check the path")
    if path.is_dir():
        path = _folder_export(path)
    if not path.is_file():
        raise TraceFormatError(path, "is not a file", "give the path of a profiler export")
    try:
        head = read_head(path)
    except OSError as exc:
        raise TraceFormatError(path, f"cannot be read ({exc.strerror or exc})", "check its permissions") from exc
    if head.size == 0:
        raise TraceFormatError(path, "is empty (0 bytes)", "the export did not finish; profile again")
    pending = identify(head)
    for parser in _candidates(head, pending is not None):
        try:
            tables = parser.parse(head)
        except IotraceError:
            raise
        except MemoryError as exc:
            raise TraceFormatError(path, f"is too large to read as {parser.name} in memory",
                                   "free memory or split the capture") from exc
        except _DAMAGE as exc:
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise TraceFormatError(path, f"looks like {parser.name} ({parser.tool}) but cannot be read: "
                                         f"{type(exc).__name__}: {detail}", "the file is damaged or truncated") from exc
        tables.meta.setdefault("format", parser.name)
        tables.meta.setdefault("tool", parser.tool)
        return tables
    reads = "iotrace reads " + ", ".join(p.name for p in parsers())
    if pending is not None:
        raise TraceFormatError(path, pending.problem, pending.hint)
    raise TraceFormatError(path, describe_unknown(head), reads)


def is_export_folder(path: Path) -> bool:
    """Whether ``path`` is a folder that is one export (a rocprof-compute workload), read whole by :func:`load`."""
    return path.is_dir() and any((path / name).is_file() for name in WORKLOAD_FILES)


def _folder_export(folder: Path) -> Path:
    """The file :func:`load` sniffs for a folder: a rocprof-compute workload's first file present (its reader checks
    the rest and reads the whole folder); any other folder is refused."""
    found = next((folder / name for name in WORKLOAD_FILES if (folder / name).is_file()), None)
    if found is None:
        raise TraceFormatError(folder, "is a folder, not a profiler export (nor a rocprof-compute workload folder, "
                                       f"which holds {' and '.join(WORKLOAD_FILES[:2])})",
                               "give the path of a profiler export or of a workload folder")
    return found


def describe_unknown(head: Head) -> str:
    """A few words on what an unrecognised file looks like, so the message says more than 'unknown'."""
    text = head.text
    start = (text or "").lstrip()[:15].lower()
    if start.startswith(("<!doctype html", "<html", "<head", "<body")):
        return "is an HTML page, not a profiler export (a saved web page or an error page from a download)"
    if start.startswith(("{", "[")):
        return "is JSON but not a trace (no traceEvents list of Chrome-trace events)"
    if text is not None and text.strip():
        first = text.strip().splitlines()[0][:60]
        return f"is text of no known profiler format (first line {first!r})"
    return f"is binary data of no known profiler format (starts with {head.raw[:8]!r})"
