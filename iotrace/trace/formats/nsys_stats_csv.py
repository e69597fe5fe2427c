"""``nsys stats --format csv`` reports: ``nvtx_pushpop_trace`` (ranges) and ``cuda_gpu_kern_sum`` (kernels).

``nvtx_pushpop_trace`` columns: Start (ns), End (ns), Duration (ns), DurChild (ns), DurNonChild (ns), Name, PID,
TID, Lvl, NumChild, RangeId, ParentId, RangeStack, NameTree. ``cuda_gpu_kern_sum`` (``gpukernsum`` before 2022.4):
Time (%), Total Time (ns), Instances, Avg (ns), Med (ns), Min (ns), Max (ns), StdDev (ns), Name; one row per
kernel name, so ``launches`` = Instances and ``duration_ns`` = Total Time. nsys may print "Processing [...]"
lines before the header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from iotrace.trace.errors import TraceFormatError
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._csv import find_header, number, read_rows
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

PUSHPOP = _sniff.NSYS_PUSHPOP
KERN_SUM = _sniff.NSYS_KERN_SUM


class NsysStatsCsvParser(_sniff.NsysStatsCsv):
    """Reads the format :class:`iotrace.trace.formats._sniff.NsysStatsCsv` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        rows = read_rows(path, head.gzipped)
        at = find_header(rows, PUSHPOP)
        if at is not None:
            return _pushpop(path, rows[at], rows[at + 1:])
        at = find_header(rows, KERN_SUM)
        if at is not None:
            return _kern_sum(path, rows[at], rows[at + 1:])
        raise TraceFormatError(path, "has no nsys stats header (nvtx_pushpop_trace or cuda_gpu_kern_sum columns)",
                               "export with nsys stats --report nvtx_pushpop_trace --format csv")


def _records(path: Path, header: list[str], body: list[list[str]], needed: set[str]) -> list[dict[str, str]]:
    header = [c.strip() for c in header]
    missing = needed - set(header)
    if missing:
        raise TraceFormatError(path, f"lacks columns {sorted(missing)}", "export the whole report")
    out = []
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise TraceFormatError(path, f"row {line} has {len(row)} fields, the header {len(header)}",
                                   "the file is truncated or damaged")
        out.append(dict(zip(header, row, strict=True)))
    if not out:
        raise TraceFormatError(path, "has a header but no rows", "the report is empty")
    return out


def _num(path: Path, record: dict[str, str], column: str) -> float | None:
    try:
        return number(record[column])
    except ValueError as exc:
        raise TraceFormatError(path, f"column {column!r}: {exc}", "the file is damaged") from exc


def _pushpop(path: Path, header: list[str], body: list[list[str]]) -> TraceTables:
    records = _records(path, header, body, PUSHPOP)
    ranges: list[dict[str, Any]] = []
    for record in records:
        range_id, parent = _num(path, record, "RangeId"), _num(path, record, "ParentId")
        start, end = _num(path, record, "Start (ns)"), _num(path, record, "End (ns)")
        if range_id is None or start is None or end is None or end < start:
            raise TraceFormatError(path, f"range {record.get('RangeId')!r} has no id, start or end, or ends "
                                         "before it starts", "the file is damaged")
        ranges.append({"id": range_id, "name": record["Name"], "domain": "default", "kind": "push/pop",
                       "start_ns": start, "end_ns": end, "duration_ns": end - start,
                       "process": _num(path, record, "PID") if "PID" in record else None,
                       "thread": _num(path, record, "TID"), "depth": _num(path, record, "Lvl"), "parent_id": parent})
    ids = {r["id"] for r in ranges}
    if any(r["parent_id"] is not None and r["parent_id"] not in ids for r in ranges):
        raise TraceFormatError(path, "a range names a parent that is not in the file", "the file is damaged")
    meta = {"format": "nsys-stats-csv", "tool": "Nsight Systems (nsys stats)", "version": None,
            "schema": "nvtx_pushpop_trace", "notes": ["an nsys stats report: ranges only, no kernels or GPUs"]}
    return build(path, ranges=pd.DataFrame(ranges), meta=meta)


def _kern_sum(path: Path, header: list[str], body: list[list[str]]) -> TraceTables:
    records = _records(path, header, body, KERN_SUM)
    kernels = []
    for record in records:
        total, instances = _num(path, record, "Total Time (ns)"), _num(path, record, "Instances")
        if total is None or instances is None or instances < 1:
            raise TraceFormatError(path, f"kernel {record['Name'][:40]!r} has no total time or instances",
                                   "the file is damaged")
        kernels.append({"id": len(kernels), "name": record["Name"], "duration_ns": total, "launches": instances})
    meta = {"format": "nsys-stats-csv", "tool": "Nsight Systems (nsys stats)", "version": None,
            "schema": "cuda_gpu_kern_sum", "notes": ["summary rows: one per kernel name, launches = Instances"]}
    return build(path, kernels=pd.DataFrame(kernels), meta=meta)

