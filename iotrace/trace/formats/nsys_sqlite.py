"""Nsight Systems SQLite export (``nsys export --type sqlite``): kernels, NVTX ranges, copies, GPUs.

Schema facts (from the exports' own ``.schema`` and the Nsight Systems User Guide, "Exporter SQLite Schema"):
strings live in ``StringIds`` and kernel names are ids into it; the metadata table is ``EXPORT_META_DATA`` up to
about 2024.2 and ``META_DATA_EXPORT`` after; NVTX text is either inline (``text``) or a ``textId``; push/pop ranges
are ``eventType`` 59, start/end ranges 60, domain names 75 (their ``text`` names ``domainId``). Raw column names
are read through ``iotrace/data/trace_fields.toml`` (section ``nsys``).

Kernels are joined to NVTX push/pop ranges through the runtime API call that launched them
(``CUPTI_ACTIVITY_KIND_RUNTIME.correlationId`` = kernel ``correlationId``, on the call's ``globalTid``).

CUDA graphs: traced with ``--cuda-graph-trace=node`` each kernel a graph ran is a kernel row whose
``correlationId`` is that of the ``cudaGraphLaunch``/``cuGraphLaunch`` call that ran it (its ``graph_launch_id``),
with ``graphNodeId`` (every corpus schema, 2022.2 on) and ``graphId`` (newer schemas: Nsight Systems Analysis
Guide, "SQLite Schema Reference") where the export has those columns; CUPTI writes 0 there for a kernel no graph
ran (CUPTI API reference, ``CUpti_ActivityKernel`` ``graphNodeId``/``graphId``), read as missing. Traced with
``--cuda-graph-trace=graph`` (nsys's default) a graph is one ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` row and its
kernels are not in the kernel table; a note says so.

API calls: ``CUPTI_ACTIVITY_KIND_RUNTIME`` holds the runtime's calls (``eventClass`` 0) and the driver's (1)
(``ENUM_NSYS_EVENT_CLASS``: TRACE_PROCESS_EVENT_CUDA_RUNTIME, TRACE_PROCESS_EVENT_CUDA_DRIVER); it is read once, for
the kernels' launch join and for the ``api_calls`` table. Nsight Systems 2022.2 also writes a second row, class 67
(TRACE_PROCESS_EVENT_CUDABACKTRACE), for each call whose backtrace it collected, with the call's correlation id and
the un-suffixed name: a copy of a call, left out of ``api_calls``.

Copies: ``copyKind``, ``srcKind``/``dstKind`` (and a set's ``memKind``) are read through the export's own
``ENUM_CUDA_MEMCPY_OPER`` and ``ENUM_CUDA_MEM_KIND`` tables, or, in an export without them, through the same
numbering (:data:`iotrace.trace.formats.api_calls.NSYS_MEM_KIND` says why that is not CUPTI's for memory kinds).
"""

from __future__ import annotations

import sqlite3
import struct
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._common import join_frames
from iotrace.trace.formats.api_calls import (
    NSYS_MEM_KIND,
    NSYS_MEMCPY_OPER,
    api_call_kind,
    api_call_name,
    copy_kind,
    memory_kind,
)
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

#: Graph columns of CUPTI_ACTIVITY_KIND_KERNEL, read where the schema has them (see the module docstring).
_GRAPH_COLUMNS = {"graphNodeId": "graph_node_id", "graphId": "graph_id"}
#: ``eventClass`` of a runtime-table row that copies a call to carry its backtrace (see the module docstring).
_BACKTRACE_CLASS = 67


class NsysSqliteParser(_sniff.NsysSqlite):
    """Reads the format :class:`iotrace.trace.formats._sniff.NsysSqlite` declares."""

    def parse(self, head: Head) -> TraceTables:
        check_not_truncated(head)
        uri = head.path.resolve().as_uri() + "?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            return read_database(db, head.path)


def check_not_truncated(head: Head) -> None:
    """Refuse a file shorter than the page count its header promises (a cut-short copy reads as partial data).

    SQLite file format, "The Database Header": page size at offset 16 (1 means 65536), in-header page count at
    offset 28, valid when the change counters at offsets 24 and 92 agree.
    """
    raw = head.raw
    if len(raw) < 100:
        raise TraceFormatError(head.path, f"is a truncated SQLite file ({head.size} bytes, shorter than its header)",
                               "export it again with nsys export --type sqlite")
    page_size = struct.unpack(">H", raw[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    pages = struct.unpack(">I", raw[28:32])[0]
    valid = raw[24:28] == raw[92:96]
    if valid and pages and head.size < page_size * pages:
        raise TraceFormatError(head.path, f"is a truncated SQLite database ({head.size} bytes; its header says "
                                          f"{pages} pages of {page_size})",
                               "copy it again, or export it again with nsys export --type sqlite")


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def read_database(db: sqlite3.Connection, path: Path) -> TraceTables:
    spec = fields("nsys")
    tables = _tables(db)
    meta = _meta(db, tables, spec)
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and "TARGET_INFO_GPU" not in tables:
        if "StringIds" not in tables:
            raise TraceFormatError(path, "is an SQLite database but not an Nsight Systems export (no StringIds, "
                                         "no CUPTI_ACTIVITY_KIND_KERNEL)", "export with nsys export --type sqlite")
        meta["notes"].append("no CUDA kernels were captured (no CUPTI_ACTIVITY_KIND_KERNEL table)")
    strings = _strings(db, path) if "StringIds" in tables else {}
    kernels = _kernels(db, tables, spec, strings, path)
    ranges = _ranges(db, tables, spec, strings)
    calls, api_calls = _runtime_calls(db, tables, strings)
    kernels, ranges = join_frames(kernels, ranges, calls)
    _note_whole_graphs(db, tables, meta["notes"])
    devices = _devices(db, tables, spec, meta["notes"])
    return build(path, kernels=kernels, ranges=ranges, devices=devices, transfers=_transfers(db, tables),
                 api_calls=api_calls, meta=meta)


def _meta(db: sqlite3.Connection, tables: set[str], spec: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, str] = {}
    for name in spec["meta_tables"]["names"]:
        if name in tables:
            values = {str(k): str(v) for k, v in db.execute(f"SELECT name, value FROM {name}")}
            values["_table"] = name
            break
    return {"format": "nsys-sqlite", "tool": values.get("EXPORT_PRODUCT_NAME", "Nsight Systems"),
            "version": values.get("EXPORT_PRODUCT_VERSION"),
            "schema": f"{values.get('EXPORT_SCHEMA_VERSION', 'unknown')} ({values.get('_table', 'no metadata table')})",
            "notes": []}


def _strings(db: sqlite3.Connection, path: Path) -> pd.Series:
    frame = pd.read_sql_query("SELECT id, value FROM StringIds", db)
    repeated = frame["id"][frame["id"].duplicated()]
    if len(repeated):  # nsys writes each id once (its primary key); a repeat means the file was altered
        raise TraceFormatError(path, f"StringIds holds id {repeated.iloc[0]} more than once",
                               "the export is damaged; export it again with nsys export --type sqlite")
    return pd.Series(frame["value"].to_numpy(dtype=object), index=frame["id"].to_numpy())


def _lookup(strings: pd.Series, ids: pd.Series) -> pd.Series:
    """StringIds values for a column of ids; an id with no string is None (a damaged export), never a crash."""
    numeric = pd.to_numeric(ids, errors="coerce")
    found = numeric.map(strings) if len(strings) else pd.Series([None] * len(ids), index=ids.index)
    return found.astype("object").where(found.notna(), None)


def _kernels(db: sqlite3.Connection, tables: set[str], spec: dict[str, Any], strings: pd.Series,
             path: Path) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return pd.DataFrame()
    have = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    mapping = {raw: col for raw, col in spec["kernel"].items() if raw in have}
    refs = {raw: col for raw, col in spec["kernel_strings"].items() if raw in have}
    missing = {"start", "end", "demangledName"} - have
    if missing:
        raise TraceFormatError(path, f"CUPTI_ACTIVITY_KIND_KERNEL lacks columns {sorted(missing)}",
                               "the export is damaged or of an unknown schema")
    graph = {raw: col for raw, col in _GRAPH_COLUMNS.items() if raw in have}
    select = ", ".join([*(f'"{raw}"' for raw in [*mapping, *refs]),
                        *(f'NULLIF("{raw}", 0) AS "{raw}"' for raw in graph)])
    raw = pd.read_sql_query(f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start", db)
    kernels = raw.rename(columns={**mapping, **graph})
    for raw_name, column in refs.items():
        kernels[column] = _lookup(strings, raw[raw_name])
    if kernels["name"].isna().any():
        raise TraceFormatError(path, "a kernel's name id is missing from StringIds", "the export is damaged")
    kernels["id"] = range(len(kernels))
    kernels["duration_ns"] = kernels["end_ns"] - kernels["start_ns"]
    if "static_smem_bytes" in kernels and "dynamic_smem_bytes" in kernels:
        kernels["smem_bytes"] = kernels["static_smem_bytes"] + kernels["dynamic_smem_bytes"]
    return kernels


def _ranges(db: sqlite3.Connection, tables: set[str], spec: dict[str, Any], strings: pd.Series) -> pd.DataFrame:
    kinds = spec["nvtx_event_types"]
    ranges = pd.DataFrame(columns=["id", "name", "domain", "kind", "start_ns", "end_ns", "thread", "nests"])
    if "NVTX_EVENTS" in tables:
        have = _columns(db, "NVTX_EVENTS")
        text_id = "textId" if "textId" in have else "NULL"
        domain = "domainId" if "domainId" in have else "NULL"
        raw = pd.read_sql_query(
            f"SELECT start, end, eventType, text, {text_id} AS textId, globalTid, {domain} AS domainId "
            f"FROM NVTX_EVENTS WHERE eventType IN ({kinds['push_pop']}, {kinds['start_end']}, "
            f"{kinds['domain_create']})", db)
        domains = raw[raw["eventType"] == kinds["domain_create"]]
        domain_names = dict(zip(domains["domainId"], domains["text"], strict=False))
        events = raw[raw["eventType"] != kinds["domain_create"]].dropna(subset=["end"]).reset_index(drop=True)
        name = events["text"].astype("object")
        from_ids = _lookup(strings, events["textId"])
        name = name.where(name.notna(), from_ids).where(lambda s: s.notna(), "(unnamed)")
        ranges = pd.DataFrame({
            "id": range(len(events)), "name": name, "start_ns": events["start"], "end_ns": events["end"],
            "duration_ns": events["end"] - events["start"],
            "domain": events["domainId"].map(lambda d: domain_names.get(d, "default") if pd.notna(d) else "default"),
            "kind": events["eventType"].map({kinds["push_pop"]: "push/pop", kinds["start_end"]: "start/end"}),
            "thread": events["globalTid"], "nests": events["eventType"] == kinds["push_pop"],
        })
        # globalTid packs pid and tid (Nsight Systems User Guide: GlobalId = ... pid << 24 | tid): keep both.
        ranges["process"] = _process(events["globalTid"])
    return ranges


def _process(global_tid: pd.Series | np.ndarray) -> pd.Series | np.ndarray:
    """The process id in a ``globalTid`` (Nsight Systems User Guide: GlobalId = ... pid << 24 | tid); NaN where
    missing."""
    tid = pd.to_numeric(global_tid, errors="coerce")
    return (tid // (1 << 24)) % (1 << 24)


def _floats(values: pd.Series | np.ndarray) -> np.ndarray:
    """A column read from SQLite as float64, NaN where NULL or not a number (numpy alone for a numeric column)."""
    if values.dtype in (np.int64, np.float64):
        return np.asarray(values, dtype=np.float64)
    return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _runtime_calls(db: sqlite3.Connection, tables: set[str],
                   strings: pd.Series) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """CUPTI_ACTIVITY_KIND_RUNTIME read once: the calls the kernels are joined through (every row, as
    :func:`join_frames` takes them) and the ``api_calls`` table (without backtrace copies, in start order).

    Column work is numpy on the read frame: a pandas operation costs ~0.1 ms whatever the size, as much as reading
    a few hundred rows."""
    calls = pd.DataFrame(columns=["correlation_id", "thread", "time_ns"])
    have = _columns(db, "CUPTI_ACTIVITY_KIND_RUNTIME") if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables else set()
    if not have:
        return calls, None
    end = "end" if "end" in have else "NULL"
    name = "nameId" if "nameId" in have else "NULL"
    # Only an export with backtrace copies pays for reading their flag (SQLite answers EXISTS without Python).
    copies = "eventClass" in have and db.execute(f"SELECT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                                 f"WHERE eventClass = {_BACKTRACE_CLASS})").fetchone()[0]
    flag = f", eventClass = {_BACKTRACE_CLASS} AS backtrace" if copies else ""
    calls = pd.read_sql_query(f"SELECT correlationId AS correlation_id, globalTid AS thread, start AS time_ns, "
                              f"{end} AS end_ns, {name} AS name_id{flag} FROM CUPTI_ACTIVITY_KIND_RUNTIME", db)
    # Each distinct name id is looked up and classified once; rows index the results by their id's position.
    ids = pd.unique(calls["name_id"].dropna())
    raw = [*_lookup(strings, pd.Series(ids, dtype="object")).tolist(), None]  # the last: no name id
    names = np.array([api_call_name(n) if isinstance(n, str) else None for n in raw], dtype=object)
    kinds = np.array([api_call_kind(n) if isinstance(n, str) else "other" for n in raw], dtype=object)
    code = calls["name_id"].map(dict(zip(ids.tolist(), range(len(ids)), strict=True))).to_numpy(
        dtype=np.float64, na_value=np.nan)
    code = np.where(np.isnan(code), len(ids), code).astype(np.int64)
    calls["graph"] = kinds[code] == "graph"
    start = _floats(calls["time_ns"])
    exact = calls["time_ns"].to_numpy() if calls["time_ns"].dtype == np.int64 else np.nan_to_num(start)
    order = np.arange(len(calls)) if not copies else np.flatnonzero(calls["backtrace"].to_numpy() != 1)
    if np.isnan(start[order]).any() or (np.diff(exact[order]) < 0).any():  # nsys writes them in start order
        order = order[np.lexsort((exact[order], np.isnan(start[order])))]  # by start (stable), no start last
    column = {key: calls[key].to_numpy()[order] for key in ("time_ns", "end_ns", "thread", "correlation_id")}
    duration = _floats(calls["end_ns"])[order] - start[order]
    api_calls = {"id": np.arange(len(order), dtype=np.int64), "name": names[code[order]],
                 "kind": kinds[code[order]], "start_ns": column["time_ns"], "end_ns": column["end_ns"],
                 "duration_ns": duration, "process": _process(column["thread"]),
                 "thread": column["thread"], "correlation_id": column["correlation_id"]}
    return calls.drop(columns=["name_id", *(["backtrace"] if copies else [])]), api_calls


def _note_whole_graphs(db: sqlite3.Connection, tables: set[str], notes: list[str]) -> None:
    """Say so where graphs were traced whole (``--cuda-graph-trace=graph``): their kernels are not kernel rows."""
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" not in tables:
        return
    (whole,) = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()
    if whole:
        launches = "1 CUDA graph launch was" if whole == 1 else f"{whole} CUDA graph launches were"
        notes.append(f"{launches} traced whole (nsys --cuda-graph-trace=graph): the kernels they ran are not in the "
                     "kernel table; profile with --cuda-graph-trace=node to see them")


def _devices(db: sqlite3.Connection, tables: set[str], spec: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    """TARGET_INFO_GPU's rows, in id order, each with its CardBook card (notes: the devices the CardBook lacks).

    nsys lists every display adapter of the machine there; one with 0 SMs is no CUDA device (on Windows, "Microsoft
    Basic Render Driver", with every property 0): it keeps its id and name, and gets no properties and no card.
    """
    if "TARGET_INFO_GPU" not in tables:
        return []
    have = _columns(db, "TARGET_INFO_GPU")
    mapping = {raw: col for raw, col in spec["gpu"].items() if raw in have}
    extra = [c for c in ("computeMajor", "computeMinor", "clockRate") if c in have]
    select = ", ".join(f'"{c}"' for c in [*mapping, *extra])
    rows = []
    for record in db.execute(f"SELECT {select} FROM TARGET_INFO_GPU ORDER BY id"):
        values = dict(zip([*mapping.values(), *extra], record, strict=True))
        if values.get("sm_count") == 0:
            rows.append({"device": values.get("device"), "name": values.get("name"), "vendor": None, "card": None})
            notes.append(f"device {values.get('device')} {values.get('name')!r} has 0 SMs: a display adapter, not a "
                         "CUDA device (nsys lists every GPU of the machine); it gets no card")
            continue
        major, minor = values.pop("computeMajor", None), values.pop("computeMinor", None)
        clock = values.pop("clockRate", None)
        if isinstance(major, int) and isinstance(minor, int):
            values["cc"] = f"{major}.{minor}"
        if isinstance(clock, (int, float)):
            values["clock_mhz"] = clock / 1e6  # TARGET_INFO_GPU.clockRate is in Hz (1410000000 on an A100)
        values["vendor"] = "nvidia"  # Nsight Systems traces only NVIDIA GPUs
        rows.append(values)
    cuda = iter(with_cards([row for row in rows if "card" not in row], notes=notes))
    return [row if "card" in row else next(cuda) for row in rows]


def _enum_words(db: sqlite3.Connection, tables: set[str], table: str, default: tuple[str, ...]) -> dict[int, str]:
    """An nsys ENUM table as id -> the word after ``KIND_`` (``CUDA_MEMCPY_KIND_UVM_HTOD`` -> UVM_HTOD), or the
    export-less ``default`` numbering (:data:`NSYS_MEMCPY_OPER`, :data:`NSYS_MEM_KIND`)."""
    if table in tables and {"id", "name"} <= _columns(db, table):
        return {i: str(name).split("KIND_", 1)[-1] for i, name in db.execute(f"SELECT id, name FROM {table}")
                if type(i) is int and 0 <= i < 1024}
    return dict(enumerate(default))


def _decode(codes: pd.Series, table: dict[int, Any], absent: Any = None) -> np.ndarray:
    """Per row, ``table[code]`` (``absent`` for NULL and for a code the table lacks), by indexing a lookup array."""
    values = pd.to_numeric(codes, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    size = max(table, default=-1) + 1
    lookup = np.array([*(table.get(i, absent) for i in range(size)), absent], dtype=object)
    known = (values >= 0) & (values < size) & (values == np.floor(values))  # False for NaN
    return lookup[np.where(known, np.nan_to_num(values), size).astype(np.int64)]


def _transfers(db: sqlite3.Connection, tables: set[str]) -> dict[str, np.ndarray] | None:
    """Copies and sets, each copy named by its direction ("memcpy DtoH"; one of no known kind keeps its number,
    "memcpy kind 14"), with its direction, memory kinds and correlation id (see the module docstring). Handed to
    :func:`build` as numpy columns, which it conforms without pandas' per-column cost."""
    parts = []
    opers = _enum_words(db, tables, "ENUM_CUDA_MEMCPY_OPER", NSYS_MEMCPY_OPER)
    memory = {i: memory_kind(word) for i, word in _enum_words(db, tables, "ENUM_CUDA_MEM_KIND", NSYS_MEM_KIND).items()}
    # Per copy kind: (transfers.kind, copy_kind, whether a unified-memory migration).
    named = {i: (f"memcpy {label}" if label else f"memcpy kind {i}", direction, word.startswith("UVM_"))
             for i, word in opers.items() for direction, label in [copy_kind(word)]}
    for table, kind, sides in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy", ("srcKind", "dstKind")),
                               ("CUPTI_ACTIVITY_KIND_MEMSET", "memset", (None, "memKind"))):
        if table not in tables:
            continue
        have = _columns(db, table)
        if not {"start", "end", "bytes"} <= have:
            continue
        src, dst = (side if side in have else "NULL" for side in sides)
        oper = "copyKind" if kind == "memcpy" and "copyKind" in have else "NULL"
        correlation = "correlationId" if "correlationId" in have else "NULL"
        frame = pd.read_sql_query(f"SELECT start AS start_ns, end AS end_ns, deviceId AS device, streamId AS stream, "
                                  f"bytes, {oper} AS copy_kind, {src} AS src_kind, {dst} AS dst_kind, "
                                  f"NULLIF({correlation}, 0) AS correlation_id FROM {table}", db)
        columns = {name: frame[name].to_numpy() for name in ("start_ns", "end_ns", "device", "stream", "bytes",
                                                             "correlation_id")}
        columns["duration_ns"] = (frame["end_ns"] - frame["start_ns"]).to_numpy()
        src_kind, dst_kind = _decode(frame["src_kind"], memory), _decode(frame["dst_kind"], memory)
        if oper == "NULL":
            columns["kind"], columns["copy_kind"] = np.full(len(frame), kind, dtype=object), np.full(len(frame), None)
        else:
            number = pd.to_numeric(frame["copy_kind"], errors="coerce")
            label = _decode(number, {i: entry[0] for i, entry in named.items()})
            unknown = np.flatnonzero(pd.isna(label))  # a number no table names
            label[unknown] = [f"memcpy kind {n:.0f}" if n == n else "memcpy" for n in number.to_numpy()[unknown]]
            columns["kind"] = label
            columns["copy_kind"] = _decode(number, {i: entry[1] for i, entry in named.items()})
            # A unified-memory migration moves a managed allocation's pages; nsys writes its sides as unknown.
            unified = _decode(number, {i: entry[2] for i, entry in named.items()}, False).astype(bool)
            src_kind = np.where(unified & pd.isna(src_kind), "managed", src_kind)
            dst_kind = np.where(unified & pd.isna(dst_kind), "managed", dst_kind)
        columns["src_kind"], columns["dst_kind"] = src_kind, dst_kind
        parts.append(columns)
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]} if parts else None
