"""PyTorch profiler / Kineto Chrome-trace JSON (plain or gzip): kernels, CUPTI range-profiler counters, ranges.

Both schemas are read through the field maps in ``iotrace/data/trace_fields.toml`` (section ``kineto``): the
2021 one (``cat: "Kernel"``, ``computeProperties``, ``external id``) and the current one (``cat: "kernel"``,
``deviceProperties``, ``External id``). Every kernel event is kept; nothing is filtered by profiler step.

- ``cuda_profiler_range`` events (CUPTI range profiler, ``experimental_config`` metrics) become one kernel row each,
  with their counters in ``metrics``; their ``dur`` spans the profiler's replay, not the kernel, so the kernel's
  duration is left missing and a note says so.
- ROCm (roctracer) kernel events carry no registers, grid or occupancy: those columns stay missing, with a note.
- A kernel a CUDA graph ran shares the correlation id of the ``cudaGraphLaunch`` call (``cuda_runtime``) that ran
  it: that id is its ``graph_launch_id``; Kineto records no graph or node id, so those stay missing.
- ``cuda_runtime`` and ``cuda_driver`` events (``Runtime`` in the 2021 schema) are the ``api_calls`` table, named
  and sorted into kinds by :mod:`iotrace.trace.formats.api_calls`; the same events join kernels to their launch.
- Copies and sets keep their event name as ``kind`` ("Memcpy HtoD (Pageable -> Device)"); their direction and memory
  kinds are read from it (:func:`iotrace.trace.formats.api_calls.kineto_transfer`).
- Ranges are ``user_annotation`` events (``record_function`` and profiler steps) on CPU threads, joined to kernels
  through the launching ``cuda_runtime`` call's correlation id; ``gpu_user_annotation`` ranges are kept unjoined, and
  so are the Python functions that are an engine's step (``python_function`` events named as trace_fields.toml's
  ``step_functions`` says: vLLM V1's ``execute_model``).
- Every ``cpu_op`` is a row of ``host_ops`` (name, time, thread); those with cost models are ``ops`` too, with shapes.

The file is decoded by msgspec into typed event structs that keep the seven fields every event is sorted by
(``ph``, ``cat``, ``name``, ``ts``, ``dur``, ``pid``, ``tid``) and leave ``args`` as raw JSON bytes, decoded
afterwards for the few events whose arguments are read (kernels, runtime calls, transfers): about 4x faster than
the standard library's ``json.loads`` on the corpus traces, and no dict per CPU op or flow event. Columns are then
built from lists, checked a column at a time. A file msgspec refuses (not UTF-8, a top-level list, a damaged
document) is read again with ``json.loads``, which names the fault as iotrace always has; a bad value (a string
timestamp, an infinite duration) is found again event by event in file order, so the message names the first one.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from typing import Any

import msgspec
import numpy as np

from iotrace.trace.devices import vendor_of, with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._common import int_or_none, launch_columns, range_paths, us_to_ns
from iotrace.trace.formats.api_calls import classify_calls, kineto_transfer
from iotrace.trace.parser import Head, read_bytes
from iotrace.trace.tables import Column, TraceTables, build

PROFILER_RANGE = "cuda_profiler_range"
#: Microseconds since the epoch reach ~1.8e15 in 2027; beyond 1e17 a timestamp is damage, not time.
_TIME_LIMIT_US = 1e17
_OLD_CATEGORIES = ("Kernel", "Runtime", "Operator")
#: Kinds of the events kept, by category (_HOST_OP: every CPU op, shaped or not; _STEP_FUNCTION: a Python function
#: that is an engine's step, see trace_fields.toml's step_functions).
_KERNEL, _RANGE_PROFILER, _RUNTIME, _ANNOTATION, _TRANSFER, _OP, _HOST_OP, _STEP_FUNCTION = range(8)
_PYTHON_FUNCTION = "python_function"
#: Top-level keys read besides ``traceEvents`` (the device lists come from the field map).
_DOCUMENT_KEYS = ("schemaVersion", "distributedInfo", "cupti_version", "cuda_runtime_version", "cuda_driver_version")


class _Event(msgspec.Struct, gc=False):
    """One trace event: the fields every event is sorted by, and its arguments undecoded (``msgspec.Raw``; a dict
    or whatever the file holds when the event came from ``json.loads``). ``dur`` absent is UNSET (read as 0).

    ``gc=False``: decoded JSON holds no reference cycles, and tracking 100,000s of structs makes the cyclic
    collector walk all of them again and again while the list is built (msgspec docs, "Structs: Disabling
    Garbage Collection").
    """

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = msgspec.UNSET
    pid: Any = None
    tid: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


@cache
def _document_type() -> type:
    """A struct of ``traceEvents`` and the top-level keys iotrace reads (any other key is skipped unparsed)."""
    keys = (*_DOCUMENT_KEYS, *fields("kineto")["device_properties"])
    return msgspec.defstruct("_Document", [("traceEvents", list[_Event]),
                                           *((key, Any, msgspec.UNSET) for key in keys)])


def _reject_constant(name: str) -> float:
    raise ValueError(f"the JSON holds {name}, which no profiler writes for a measured value")


class KinetoParser(_sniff.Kineto):
    """Reads the format :class:`iotrace.trace.formats._sniff.Kineto` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        data = read_bytes(path, head.gzipped)
        try:
            document = msgspec.json.decode(data, type=_document_type())
        except msgspec.DecodeError:
            doc, events = _decoded_by_json(path, data)
        else:
            del data  # the raw arguments still point into it; they are decoded, and freed, in _read
            doc = {key: getattr(document, key) for key in document.__struct_fields__
                   if key != "traceEvents" and getattr(document, key) is not msgspec.UNSET}
            events = document.traceEvents
            del document
        return _read(path, events, doc)


def _decoded_by_json(path: Any, data: bytes) -> tuple[dict[str, Any], list[_Event]]:
    """The document read with ``json.loads``: its top-level keys and its events, or the fault as json sees it."""
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"is not valid JSON ({' '.join(str(exc).split())[:120]})",
                               "the file is truncated or damaged") from exc
    except ValueError as exc:
        raise TraceFormatError(path, str(exc), "the file is damaged") from exc
    listed = doc if isinstance(doc, list) else doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(listed, list):
        raise TraceFormatError(path, "is JSON but not a trace (no traceEvents list)",
                               "export with torch.profiler's export_chrome_trace or tensorboard_trace_handler")
    events = []
    for index, event in enumerate(listed):
        if not isinstance(event, dict):
            raise TraceFormatError(path, f"traceEvents[{index}] is {type(event).__name__}, not an event object",
                                   "the file is damaged")
        events.append(_Event(ph=event.get("ph"), cat=event.get("cat"), name=event.get("name"), ts=event.get("ts"),
                             dur=event.get("dur", msgspec.UNSET), pid=event.get("pid"), tid=event.get("tid"),
                             args=event.get("args")))
    return (doc if isinstance(doc, dict) else {}), events


def _arguments(events: list[_Event]) -> list[Any]:
    """Each event's decoded ``args`` (a dict, or {} where the event has none or something else)."""
    raw = [e.args for e in events]
    if raw and all(type(a) is msgspec.Raw for a in raw):
        decoded = msgspec.json.decode(b"[" + b",".join(raw) + b"]")  # one call for all: no per-event overhead
    else:
        decoded = [msgspec.json.decode(a) if type(a) is msgspec.Raw else a for a in raw]
    return [a if type(a) is dict else {} for a in decoded]


def _schema(events: list[_Event], doc: dict[str, Any]) -> str:
    if "computeProperties" in doc:
        return "2021"
    return "2021" if any(event.cat in _OLD_CATEGORIES for event in events[:5000]) else "1"


def _kinds(schema: str) -> dict[str, int]:
    spec = fields("kineto")
    kinds = {PROFILER_RANGE: _RANGE_PROFILER}
    for group, kind in (("op_categories", _OP), ("transfer_categories", _TRANSFER),
                        ("range_categories", _ANNOTATION), ("runtime_categories", _RUNTIME),
                        ("kernel_categories", _KERNEL)):
        kinds.update(dict.fromkeys(spec[group][schema], kind))
    return kinds


def _read(path: Any, events: list[_Event], doc: dict[str, Any]) -> TraceTables:
    spec = fields("kineto")
    schema = _schema(events, doc)
    kinds = _kinds(schema)
    shaped = frozenset(spec["shaped_ops"]["names"])
    step_function = re.compile(spec["step_functions"]["pattern"])
    picked: list[list[int]] = [[] for _ in range(8)]
    for index, event in enumerate(events):
        if event.ph == "X" and event.cat is not None:
            kind = kinds.get(event.cat)
            if kind == _OP:
                picked[_HOST_OP].append(index)
                if event.name in shaped:
                    picked[_OP].append(index)
            elif kind is not None:
                picked[kind].append(index)
            elif event.cat == _PYTHON_FUNCTION and type(event.name) is str and event.name.endswith("execute_model") \
                    and step_function.search(event.name):
                picked[_STEP_FUNCTION].append(index)
    kernel_index = sorted(picked[_KERNEL] + picked[_RANGE_PROFILER])
    kept = {kind: [events[i] for i in index] for kind, index in
            ((_KERNEL, kernel_index), (_RUNTIME, picked[_RUNTIME]),
             (_ANNOTATION, sorted(picked[_ANNOTATION] + picked[_STEP_FUNCTION])), (_TRANSFER, picked[_TRANSFER]))}
    times = {kind: _times(group) for kind, group in kept.items()}
    named = all(_all_strings(kept[kind]) for kind in (_KERNEL, _ANNOTATION, _TRANSFER))
    if not named or any(t is None for t in times.values()):
        _first_fault(path, events, kernel_index, picked)
    notes = []
    threads: dict[tuple[str, str], int] = {}

    kernel_events = kept[_KERNEL]
    profiled = np.fromiter((e.cat == PROFILER_RANGE for e in kernel_events), dtype=bool, count=len(kernel_events))
    kernel_args = _arguments(kernel_events)
    start, duration = times[_KERNEL]
    duration[profiled] = np.nan  # the range profiler's span is its replay, not the kernel
    kernels: dict[str, Any] = {"id": np.arange(len(kernel_events), dtype=np.int64),
                               "name": [e.name for e in kernel_events], "duration_ns": duration}
    plain = [{} if p else a for p, a in zip(profiled.tolist(), kernel_args, strict=True)]
    for raw, column in spec["kernel_args"].items():
        # Kineto writes the string "inf" for blocks/warps per SM when it has no SM count.
        kernels[column] = [None if isinstance(v, str) else v for v in (a.get(raw) for a in plain)]
    for key, prefix in (("grid", "grid_"), ("block", "block_")):
        dims = [a.get(key) for a in plain]
        dims = [d if isinstance(d, list) and len(d) == 3 else (None, None, None) for d in dims]
        if any(d[0] is not None or d[1] is not None or d[2] is not None for d in dims):
            for axis_index, axis in enumerate("xyz"):
                kernels[f"{prefix}{axis}"] = [d[axis_index] for d in dims]
    metrics = [(kernel_id, key, value) for kernel_id, (p, a) in enumerate(zip(profiled.tolist(), kernel_args,
                                                                                strict=True)) if p
               for key, value in a.items() if isinstance(value, (int, float)) and not isinstance(value, bool)]
    kernels["start_ns"], kernels["end_ns"] = start, _end(start, duration)
    if profiled.any():
        notes.append(f"{int(profiled.sum())} cuda_profiler_range events: CUPTI range-profiler counters, one kernel "
                     "each; their span is the profiler's replay, so kernel durations are missing")

    call_events = kept[_RUNTIME]
    call_corr = np.array([_number(a.get("correlation")) for a in _arguments(call_events)], dtype=np.float64)
    call_thread = np.array([_thread(threads, e) for e in call_events], dtype=np.int64)
    call_time, call_duration = times[_RUNTIME]
    call_end = _end(call_time, call_duration)
    call_names, call_kinds = classify_calls([e.name for e in call_events])
    kernel_corr = np.array([_number(v) for v in kernels["correlation_id"]], dtype=np.float64)
    if len(call_events):
        # A graph's kernels carry the correlation id of the cudaGraphLaunch that ran them (Kineto writes no graph
        # or node id: CuptiActivity.cpp's kernel metadata), so the launch call says which kernels a graph ran.
        launched = launch_columns(kernel_corr, start, call_corr, call_time, call_end.values, call_kinds == "graph")
        kernels.update({name: Column(*values) for name, values in launched.items()})
    api_calls = _api_calls(call_names, call_kinds, call_time, call_end, call_duration, call_corr, call_thread,
                           threads)

    range_events = kept[_ANNOTATION]
    range_start, range_duration = times[_ANNOTATION]
    range_end = _end(range_start, range_duration)
    ranges: dict[str, Any] = {
        "id": np.arange(len(range_events), dtype=np.int64), "name": [e.name for e in range_events],
        "domain": [e.cat for e in range_events], "kind": ["range"] * len(range_events),
        "duration_ns": range_duration, "process": [int_or_none(e.pid) for e in range_events],
        "thread": [int_or_none(e.tid) for e in range_events], "start_ns": range_start, "end_ns": range_end}
    if len(range_events):
        arrays = {"thread": np.array([_thread(threads, e) for e in range_events], dtype=np.int64),
                  "start_ns": range_start, "end_ns": range_end.values,
                  # A step function's range names the step; it does not re-home the kernels under it.
                  "nests": np.array([e.cat == "user_annotation" for e in range_events], dtype=bool),
                  "name": np.array(ranges["name"], dtype=object), "id": ranges["id"]}
        nested, found = range_paths(arrays, kernel_corr, call_corr, call_thread, call_time)
        ranges["depth"] = nested["depth"]
        ranges["parent_id"] = Column(*nested["parent_id"])
        hit = found >= 0  # empty without kernels
        kernels["nvtx_range_id"] = Column(np.where(hit, ranges["id"][np.clip(found, 0, None)], 0), ~hit)
        kernels["nvtx_path"] = np.where(hit, nested["path"][np.clip(found, 0, None)], None).tolist()

    ops, op_of_kernel = _ops([events[i] for i in picked[_OP]], threads, kernel_corr, call_corr, call_thread,
                             call_time)
    kernels["op_id"] = Column(np.maximum(op_of_kernel, 0), op_of_kernel < 0)
    host_ops = _host_ops([events[i] for i in picked[_HOST_OP]])

    transfer_events = kept[_TRANSFER]
    transfer_args = _arguments(transfer_events)
    transfer_start, transfer_duration = times[_TRANSFER]
    transfer_end = _end(transfer_start, transfer_duration)
    transfer_names = [e.name for e in transfer_events]
    # Names are strings (checked above); a trace holds a handful of distinct ones, each parsed once.
    parsed = {name: kineto_transfer(name) for name in set(transfer_names)}
    copies = list(zip(*map(parsed.__getitem__, transfer_names), strict=True)) or [[], [], []]
    transfers = {"kind": transfer_names, "device": [a.get("device") for a in transfer_args],
                 "stream": [a.get("stream") for a in transfer_args], "duration_ns": transfer_duration,
                 "bytes": [a.get("bytes") for a in transfer_args], "start_ns": transfer_start,
                 "end_ns": transfer_end, "copy_kind": copies[0], "src_kind": copies[1], "dst_kind": copies[2],
                 "correlation_id": np.array([_number(a.get("correlation")) for a in transfer_args], dtype=np.float64)}
    del events, kept, kernel_events, call_events, range_events, transfer_events

    devices = _devices(doc, spec)
    if kernels["id"].size and devices and all(d.get("vendor") == "amd" for d in devices):
        notes.append("ROCm trace: kernels carry no registers, grid or occupancy (roctracer does not record them)")
    meta = {"format": "kineto-json", "tool": "PyTorch profiler (Kineto)",
            "version": _version(doc), "schema": f"{schema} (schemaVersion {doc.get('schemaVersion', 'absent')})",
            "notes": notes, **_distributed(doc)}
    return build(path, kernels=kernels, ranges=ranges, ops=ops,
                 metrics={"kernel_id": [m[0] for m in metrics], "metric": [m[1] for m in metrics],
                          "value": [m[2] for m in metrics]},
                 transfers=transfers, devices=with_cards(devices, notes=notes), api_calls=api_calls,
                 host_ops=host_ops, meta=meta)


def _api_calls(names: np.ndarray, kinds: np.ndarray, start: np.ndarray, end: Column, duration: np.ndarray,
               corr: np.ndarray, thread: np.ndarray, threads: dict[tuple[str, str], int]) -> dict[str, Any]:
    """The ``api_calls`` table of the runtime/driver events, in start order (stable: file order within a tick).

    ``thread`` is each call's index into ``threads`` (:func:`_thread`): its pid and tid are read once per thread,
    as the ranges table reads them (:func:`int_or_none`), not once per call."""
    order = np.argsort(start, kind="stable")
    ids = [(int_or_none(pid), int_or_none(tid)) for pid, tid in threads] or [(None, None)]
    at = thread[order]
    columns = {}
    for column, side in (("process", 0), ("thread", 1)):
        missing = np.array([pair[side] is None for pair in ids], dtype=bool)
        values = np.array([pair[side] or 0 for pair in ids], dtype=np.int64)
        columns[column] = Column(values[at], missing[at])
    return {"id": np.arange(len(order), dtype=np.int64), "name": names[order], "kind": kinds[order],
            "start_ns": start[order], "end_ns": Column(end.values[order], end.missing[order]),
            "duration_ns": duration[order], "correlation_id": corr[order], **columns}


def _ops(events: list[_Event], threads: dict[tuple[str, str], int], kernel_corr: np.ndarray, call_corr: np.ndarray,
         call_thread: np.ndarray, call_time: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """The shaped CPU ops (``ops`` table columns) and, per kernel, the id of the innermost op open on the launching
    thread when its launch call began (-1: none), joined as NVTX ranges are.

    CPU ops were never read before; one with a value no profiler writes (a string timestamp) is left out rather
    than failing a file that loads without it.
    """
    good = [e for e in events if _readable(e)]
    args = _arguments(good)
    start, duration = _times(good) if good else (np.zeros(0, dtype=np.int64), np.zeros(0))
    end = _end(start, duration).values  # durations are checked: never missing
    ops: dict[str, Any] = {
        "id": np.arange(len(good), dtype=np.int64), "name": [e.name for e in good], "start_ns": start,
        "end_ns": end, "duration_ns": duration, "process": [int_or_none(e.pid) for e in good],
        "thread": [int_or_none(e.tid) for e in good],
        "input_dims": [a.get("Input Dims") if isinstance(a.get("Input Dims"), list) else None for a in args],
        "input_types": [a.get("Input type") if isinstance(a.get("Input type"), list) else None for a in args]}
    arrays = {"thread": np.array([_thread(threads, e) for e in good], dtype=np.int64), "start_ns": start,
              "end_ns": end, "nests": np.ones(len(good), dtype=bool), "name": np.array(ops["name"], dtype=object),
              "id": ops["id"]}
    _, found = range_paths(arrays, kernel_corr, call_corr, call_thread, call_time)
    return ops, found


def _host_ops(events: list[_Event]) -> dict[str, Any]:
    """Every CPU op's name, time and thread (``host_ops``), arguments unread; an op the reader's checks refuse is
    left out, as in :func:`_ops`."""
    good = [e for e in events if type(e.name) is str]
    times = _times(good)
    if times is None:  # a value no profiler writes somewhere: keep the ops that pass one by one
        good = [e for e in good if _readable(e)]
        times = _times(good) if good else (np.zeros(0, dtype=np.int64), np.zeros(0))
    start, duration = times
    return {"id": np.arange(len(good), dtype=np.int64), "name": [e.name for e in good], "start_ns": start,
            "end_ns": _end(start, duration).values, "duration_ns": duration,
            "process": [int_or_none(e.pid) for e in good], "thread": [int_or_none(e.tid) for e in good]}


def _readable(event: _Event) -> bool:
    """Whether a CPU op has the name and times the reader's own checks accept (:func:`_time`)."""
    try:
        _time("", event, 0)
    except (TraceFormatError, OverflowError):  # OverflowError: an integer too large for a float
        return False
    return type(event.name) is str


def _all_strings(events: list[_Event]) -> bool:
    return all(type(e.name) is str for e in events)


def _times(events: list[_Event]) -> tuple[np.ndarray, np.ndarray] | None:
    """Start (int64 ns) and duration (float64 ns) of each event, or None when a value would be refused (then
    :func:`_first_fault` names it)."""
    ts = [e.ts for e in events]
    dur = [0 if e.dur is msgspec.UNSET else e.dur for e in events]
    if not {type(v) for v in ts} | {type(v) for v in dur} <= {int, float}:
        return None
    try:
        ts_array = np.array(ts, dtype=np.float64)
        dur_array = np.array(dur, dtype=np.float64)
    except OverflowError:
        return None
    both = np.concatenate([ts_array, dur_array])
    if not np.isfinite(both).all() or (np.abs(both) > _TIME_LIMIT_US).any() or (dur_array < 0).any():
        return None
    return us_to_ns(ts_array), dur_array * 1000.0


def _end(start: np.ndarray, duration: np.ndarray) -> Column:
    """End times (int64 ns), missing where the duration is."""
    missing = np.isnan(duration)
    return Column(start + np.where(missing, 0.0, np.round(duration)).astype(np.int64), missing)


def _number(value: Any) -> float:
    """A correlation id as float64 (NaN when it is not a number)."""
    if type(value) is int or type(value) is float:
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan


def _first_fault(path: Any, events: list[_Event], kernel_index: list[int], picked: list[list[int]]) -> None:
    """Raise the error for the first refused value in file order, as the event-by-event reader always named it."""
    checks = {i: True for i in kernel_index} | {i: False for i in picked[_RUNTIME]}
    checks |= {i: True for i in picked[_ANNOTATION] + picked[_TRANSFER]}
    for index in sorted(checks):
        _time(path, events[index], index)
        if checks[index]:
            _name(path, events[index], index)
    raise TraceFormatError(path, "holds an event iotrace cannot read", "the file is damaged")


def _time(path: Any, event: _Event, index: int) -> tuple[float, float]:
    ts, dur = event.ts, 0 if event.dur is msgspec.UNSET else event.dur
    for label, value in (("ts", ts), ("dur", dur)):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TraceFormatError(path, f"traceEvents[{index}] has {label}={value!r}, not a number",
                                   "the file is damaged")
        if not math.isfinite(value) or abs(value) > _TIME_LIMIT_US:
            raise TraceFormatError(path, f"traceEvents[{index}] has {label}={value!r}: infinite, or beyond any real "
                                         "timestamp", "the file is damaged")
    if dur < 0:
        raise TraceFormatError(path, f"traceEvents[{index}] has a negative duration ({dur})", "the file is damaged")
    return ts, dur * 1000.0


def _name(path: Any, event: _Event, index: int) -> str:
    if not isinstance(event.name, str):
        raise TraceFormatError(path, f"traceEvents[{index}] has no name", "the file is damaged")
    return event.name


def _thread(threads: dict[tuple[str, str], int], event: _Event) -> int:
    key = (str(event.pid), str(event.tid))
    return threads.setdefault(key, len(threads))


def _distributed(doc: dict[str, Any]) -> dict[str, Any]:
    """``rank``, ``world_size`` and ``backend`` from the trace's ``distributedInfo`` (None where it has none)."""
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank, world = int_or_none(info.get("rank")), int_or_none(info.get("world_size"))
    backend = info.get("backend")
    return {"rank": rank if rank is not None and rank >= 0 else None,
            "world_size": world if world is not None and world > 0 else None,
            "backend": backend if isinstance(backend, str) else None}


def _version(doc: dict[str, Any]) -> str | None:
    parts = [f"{key}={doc[key]}" for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version")
             if key in doc]
    return ", ".join(parts) or None


def _devices(doc: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, mapping in spec["device_properties"].items():
        listed = doc.get(key)
        if not isinstance(listed, list):
            continue
        major_key, minor_key = spec["device_cc"][key]
        for entry in listed:
            if not isinstance(entry, dict):
                continue
            row = {column: entry.get(raw) for raw, column in mapping.items() if entry.get(raw) is not None}
            row["vendor"] = vendor_of(row.get("name"), row.get("warp_size"))
            major, minor = entry.get(major_key), entry.get(minor_key)
            if row["vendor"] != "amd" and isinstance(major, int) and isinstance(minor, int):
                row["cc"] = f"{major}.{minor}"
            rows.append(row)
        break
    return rows

