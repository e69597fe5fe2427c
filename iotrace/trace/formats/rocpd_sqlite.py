"""rocpd SQLite databases (``rocprofv3 --output-format rocpd``, ROCm 7): dispatches, HIP API calls, roctx markers,
copies, counters and GPU agents.

Schema facts (ROCm/rocprofiler-sdk source/share/rocprofiler-sdk-rocpd/: rocpd_tables.sql, rocpd_metadata.sql,
data_views.sql): the tables carry the run's uuid in their names (``rocpd_kernel_dispatch_<uuid>``) under plain-named
views, and the database carries views that join them: ``kernels`` (one row per dispatch, with its kernel symbol's
registers and LDS), ``regions`` (host API calls and markers, by ``category``: ``HIP_RUNTIME_API_EXT``,
``MARKER_CORE_API``, ...), ``memory_copies`` and ``pmc_events``. ``rocpd_metadata`` states ``schema_version``; the
versions this reader knows are listed in ``iotrace/data/trace_fields.toml`` (``rocpd.schema``), as are the kernel
columns it reads. A database of another version is refused in one line naming the version, never half-read.

Grids are in work-items (see :mod:`iotrace.trace.formats._rocm`): ``grid_x`` = ceil(grid_x / workgroup_x), per
dimension. ``device`` is the agent's GPU index (``type_index``), as ``rocprofv3`` numbers GPUs; ``wave_size`` is the
agent's wavefront size. An older rocmProfileData (RPD) database also names its tables ``rocpd_*``: it is named and
refused.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import Any

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._rocm import blocks, copy_op, kernel_name
from iotrace.trace.formats.api_calls import classify_calls
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

# Region categories of roctx markers (rocprofiler-sdk include/rocprofiler-sdk/marker/api_id.h domains, named
# MARKER_CORE_API, MARKER_CONTROL_API, MARKER_NAME_API in rocpd): ranges, not API calls.
_MARKER_PREFIX = "MARKER_"
# Tables only rocmProfileData's RPD schema has (ROCm/rocmProfileData rocpd_python/rocpd/schema_data/tableSchema.cmd).
_RPD_TABLES = frozenset({"rocpd_api", "rocpd_op"})


class RocpdSqliteParser(_sniff.RocpdSqlite):
    """Reads the format :class:`iotrace.trace.formats._sniff.RocpdSqlite` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            names = {str(row[0]) for row in db.execute("SELECT name FROM sqlite_master")}
            if names >= _RPD_TABLES:
                raise TraceFormatError(path, "is a rocmProfileData (RPD) database, not rocprofv3's rocpd schema",
                                       "iotrace reads rocprofv3 --output-format rocpd databases (ROCm 7)")
            version = _schema_version(db, names)
            known = fields("rocpd")["schema"]["versions"]
            if version not in known:
                raise TraceFormatError(path, f"is a rocpd database of schema version {version}, which iotrace does "
                                             f"not know (it reads version {', '.join(known)})",
                                       "profile with ROCm 7's rocprofv3, or export it with rocpd2csv")
            devices, waves = _devices(db)
            kernels = _kernels(db, waves)
            calls, ranges = _regions(db)
            transfers = _copies(db, names)
            metrics = _metrics(db, names)
        notes = ["rocpd grids are in work-items: grid_x/y/z are workgroup counts, ceil(grid / workgroup) per dimension"]
        if not kernels:
            notes.append("the database holds no kernel dispatches (profile with --kernel-trace)")
        meta = {"format": self.name, "tool": self.tool, "version": None, "schema": f"rocpd {version}",
                "notes": notes}
        return build(path, kernels=kernels, api_calls=calls, ranges=ranges, transfers=transfers, metrics=metrics,
                     devices=with_cards(devices, notes=notes), meta=meta)


def _schema_version(db: sqlite3.Connection, names: set[str]) -> str:
    if "rocpd_metadata" not in names:
        return "(none stated)"
    row = db.execute("SELECT value FROM rocpd_metadata WHERE tag = 'schema_version'").fetchone()
    return "(none stated)" if row is None else str(row[0])


def _rows(db: sqlite3.Connection, sql: str) -> list[dict[str, Any]]:
    cursor = db.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]


def _devices(db: sqlite3.Connection) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """GPU agents as device rows, and each agent's wavefront size by its GPU index."""
    rows, waves = [], {}
    for agent in _rows(db, "SELECT type_index, name, product_name, extdata FROM rocpd_info_agent "
                           "WHERE type = 'GPU' ORDER BY type_index"):
        try:
            ext = json.loads(agent["extdata"] or "{}")
        except (TypeError, json.JSONDecodeError):
            ext = {}
        ext = ext if isinstance(ext, dict) else {}
        index = agent["type_index"]
        if isinstance(ext.get("wave_front_size"), int):
            waves[index] = ext["wave_front_size"]
        # extdata is rocprofiler-sdk's rocprofiler_agent_v0_t as JSON (include/rocprofiler-sdk/agent.h): cu_count,
        # wave_front_size, max_engine_clk_fcompute (MHz), workgroup_max_size.
        rows.append({"device": index, "name": agent["product_name"] or agent["name"], "vendor": "amd",
                     "arch": agent["name"], "sm_count": ext.get("cu_count"), "warp_size": ext.get("wave_front_size"),
                     "clock_mhz": ext.get("max_engine_clk_fcompute"),
                     "max_threads_per_block": ext.get("workgroup_max_size")})
    return rows, waves


def _kernels(db: sqlite3.Connection, waves: dict[int, int]) -> list[dict[str, Any]]:
    columns: dict[str, str] = fields("rocpd")["kernel"]
    wanted = [*columns, "grid_x", "grid_y", "grid_z", "workgroup_x", "workgroup_y", "workgroup_z"]
    out = []
    for raw in _rows(db, f"SELECT {', '.join(wanted)} FROM kernels ORDER BY start, id"):
        row = {column: raw[name] for name, column in columns.items()}
        row["name"] = kernel_name(str(row["name"] or ""))
        if row.get("correlation_id") == 0:
            row["correlation_id"] = None  # rocprofiler-sdk's "none"
        if row["start_ns"] is not None and row["end_ns"] is not None:
            row["duration_ns"] = row["end_ns"] - row["start_ns"]
        for axis in "xyz":
            row[f"grid_{axis}"] = blocks(raw[f"grid_{axis}"], raw[f"workgroup_{axis}"])
            row[f"block_{axis}"] = raw[f"workgroup_{axis}"]
        if row.get("smem_bytes") is not None and row.get("static_smem_bytes") is not None:
            row["dynamic_smem_bytes"] = max(row["smem_bytes"] - row["static_smem_bytes"], 0)
        row["wave_size"] = waves.get(row["device"])
        out.append(row)
    return out


def _regions(db: sqlite3.Connection) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Host API calls (every region but roctx markers) and the markers as ranges."""
    calls, ranges = [], []
    for raw in _rows(db, "SELECT id, category, name, pid, tid, start, end, corr_id FROM regions ORDER BY start, id"):
        span = {"start_ns": raw["start"], "end_ns": raw["end"], "process": raw["pid"], "thread": raw["tid"],
                "duration_ns": None if raw["start"] is None or raw["end"] is None else raw["end"] - raw["start"]}
        if str(raw["category"] or "").startswith(_MARKER_PREFIX):
            ranges.append({"id": raw["id"], "name": raw["name"], "domain": "roctx", "kind": "range", **span})
        else:
            calls.append({"raw": raw["name"], "correlation_id": raw["corr_id"] or None, **span})
    names, kinds = classify_calls([c.pop("raw") for c in calls])
    return [{"id": i, "name": n, "kind": k, **c} for i, (n, k, c) in enumerate(zip(names, kinds, calls,
                                                                                      strict=True))], ranges


def _copies(db: sqlite3.Connection, names: set[str]) -> list[dict[str, Any]]:
    if "memory_copies" not in names:
        return []
    out = []
    for raw in _rows(db, "SELECT name, start, end, size, stream_id, dst_agent_type_index, dst_agent_type, "
                         "src_agent_type_index, corr_id FROM memory_copies ORDER BY start, id"):
        kind, direction = copy_op(str(raw["name"] or "")) or (str(raw["name"]), None)
        device = raw["dst_agent_type_index"] if raw["dst_agent_type"] == "GPU" else raw["src_agent_type_index"]
        out.append({"kind": kind, "copy_kind": direction, "device": device, "stream": raw["stream_id"],
                    "start_ns": raw["start"], "end_ns": raw["end"], "duration_ns": raw["end"] - raw["start"],
                    "bytes": raw["size"], "correlation_id": raw["corr_id"] or None})
    return out


def _metrics(db: sqlite3.Connection, names: set[str]) -> list[dict[str, Any]]:
    """Counter values per dispatch (``pmc_events`` joined to its dispatch through the event id)."""
    if "pmc_events" not in names:
        return []
    return [{"kernel_id": raw["kernel_id"], "metric": raw["counter_name"], "unit": None, "value": raw["value"]}
            for raw in _rows(db, "SELECT K.id AS kernel_id, P.counter_name, SUM(P.counter_value) AS value "
                                 "FROM pmc_events P JOIN rocpd_kernel_dispatch K ON K.event_id = P.event_id "
                                 "GROUP BY K.id, P.counter_name ORDER BY K.id, P.counter_name")]
