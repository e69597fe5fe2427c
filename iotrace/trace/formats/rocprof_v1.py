"""Legacy rocprof (v1) CSVs: the per-dispatch ``results.csv``, the counter CSV of ``-i "pmc: ..."`` and the ``--stats``
summaries (``results.stats.csv``, ``results.hip_stats.csv``, ``results.copy_stats.csv``).

Per-dispatch rows (header ``Index,KernelName,gpu-id,queue-id,...,grd,wgr,...``) become one kernel row each; their
columns are named in ``iotrace/data/trace_fields.toml`` (``rocprof_v1``), and every other column is a counter the run
collected (``FETCH_SIZE``, ``SQ_WAVES``), kept as the dispatch's metrics. ``grd``/``wgr`` are totals in work-items:
``grid_x`` is the workgroup count ``ceil(grd / wgr)`` and ``block_x`` = ``wgr`` (rocprof v1 writes no per-dimension
sizes, so ``grid_y``/``grid_z`` and ``block_y``/``block_z`` are 1: the totals are exact, the shape is not).

Summary rows (``Name,Calls,TotalDurationNs,AverageNs,Percentage``, one per name) are sorted by name, so a file
holding several kinds reads whole: copy and fill ops (``CopyHostToDevice``, ``FillBuffer``) become transfers with
``launches`` = Calls and the total duration; HIP API names (``hipMemcpy``, ``__hipPushCallConfiguration``) are totals
the ``api_calls`` table (one row per call) cannot hold, so they go to ``meta["api_summary"]`` and a note; every other
name is a kernel, one row per name with ``launches`` = Calls and ``duration_ns`` = the total, as nvprof's and nsys's
summaries are read.

Kernel names lose rocprof's ``.kd`` suffix (:func:`iotrace.trace.formats._rocm.kernel_name`). A row whose field
count differs from the header's, or a file that does not end its last row with a newline (a file cut short), is
refused whole, never read short of its rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._csv import number, read_rows
from iotrace.trace.formats._rocm import blocks, copy_op, kernel_name
from iotrace.trace.formats.api_calls import api_call_kind
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

# A HIP runtime or compiler-inserted call (hipMemcpy, __hipPushCallConfiguration): HIP API names start "hip" and a
# capital letter (HIP Runtime API reference, rocm.docs.amd.com); kernel names (demangled C++) never do.
_HIP_API = re.compile(r"(__)?hip[A-Z]\w*$")


class RocprofCsvParser(_sniff.RocprofCsv):
    """Reads the format :class:`iotrace.trace.formats._sniff.RocprofCsv` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        rows = read_rows(path, head.gzipped)
        if not rows:
            raise TraceFormatError(path, "holds no CSV rows", "the export is empty; profile again")
        if not head.gzipped and not _ends_a_line(path):
            # rocprof ends every row with a newline: a cut inside the last field would keep its field count
            raise TraceFormatError(path, "ends mid-row (no newline after its last row)",
                                   "the file was cut short; copy it again or profile again")
        header = [cell.strip() for cell in rows[0]]
        body = rows[1:]
        for line, row in enumerate(body, start=2):
            if len(row) != len(header):
                raise TraceFormatError(path, f"row {line} has {len(row)} fields, the header {len(header)}",
                                       "the file is truncated or damaged; copy it again or profile again")
        if not body:
            raise TraceFormatError(path, "has a rocprof header but no rows", "the run profiled nothing; profile again")
        records = [dict(zip(header, row, strict=True)) for row in body]
        if set(header) >= _sniff.ROCPROF_STATS:
            return _summary(path, records, self.name, self.tool)
        return _dispatches(path, header, records, self.name, self.tool)


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) in (b"\n", b"\r")


def _num(path: Path, line: int, column: str, text: str) -> float | None:
    try:
        return number(text)
    except ValueError as exc:
        raise TraceFormatError(path, f"row {line}, column {column!r}: {exc}", "the file is damaged") from exc


def _whole(path: Path, line: int, column: str, text: str) -> int | None:
    value = _num(path, line, column, text)
    if value is not None and value != int(value):
        raise TraceFormatError(path, f"row {line}, column {column!r}: {text!r} is not a whole number",
                               "the file is damaged")
    return None if value is None else int(value)


def _dispatches(path: Path, header: list[str], records: list[dict[str, str]], name: str, tool: str) -> TraceTables:
    maps = fields("rocprof_v1")
    columns: dict[str, str] = maps["dispatch_columns"]
    ignored = set(maps["ignored_columns"]["names"])
    units: dict[str, str] = maps["counter_units"]
    counters = [c for c in header if c not in columns and c not in ignored]
    kernels: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    for line, record in enumerate(records, start=2):
        row: dict[str, Any] = {}
        for raw, column in columns.items():
            if raw not in record:
                continue
            if column == "name":
                row["name"] = kernel_name(record[raw])
            elif column == "duration_ns":
                row[column] = _num(path, line, raw, record[raw])
            else:
                row[column] = _whole(path, line, raw, record[raw])
        if row.get("id") is None or not row.get("name"):
            raise TraceFormatError(path, f"row {line} has no Index or KernelName", "the file is damaged")
        grid, group = row.pop("_grid_items", None), row.pop("_workgroup_items", None)
        row.update(grid_x=blocks(grid, group), grid_y=1, grid_z=1, block_x=group, block_y=1, block_z=1)
        if row.get("duration_ns") is None and row.get("start_ns") is not None and row.get("end_ns") is not None:
            row["duration_ns"] = row["end_ns"] - row["start_ns"]
        kernels.append(row)
        for counter in counters:
            value = _num(path, line, counter, record[counter])
            if value is not None:
                metrics.append({"kernel_id": row["id"], "metric": counter, "unit": units.get(counter), "value": value})
    timed = any(k.get("start_ns") is not None for k in kernels)
    notes = ["rocprof v1 states grids as total work-items (grd) and workgroup sizes (wgr): grid_x is the workgroup "
             "count ceil(grd/wgr) and block_x = wgr, as one dimension",
             "device is rocprof's gpu-id (its agent number), stream its HSA queue-id; the CSV names no GPU"]
    if counters:
        notes.append(f"{len(counters)} counter columns kept as metrics per dispatch: {', '.join(counters[:8])}"
                     + (", ..." if len(counters) > 8 else ""))
    meta = {"format": name, "tool": tool, "version": None,
            "schema": "per-dispatch trace" if timed else "per-dispatch counters", "notes": notes}
    return build(path, kernels=kernels, metrics=metrics, meta=meta)


def _summary(path: Path, records: list[dict[str, str]], name: str, tool: str) -> TraceTables:
    kernels: list[dict[str, Any]] = []
    transfers: list[dict[str, Any]] = []
    api: list[dict[str, Any]] = []
    for line, record in enumerate(records, start=2):
        raw = record["Name"].strip()
        calls = _whole(path, line, "Calls", record["Calls"])
        total = _num(path, line, "TotalDurationNs", record["TotalDurationNs"])
        if not raw or calls is None or calls < 1 or total is None:
            raise TraceFormatError(path, f"row {line} has no name, calls or total duration", "the file is damaged")
        copy = copy_op(raw)
        if copy is not None:
            transfers.append({"kind": copy[0], "copy_kind": copy[1], "launches": calls, "duration_ns": total})
        elif _HIP_API.match(raw):
            api.append({"name": raw, "kind": api_call_kind(raw), "calls": calls, "total_ns": total})
        else:
            kernels.append({"id": len(kernels), "name": kernel_name(raw), "launches": calls, "duration_ns": total})
    notes = []
    if kernels:
        notes.append("summary rows: one per kernel name, launches = Calls, duration = TotalDurationNs")
    if transfers:
        notes.append("copy summary rows: one per copy kind, launches = Calls, duration = TotalDurationNs; no sizes")
    if api:
        calls = sum(row["calls"] for row in api)
        top = max(api, key=lambda row: row["total_ns"])
        notes.append(f"HIP API totals (not per call, so not in api_calls): {calls} calls of {len(api)} names; "
                     f"most time in {top['name']} ({top['calls']} calls, {top['total_ns'] / 1e6:,.3f} ms)")
    schema = "kernel stats" if kernels else "copy stats" if transfers else "HIP API stats"
    meta = {"format": name, "tool": tool, "version": None, "schema": schema, "api_summary": api,
            "notes": ["rocprof --stats CSV names no GPU and no tool version", *notes]}
    return build(path, kernels=kernels, transfers=transfers, meta=meta)
