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
"""

from __future__ import annotations

import sqlite3
import struct
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._common import is_graph_launch, join_frames
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

#: Graph columns of CUPTI_ACTIVITY_KIND_KERNEL, read where the schema has them (see the module docstring).
_GRAPH_COLUMNS = {"graphNodeId": "graph_node_id", "graphId": "graph_id"}


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
    ranges, calls = _ranges(db, tables, spec, strings)
    kernels, ranges = join_frames(kernels, ranges, calls)
    _note_whole_graphs(db, tables, meta["notes"])
    devices = _devices(db, tables, spec, meta["notes"])
    return build(path, kernels=kernels, ranges=ranges, devices=devices, transfers=_transfers(db, tables, strings),
                 meta=meta)


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


def _ranges(db: sqlite3.Connection, tables: set[str], spec: dict[str, Any],
            strings: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
    kinds = spec["nvtx_event_types"]
    ranges = pd.DataFrame(columns=["id", "name", "domain", "kind", "start_ns", "end_ns", "thread", "nests"])
    calls = pd.DataFrame(columns=["correlation_id", "thread", "time_ns"])
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
        tid = pd.to_numeric(events["globalTid"], errors="coerce")
        ranges["process"] = (tid // (1 << 24)) % (1 << 24)
    have = _columns(db, "CUPTI_ACTIVITY_KIND_RUNTIME") if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables else set()
    if have:
        end = "end" if "end" in have else "NULL"
        name = "nameId" if "nameId" in have else "NULL"
        calls = pd.read_sql_query(f"SELECT correlationId AS correlation_id, globalTid AS thread, start AS time_ns, "
                                  f"{end} AS end_ns, {name} AS name_id FROM CUPTI_ACTIVITY_KIND_RUNTIME", db)
        calls["graph"] = calls["name_id"].isin(_graph_launch_names(strings, calls["name_id"]))
        calls = calls.drop(columns=["name_id"])
    return ranges, calls


def _graph_launch_names(strings: pd.Series, name_ids: pd.Series) -> list[Any]:
    """The StringIds ids, among ``name_ids``, that name a CUDA graph launch call (each distinct id looked up once)."""
    ids = pd.unique(name_ids.dropna())
    names = _lookup(strings, pd.Series(ids, dtype="object"))
    return [i for i, n in zip(ids, names, strict=True) if isinstance(n, str) and is_graph_launch(n)]


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


def _transfers(db: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    frames = []
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table not in tables:
            continue
        have = _columns(db, table)
        if not {"start", "end", "bytes"} <= have:
            continue
        copy_kind = "copyKind" if "copyKind" in have else "NULL"
        frame = pd.read_sql_query(f"SELECT start AS start_ns, end AS end_ns, deviceId AS device, streamId AS stream, "
                                  f"bytes, {copy_kind} AS copy_kind FROM {table}", db)
        frame["kind"] = kind if copy_kind == "NULL" else kind + " kind " + frame["copy_kind"].astype("string")
        frame["duration_ns"] = frame["end_ns"] - frame["start_ns"]
        frames.append(frame.drop(columns=["copy_kind"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

