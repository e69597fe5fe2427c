"""Legacy nvprof CSV (``nvprof --csv``): the GPU summary (``--print-gpu-summary``) and the GPU trace
(``--print-gpu-trace``).

nvprof writes ``==PID==`` lines first, then the header; values carry units either in a row under the header
(``s``, ``ms``, ``us``, ``KB``) or glued to the number (``542.36ms``, ``47.79%``). Summary rows aggregate a
kernel's launches (``Calls``): they become one kernel row each with ``launches`` = Calls and ``duration_ns`` = the
total. ``[CUDA memcpy HtoD]``-style rows are copies, not kernels: they go to ``transfers``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from iotrace.trace.errors import TraceFormatError
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._csv import find_header, read_rows
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

SUMMARY = _sniff.NVPROF_SUMMARY
TRACE = _sniff.NVPROF_TRACE
_TIME_SCALE = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "": 1.0}
_BYTE_SCALE = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "": 1}
_VALUE = re.compile(r"^([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(ns|us|ms|s|%|B|KB|MB|GB)?$")


class NvprofCsvParser(_sniff.NvprofCsv):
    """Reads the format :class:`iotrace.trace.formats._sniff.NvprofCsv` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        rows = read_rows(path, head.gzipped)
        at = find_header(rows, SUMMARY)
        summary = at is not None
        if at is None:
            at = find_header(rows, TRACE)
        if at is None:
            raise TraceFormatError(path, "has no nvprof CSV header (Time(%),Time,Calls,Avg,Name or Start,Duration,"
                                         "Name)", "export with nvprof --csv --print-gpu-summary")
        header = [c.strip() for c in rows[at]]
        body = [r for r in rows[at + 1:] if not r[0].startswith("==")]
        units: list[str] = [""] * len(header)
        if body and all(not c.strip() or c.strip() in (*_TIME_SCALE, *_BYTE_SCALE, "%", "GB/s", "MB/s")
                        for c in body[0]):
            units, body = [c.strip() for c in body[0]], body[1:]
        kernels: list[dict[str, Any]] = []
        transfers: list[dict[str, Any]] = []
        for line, row in enumerate(body, start=at + 2):
            if len(row) > len(header) and header[-1] == "Name":
                # Some nvprof CSVs leave the last column unquoted: a signature's commas split it. Rejoin it.
                row = [*row[:len(header) - 1], ",".join(row[len(header) - 1:])]
            if len(row) != len(header):
                raise TraceFormatError(path, f"row {line} has {len(row)} fields, the header {len(header)}",
                                       "the file is truncated or damaged")
            cells = dict(zip(header, row, strict=True))
            unit = dict(zip(header, units, strict=False))
            name = cells["Name"].strip()
            if not name:
                raise TraceFormatError(path, f"row {line} has no name", "the file is damaged")
            if summary:
                total = _time(path, cells["Time"], unit.get("Time", ""), line)
                calls = _count(path, cells["Calls"], line)
                record = {"duration_ns": total, "launches": calls}
            else:
                record = {"start_ns": round(_time(path, cells["Start"], unit.get("Start", ""), line)),
                          "duration_ns": _time(path, cells["Duration"], unit.get("Duration", ""), line)}
                record["end_ns"] = record["start_ns"] + round(record["duration_ns"])
                for raw, column in (("Grid X", "grid_x"), ("Grid Y", "grid_y"), ("Grid Z", "grid_z"),
                                    ("Block X", "block_x"), ("Block Y", "block_y"), ("Block Z", "block_z"),
                                    ("Registers Per Thread", "registers_per_thread"), ("Stream", "stream"),
                                    ("Context", "context"), ("Correlation_ID", "correlation_id")):
                    if cells.get(raw, "").strip():
                        record[column] = _count(path, cells[raw], line)
            if name.startswith("[CUDA "):
                record["kind"] = name.strip("[]").removeprefix("CUDA ")
                if cells.get("Size", "").strip():
                    record["bytes"] = round(_size(path, cells["Size"], unit.get("Size", ""), line))
                transfers.append(record)
            else:
                kernels.append({"id": len(kernels), "name": name, **record})
        if not kernels and not transfers:
            raise TraceFormatError(path, "has an nvprof header but no rows", "the export is empty; profile again")
        meta = {"format": self.name, "tool": self.tool, "version": None,
                "schema": "gpu summary" if summary else "gpu trace",
                "notes": ["nvprof CSV names no GPU and no tool version"]
                + (["summary rows: one per kernel name, launches = Calls, duration = total time"] if summary else [])}
        return build(path, kernels=pd.DataFrame(kernels), transfers=pd.DataFrame(transfers), meta=meta)


def _split(path: Path, text: str, line: int) -> tuple[float, str]:
    match = _VALUE.match(text.strip())
    if not match:
        raise TraceFormatError(path, f"row {line}: {text.strip()[:30]!r} is not a number with a unit",
                               "the file is damaged")
    return float(match.group(1)), match.group(2) or ""


def _time(path: Path, text: str, unit: str, line: int) -> float:
    value, suffix = _split(path, text, line)
    scale = _TIME_SCALE.get(suffix or unit)
    if scale is None:
        raise TraceFormatError(path, f"row {line}: {text!r} has no time unit", "the file is damaged")
    return value * scale


def _size(path: Path, text: str, unit: str, line: int) -> float:
    value, suffix = _split(path, text, line)
    return value * _BYTE_SCALE.get(suffix or unit, 1)


def _count(path: Path, text: str, line: int) -> int:
    value, suffix = _split(path, text, line)
    if suffix or value != int(value):
        raise TraceFormatError(path, f"row {line}: {text!r} is not a whole number", "the file is damaged")
    return int(value)

