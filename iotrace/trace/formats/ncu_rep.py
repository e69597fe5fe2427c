"""Nsight Compute reports (``.ncu-rep``, legacy ``.nsight-cuprof-report``) through NVIDIA's ``ncu_report`` module.

The container, which NVIDIA does not document (the layout was read off the files themselves and holds for
Nsight Compute 2019.x to 2024.3 reports): ``NVR\\0``, a uint32-length-prefixed FileHeader protobuf, then blocks of
[uint32 length + BlockHeader protobuf (field 5 = PayloadSize) + payload]. ``ncu_report`` loads anything, even an
HTML page, as a report with zero ranges, and is native code; so the container is walked
first (a cut-short file is refused before it reaches native code) and zero ranges is an error.

Every numeric metric of every launch lands in ``metrics``; launch and occupancy metrics named in
``iotrace/data/trace_fields.toml`` (section ``ncu``) also fill the kernel columns; ``device__attribute_*`` fill
``devices``. String-valued metrics (cache config, names) are not in ``metrics``, whose values are numbers.
"""

from __future__ import annotations

import faulthandler
import math
import os
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError, TraceToolError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

_VERSION = re.compile(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?) \(build (\d+)\)")


class NcuRepParser(_sniff.NcuRep):
    """Reads the format :class:`iotrace.trace.formats._sniff.NcuRep` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        data = path.read_bytes()
        header_version, declared = check_container(path, data)
        try:
            import ncu_report
        except ImportError as exc:
            raise TraceToolError(path, "reading Nsight Compute reports needs NVIDIA's ncu_report module",
                                 "pip install 'iotrace[nsight]' (PyPI ncu-report), or export with "
                                 "ncu --import FILE --csv --page raw > FILE.csv") from exc
        _probe_in_child(path, ncu_report)
        try:
            with _native_stderr_quiet():
                context = ncu_report.load_report(str(path))
        except Exception as exc:  # a SWIG-wrapped C++ error: its type is not part of any stable API
            raise TraceFormatError(path, f"ncu_report cannot load it ({' '.join(str(exc).split())[:160]})",
                                   "the report is damaged; export it again") from exc
        if context.num_ranges() == 0:
            raise TraceFormatError(path, "loads as an empty Nsight Compute report (zero ranges)",
                                   "the file is not a report or holds no profiled kernels; profile again")
        loaded = sum(context.range_by_idx(r).num_actions() for r in range(context.num_ranges()))
        if loaded != declared:
            # ncu_report skips a result it cannot parse (and logs to stderr): that would be a half-loaded report.
            raise TraceFormatError(path, f"declares {declared} profiled kernels but only {loaded} could be read",
                                   "the report is damaged; export it again")
        version = _VERSION.search(data)
        meta = {"format": self.name, "tool": self.tool,
                "version": f"{version.group(1).decode()} (build {version.group(2).decode()})" if version else None,
                "schema": f"FileHeader version {header_version}", "notes": []}
        if version is None:
            meta["notes"].append("the report does not state its Nsight Compute version (2019-era file)")
        return _read(path, context, ncu_report, meta)


def _probe_in_child(path: Path, ncu_report: Any) -> None:
    """Read the whole report once in a forked child: a damaged report can abort ncu_report's native code, which
    would end this process with no message. The fuzz test found such files; a fork costs milliseconds."""
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: read every metric, then leave without running any Python cleanup
        faulthandler.disable()  # a crash here is the expected outcome of a damaged file, not a report to print
        code = 0
        try:
            with _native_stderr_quiet():
                context = ncu_report.load_report(str(path))
                for r in range(context.num_ranges()):
                    rng = context.range_by_idx(r)
                    for a in range(rng.num_actions()):
                        action = rng.action_by_idx(a)
                        for name in action.metric_names():
                            metric = action.metric_by_name(name)
                            if metric is not None and metric.kind() != ncu_report.IMetric.ValueKind_STRING:
                                metric.as_double()
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise TraceFormatError(path, f"makes NVIDIA's ncu_report crash (signal {os.WTERMSIG(status)}) while reading it",
                               "the report is damaged; export it again")


@contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """Silence ncu_report's native log lines (absl) so the CLI's one-line error stays one line."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("varint runs past the data")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(message: bytes) -> dict[int, int]:
    """Top-level varint fields of a protobuf message; other wire types are skipped."""
    out: dict[int, int] = {}
    pos = 0
    while pos < len(message):
        key, pos = _varint(message, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out[number], pos = _varint(message, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = _varint(message, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
    if pos != len(message):
        raise ValueError("message overruns its length")
    return out


def check_container(path: Path, data: bytes) -> tuple[int, int]:
    """Walk the NVR container's lengths; return (FileHeader version, results the blocks declare), or raise if the
    file is cut short or damaged."""
    def fail(problem: str) -> TraceFormatError:
        return TraceFormatError(path, f"is a damaged Nsight Compute report ({problem})",
                                "the file was cut short or corrupted; copy or export it again")

    def u32(pos: int) -> int:
        if pos + 4 > len(data):
            raise fail(f"ends inside a length field at byte {pos} of {len(data)}")
        return struct.unpack_from("<I", data, pos)[0]

    header_len = u32(4)
    if 8 + header_len > len(data):
        raise fail("its header runs past the end of the file")
    try:
        version = _fields(data[8:8 + header_len]).get(1, 0)
    except ValueError as exc:
        raise fail(f"header: {exc}") from exc
    pos, blocks, results = 8 + header_len, 0, 0
    while pos < len(data):
        block_len = u32(pos)
        start = pos + 4
        if start + block_len > len(data):
            raise fail(f"block {blocks} header runs past the end of the file")
        try:
            block = _fields(data[start:start + block_len])
        except ValueError as exc:
            raise fail(f"block {blocks}: {exc}") from exc
        results += block.get(2, 0)
        pos = start + block_len + block.get(5, 0)
        if pos > len(data):
            raise fail(f"block {blocks} payload runs {pos - len(data)} bytes past the end of the file")
        blocks += 1
    if blocks == 0:
        raise TraceFormatError(path, "is an Nsight Compute report header with no result blocks",
                               "the file holds no profiled kernels; profile again")
    return version, results


def _read(path: Path, context: Any, ncu_report: Any, meta: dict[str, Any]) -> TraceTables:
    spec = fields("ncu")
    kernel_map: dict[str, str] = spec["kernel_metrics"]
    device_map: dict[str, str] = spec["device_metrics"]
    string_kind = ncu_report.IMetric.ValueKind_STRING
    kernels: list[dict[str, Any]] = []
    metric_ids: list[int] = []
    metric_names: list[str] = []
    metric_units: list[str] = []
    metric_values: list[float] = []
    devices: dict[Any, dict[str, Any]] = {}
    not_finite: set[str] = set()
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            kid = len(kernels)
            row: dict[str, Any] = {"id": kid, "name": action.name(ncu_report.IAction.NameBase_DEMANGLED),
                                   "mangled_name": action.name(ncu_report.IAction.NameBase_MANGLED) or None}
            device: dict[str, Any] = {}
            cc: dict[str, float] = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric is None:
                    continue
                if metric.kind() == string_kind:
                    if name in device_map:
                        device[device_map[name]] = metric.as_string()
                    continue
                value = metric.as_double()
                if not math.isfinite(value):
                    # ncu 2019 stores an unlimited occupancy limit (no shared memory used) as a non-finite value.
                    not_finite.add(name)
                    continue
                metric_ids.append(kid)
                metric_names.append(name)
                metric_units.append(metric.unit())
                metric_values.append(value)
                if name in kernel_map:
                    row[kernel_map[name]] = value
                elif name in device_map:
                    device[device_map[name]] = value
                elif name.startswith("device__attribute_compute_capability_"):
                    cc[name.rsplit("_", 1)[1]] = value
            if "major" in cc and "minor" in cc:
                device["cc"] = f"{int(cc['major'])}.{int(cc['minor'])}"
            device["device"] = row.get("device", 0)
            devices.setdefault(device["device"], device)
            kernels.append(row)
    if not_finite:
        meta["notes"].append("non-finite values left out of metrics (ncu's 'unlimited'): "
                             + ", ".join(sorted(not_finite)))
    kernel_frame = pd.DataFrame(kernels)
    if {"static_smem_bytes", "dynamic_smem_bytes"} <= set(kernel_frame):
        kernel_frame["smem_bytes"] = kernel_frame["static_smem_bytes"] + kernel_frame["dynamic_smem_bytes"]
    metrics = pd.DataFrame({"kernel_id": metric_ids, "metric": metric_names, "unit": metric_units,
                            "value": metric_values})
    rows = [{k: (int(v) if isinstance(v, float) and k not in ("name", "cc") and v == int(v) else v)
             for k, v in d.items()} for d in devices.values()]
    return build(path, kernels=kernel_frame, metrics=metrics, devices=with_cards(rows, notes=meta["notes"]), meta=meta)

