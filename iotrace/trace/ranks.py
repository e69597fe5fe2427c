"""``load_ranks(source)``: the traces of one distributed job, one file per rank, loaded in parallel.

Each file is read by :func:`iotrace.trace.load`, so it is sniffed by content and fails as that function fails. The
files load in separate processes rather than threads: decoding JSON (and inflating gzip around it) holds the GIL,
so threads would take turns, while processes parse the ranks at once and send back only the finished tables.

A rank file states its place in the job in ``distributedInfo``; the Kineto reader puts ``rank``, ``world_size`` and
``backend`` in ``TraceTables.meta`` (None without it; other formats leave them out, read here as None too). The
files given must agree on the world size and claim distinct ranks, or they are not one job's ranks.
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
               workers: int | None = None) -> RankSet:
    """Load every rank trace of a distributed job, in parallel, into a :class:`RankSet`.

    ``source`` is a folder or a list of paths. From a folder every regular file is loaded, except hidden ones
    (names starting with ``.``, such as ``.DS_Store``); subfolders are not entered. A file there that is not a
    profiler export is an error naming it, not skipped: a stray file is more likely a mistake than intended.

    Files load in ``min(number of files, workers or os.cpu_count())`` processes; with one file, or one worker,
    they load in this process. A subset of a job is fine: the ranks no file holds are listed in ``missing``.

    :raises TraceFormatError: as :func:`load` does, for the first file (by path) that cannot be read; or the
        folder does not exist or holds no files, a file is named twice, two files claim the same rank, a rank is
        outside the world size, or the files disagree on the world size (traces of different jobs).
    :raises TraceToolError: as :func:`load` does, for a format that needs a tool that is not installed.
    :raises InvalidValueError: ``workers`` is below 1, or the list of paths is empty.
    """
    if workers is not None and workers < 1:
        raise InvalidValueError(f"workers={workers} is below 1", "pass a positive number, or None for one per CPU")
    paths = _files(source)
    tables = _load_all(paths, min(len(paths), workers or os.cpu_count() or 1))
    return _check(list(zip(paths, tables, strict=True)))


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


def _check(loaded: list[tuple[Path, TraceTables]]) -> RankSet:
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
