"""``load_ranks(source)``: the traces of one distributed job, one file per rank, loaded in parallel.

Each file is read by :func:`iotrace.trace.load`, so it is sniffed by content and fails as that function fails. The
files load in separate processes rather than threads: decoding JSON (and inflating gzip around it) holds the GIL,
so threads would take turns, while processes parse the ranks at once and send back only the finished tables.

A rank file states its place in the job in ``distributedInfo``; the Kineto reader puts ``rank``, ``world_size`` and
``backend`` in ``TraceTables.meta`` (None without it; other formats leave them out, read here as None too). The
files given must agree on the world size and claim distinct ranks, or they are not one job's ranks.

Files that state no rank are still checked to be of one run, unless the caller says they are (``assume_ranks``,
``iotrace report --ranks``): one format (one profiler wrote every rank's file), a device model in common, and, where
both files keep wall-clock times, captures within an hour of each other. A T4's Nsight Compute report beside an
A100's Kineto trace was otherwise reported as two ranks of one job.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from iotrace.errors import InvalidValueError, IotraceError
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.loader import load
from iotrace.trace.tables import TraceTables

__all__ = ["RankSet", "load_ranks"]


@dataclass(frozen=True)
class RankSet:
    """One job's rank traces, as :func:`load_ranks` found them."""

    #: One table set per file, ordered by ``meta["rank"]``; files with no rank come last, ordered by path.
    ranks: list[TraceTables]
    #: The world size the files agree on, or None when they do not state one.
    world_size: int | None
    #: Ranks below ``world_size`` that no file holds (a subset was loaded); empty when the world size is unknown.
    missing: list[int]


def load_ranks(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
               workers: int | None = None, assume_ranks: bool = False) -> RankSet:
    """Load every rank trace of a distributed job, in parallel, into a :class:`RankSet`.

    ``source`` is a folder or a list of paths. From a folder every regular file is loaded, except hidden ones
    (names starting with ``.``, such as ``.DS_Store``); subfolders are not entered. A file there that is not a
    profiler export is an error naming it, not skipped: a stray file is more likely a mistake than intended.

    Files load in ``min(number of files, workers or os.cpu_count())`` processes; with one file, or one worker,
    they load in this process. A subset of a job is fine: the ranks no file holds are listed in ``missing``.

    ``assume_ranks``: take the files as ranks of one run even where their formats, device models or capture times
    differ (see the module's notes); the world size and the ranks they state are checked either way.

    :raises TraceFormatError: as :func:`load` does, for the first file (by path) that cannot be read; or the
        folder does not exist or holds no files, a file is named twice, two files claim the same rank, a rank is
        outside the world size, the files disagree on the world size (traces of different jobs), or (unless
        ``assume_ranks``) two files are not of one run: different formats, no device model in common, or
        captures more than an hour apart.
    :raises TraceToolError: as :func:`load` does, for a format that needs a tool that is not installed.
    :raises InvalidValueError: ``workers`` is below 1, or the list of paths is empty.
    """
    if workers is not None and workers < 1:
        raise InvalidValueError(f"workers={workers} is below 1", "pass a positive number, or None for one per CPU")
    paths = _files(source)
    tables = _load_all(paths, min(len(paths), workers or os.cpu_count() or 1))
    return _check(list(zip(paths, tables, strict=True)), assume_ranks)


def _files(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The files to load, sorted by path, refusing an empty source and a file named twice."""
    if isinstance(source, str | os.PathLike):
        folder = Path(source)
        if not folder.is_dir():
            problem = "is not a folder" if folder.exists() else "does not exist"
            raise TraceFormatError(folder, problem, "give the folder of per-rank traces, or a list of their paths "
                                                    "(iotrace.trace.load reads one file)")
        paths = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.is_file())
        if not paths:
            raise TraceFormatError(folder, "holds no trace files", "give the folder the profiler wrote one trace "
                                                                    "per rank into")
        return paths
    paths = sorted(Path(p) for p in source)
    if not paths:
        raise InvalidValueError("no trace files were given", "give the folder of rank traces or a list of their paths")
    seen: dict[Path, Path] = {}
    for path in paths:
        first = seen.get(path.resolve())
        if first is not None:
            also = "" if first == path else f" (also as {first})"
            raise TraceFormatError(path, f"is given twice{also}", "give each rank's file once")
        seen[path.resolve()] = path
    return paths


def _load_all(paths: list[Path], workers: int) -> list[TraceTables]:
    """``load`` of each path, in order; the error of the first path (in order) that fails is the one raised."""
    if workers == 1:
        return [load(path) for path in paths]
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(load, path) for path in paths]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    except BrokenProcessPool as exc:
        raise IotraceError(f"a process loading {len(paths)} traces died before it finished (out of memory?)",
                           "pass fewer workers; workers=1 loads them one at a time in this process") from exc


def _check(loaded: list[tuple[Path, TraceTables]], assume_ranks: bool = False) -> RankSet:
    """Refuse files that are not one job's distinct ranks; order them by rank, then path."""
    def world(tables: TraceTables) -> int | None:
        return tables.meta.get("world_size")

    def stated(size: int | None) -> str:
        return f"world size {size}" if size is not None else "no world size"

    first_path, first_tables = loaded[0]
    for path, tables in loaded[1:]:
        if world(tables) != world(first_tables):
            raise TraceFormatError(path, f"states {stated(world(tables))}, but {first_path} states "
                                         f"{stated(world(first_tables))}",
                                   "these are traces of different jobs: load one job's rank files at a time")
    if not assume_ranks:
        for path, tables in loaded[1:]:
            _one_run(first_path, first_tables, path, tables)
    size = world(first_tables)
    owners: dict[int, Path] = {}
    for path, tables in loaded:
        rank = tables.meta.get("rank")
        if rank is None:
            continue
        if size is not None and rank >= size:
            raise TraceFormatError(path, f"claims rank {rank} of a world size of {size}", "the file is damaged")
        if rank in owners:
            raise TraceFormatError(path, f"claims rank {rank}, as does {owners[rank]}",
                                   "give each rank's file once (is one a copy of the other?)")
        owners[rank] = path
    ordered = sorted(loaded, key=lambda item: (item[1].meta.get("rank") is None, item[1].meta.get("rank") or 0,
                                                str(item[0])))
    missing = sorted(set(range(size)) - owners.keys()) if size is not None else []
    return RankSet(ranks=[tables for _, tables in ordered], world_size=size, missing=missing)


#: Formats that are one profiler's output read two ways: an ``.nsys-rep`` is read through its SQLite export.
_SAME_FORMAT = {"nsys-rep": "nsys-sqlite"}
#: Nanosecond timestamps from this on are wall-clock (Unix epoch) times: 10^18 ns is 2001-09-09. Smaller ones count
#: from a boot or a session (CLOCK_MONOTONIC, an nsys session), which two files do not share.
_EPOCH_NS = 10**18
#: Ranks of one job profile the same steps, held in lock step by their collectives, so their captures overlap;
#: two wall-clock captures this far apart are not one run.
_APART_NS = 3600 * 10**9


def _format(tables: TraceTables) -> str:
    fmt = str(tables.meta.get("format") or "unknown")
    return _SAME_FORMAT.get(fmt, fmt)


def _names(tables: TraceTables) -> list[str]:
    """The device models a file names (every GPU of its machine, for a Kineto trace), as written, each once."""
    named = tables.devices["name"].dropna() if "name" in tables.devices else []
    return sorted({str(n) for n in named if str(n).strip()})


def _models(tables: TraceTables) -> set[str]:
    """:func:`_names` compared case- and space-blind."""
    return {" ".join(n.split()).lower() for n in _names(tables)}


def _described(tables: TraceTables) -> str:
    """``a kineto-json trace of NVIDIA A100-PG509-200``: the format and the device models a file names."""
    names = _names(tables)
    fmt = _format(tables)
    article = "an" if fmt[:1].lower() in "aeiou" or fmt.startswith(("ncu", "nsys", "nvprof")) else "a"
    return f"{article} {fmt} trace" + (f" of {' + '.join(names)}" if names else " (no device named)")


def _span_ns(tables: TraceTables) -> tuple[int, int] | None:
    """First kernel start and last kernel end, where the file keeps wall-clock times; None otherwise."""
    kernels = tables.kernels
    if kernels.empty or "start_ns" not in kernels or "end_ns" not in kernels:
        return None
    start, end = kernels["start_ns"].min(), kernels["end_ns"].max()
    try:
        start, end = int(start), int(end)
    except (TypeError, ValueError):  # NA: no timed kernel
        return None
    return (start, end) if start >= _EPOCH_NS else None


def _one_run(first_path: Path, first: TraceTables, path: Path, tables: TraceTables) -> None:
    """Refuse ``path`` beside ``first_path`` when the two are clearly not ranks of one run."""
    why = None
    if _format(tables) != _format(first):
        why = "different formats"
    elif _models(tables) and _models(first) and not _models(tables) & _models(first):
        why = "no device model in common"
    else:
        spans = _span_ns(first), _span_ns(tables)
        if spans[0] is not None and spans[1] is not None:
            gap = max(spans[0][0], spans[1][0]) - min(spans[0][1], spans[1][1])
            if gap > _APART_NS:
                why = f"captured {gap / 3.6e12:.1f} h apart"
    if why is not None:
        raise TraceFormatError(path, f"is {_described(tables)}, {first_path} {_described(first)}: not ranks of one "
                                     f"run ({why})",
                               "report each file on its own (iotrace report FILE), or pass --ranks (in Python: "
                               "assume_ranks=True) if they really are ranks of one job")
