"""PyTorch profiler / Kineto Chrome-trace JSON (plain or gzip): kernels, CUPTI range-profiler counters, ranges.

Both schemas are read through the field maps in ``iotrace/data/trace_fields.toml`` (section ``kineto``): the
2021 one (``cat: "Kernel"``, ``computeProperties``, ``external id``) and the current one (``cat: "kernel"``,
``deviceProperties``, ``External id``). Every kernel event is kept; nothing is filtered by profiler step.

- ``cuda_profiler_range`` events (CUPTI range profiler, ``experimental_config`` metrics) become one kernel row each,
  with their counters in ``metrics``; their ``dur`` spans the profiler's replay, not the kernel, so the kernel's
  duration is left missing and a note says so.
- ROCm (roctracer) kernel events carry no registers, grid or occupancy: those columns stay missing, with a note.
- Ranges are ``user_annotation`` events (``record_function`` and profiler steps) on CPU threads, joined to kernels
  through the launching ``cuda_runtime`` call's correlation id; ``gpu_user_annotation`` ranges are kept unjoined.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from json.decoder import scanstring
from typing import Any

import pandas as pd

from iotrace.trace.devices import vendor_of, with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._common import attach_launch_times, attach_paths, int_or_none, us_to_ns
from iotrace.trace.parser import Head, read_bytes
from iotrace.trace.tables import TraceTables, build

PROFILER_RANGE = "cuda_profiler_range"
#: Microseconds since the epoch reach ~1.8e15 in 2027; beyond 1e17 a timestamp is damage, not time.
_TIME_LIMIT_US = 1e17


def _reject_constant(name: str) -> float:
    raise ValueError(f"the JSON holds {name}, which no profiler writes for a measured value")


class KinetoParser(_sniff.Kineto):
    """Reads the format :class:`iotrace.trace.formats._sniff.Kineto` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        fast = _read_streamed(path, read_bytes(path, head.gzipped))
        if fast is not None:
            return fast
        # The streamed read declined (damage, an unusual layout): read the file again the plain way, which names
        # the fault exactly as json and _read see it, syntax errors before event errors.
        try:
            doc = json.loads(read_bytes(path, head.gzipped), parse_constant=_reject_constant)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceFormatError(path, f"is not valid JSON ({' '.join(str(exc).split())[:120]})",
                                   "the file is truncated or damaged") from exc
        except ValueError as exc:
            raise TraceFormatError(path, str(exc), "the file is damaged") from exc
        events = doc if isinstance(doc, list) else doc.get("traceEvents") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise TraceFormatError(path, "is JSON but not a trace (no traceEvents list)",
                                   "export with torch.profiler's export_chrome_trace or tensorboard_trace_handler")
        meta_doc = doc if isinstance(doc, dict) else {}
        return _read(path, events, meta_doc)


_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as the json module skips it
_OLD_CATEGORIES = ("Kernel", "Runtime", "Operator")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: decoded JSON holds no cycles, and collecting while a large document is
    built (each pass walks every container made so far) takes about half of ``json.loads``' time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_streamed(path: Any, data: bytes) -> TraceTables | None:
    """Read a ``{..., "traceEvents": [...], ...}`` document event by event, keeping only the events ``_read`` uses.

    Every byte still passes through json's C scanner (the top-level object and the event list are walked here
    with json's own grammar), so a damaged file is never taken for a good one; but events that are neither
    kernels, runtime calls, ranges nor transfers (CPU ops, flows: most of a trace) are dropped as soon as they are
    decoded instead of being held in one large list, which saves time and memory. Returns None, never raises, when
    the file is anything but a well-formed trace that ``_read`` accepts: the caller then reads it the plain way
    and reports the fault as it always has.
    """
    try:
        with _gc_paused():
            text = data.decode(json.detect_encoding(data), "surrogatepass")
            del data
            found = _scan(text)
            del text
            if found is None:
                return None
            doc, events, old = found
            return _read(path, events, doc, schema="2021" if old or "computeProperties" in doc else "1")
    except (StopIteration, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
            TraceFormatError):
        return None


def _scan(text: str) -> tuple[dict[str, Any], list[dict[str, Any]], bool] | None:
    """The top-level keys but ``traceEvents``, the X events in categories ``_read`` may use, and whether one of the
    first 5000 events is in a 2021-schema category; None for anything but one well-formed object with one
    ``traceEvents`` list."""
    spec = fields("kineto")
    wanted = {PROFILER_RANGE, *(cat for group in ("kernel_categories", "runtime_categories", "transfer_categories",
                                                 "range_categories") for cats in spec[group].values() for cat in cats)}
    scan = json.JSONDecoder(parse_constant=_reject_constant).scan_once
    skip = _WHITESPACE.match
    doc: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    keep = events.append
    old = False
    seen = False
    i = skip(text, 0).end()
    if text[i:i + 1] != "{":
        return None
    i = skip(text, i + 1).end()
    while text[i:i + 1] == '"':
        key, i = scanstring(text, i + 1, True)
        i = skip(text, i).end()
        if text[i:i + 1] != ":":
            return None
        i = skip(text, i + 1).end()
        if key == "traceEvents":
            if seen or text[i:i + 1] != "[":
                return None
            seen = True
            i = skip(text, i + 1).end()
            index = 0
            if text[i:i + 1] == "]":
                i += 1
            else:
                while True:
                    event, i = scan(text, i)
                    if type(event) is not dict:
                        return None
                    cat = event.get("cat")
                    if index < 5000 and not old and cat in _OLD_CATEGORIES:
                        old = True
                    if event.get("ph") == "X" and cat in wanted:
                        keep(event)
                    index += 1
                    c = text[i:i + 1]
                    if c != "," and c != "]":  # writers put the comma right after the event: skip only when not
                        i = skip(text, i).end()
                        c = text[i:i + 1]
                    if c == "]":
                        i += 1
                        break
                    if c != ",":
                        return None
                    i = skip(text, i + 1).end()
        else:
            doc[key], i = scan(text, i)
        i = skip(text, i).end()
        c = text[i:i + 1]
        if c == "}":
            i += 1
            break
        if c != ",":
            return None
        i = skip(text, i + 1).end()
    else:
        return None
    if not seen or skip(text, i).end() != len(text):
        return None
    return doc, events, old


def _schema(events: list[Any], doc: dict[str, Any]) -> str:
    if "computeProperties" in doc:
        return "2021"
    for event in events[:5000]:
        if isinstance(event, dict) and event.get("cat") in ("Kernel", "Runtime", "Operator"):
            return "2021"
    return "1"


def _read(path: Any, events: list[Any], doc: dict[str, Any], schema: str | None = None) -> TraceTables:
    spec = fields("kineto")
    schema = schema or _schema(events, doc)
    kernel_cats = set(spec["kernel_categories"][schema])
    runtime_cats = set(spec["runtime_categories"][schema])
    transfer_cats = set(spec["transfer_categories"][schema])
    range_cats = set(spec["range_categories"][schema])
    arg_map: dict[str, str] = spec["kernel_args"]
    threads: dict[tuple[Any, Any], int] = {}

    kernels: list[dict[str, Any]] = []
    kernel_ts: list[Any] = []
    metrics: list[tuple[int, str, float]] = []
    calls: list[tuple[Any, int, Any]] = []
    ranges: list[dict[str, Any]] = []
    range_ts: list[Any] = []
    transfers: list[dict[str, Any]] = []
    transfer_ts: list[Any] = []
    profiler_ranges = 0
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise TraceFormatError(path, f"traceEvents[{index}] is {type(event).__name__}, not an event object",
                                   "the file is damaged")
        cat = event.get("cat")
        if event.get("ph") != "X" or cat is None:
            continue
        if cat in kernel_cats or cat == PROFILER_RANGE:
            ts, dur = _time(path, event, index)
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            row: dict[str, Any] = {"id": len(kernels), "name": _name(path, event, index)}
            if cat == PROFILER_RANGE:
                profiler_ranges += 1
                row["duration_ns"] = None
                for key, value in args.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        metrics.append((row["id"], key, value))
            else:
                row["duration_ns"] = dur
                for raw, column in arg_map.items():
                    value = args.get(raw)
                    # Kineto writes the string "inf" for blocks/warps per SM when it has no SM count.
                    row[column] = None if isinstance(value, str) else value
                for key, prefix in (("grid", "grid_"), ("block", "block_")):
                    dims = args.get(key)
                    if isinstance(dims, list) and len(dims) == 3:
                        row.update({f"{prefix}{axis}": dims[i] for i, axis in enumerate("xyz")})
            kernels.append(row)
            kernel_ts.append(ts)
        elif cat in runtime_cats:
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            ts, _ = _time(path, event, index)
            calls.append((args.get("correlation"), _thread(threads, event), ts))
        elif cat in range_cats:
            ts, dur = _time(path, event, index)
            ranges.append({"id": len(ranges), "name": _name(path, event, index), "domain": cat, "kind": "range",
                           "duration_ns": dur, "process": int_or_none(event.get("pid")),
                           "thread": int_or_none(event.get("tid")), "key": _thread(threads, event),
                           "nests": cat == "user_annotation"})
            range_ts.append(ts)
        elif cat in transfer_cats:
            ts, dur = _time(path, event, index)
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            transfers.append({"kind": _name(path, event, index), "device": args.get("device"),
                              "stream": args.get("stream"), "duration_ns": dur, "bytes": args.get("bytes")})
            transfer_ts.append(ts)

    kernel_frame = _timed(pd.DataFrame(kernels), kernel_ts)
    range_frame = _timed(pd.DataFrame(ranges), range_ts)
    transfer_frame = _timed(pd.DataFrame(transfers), transfer_ts)
    notes = []
    call_frame = pd.DataFrame(calls, columns=["correlation_id", "thread", "time_ns"])
    call_frame["correlation_id"] = pd.to_numeric(call_frame["correlation_id"], errors="coerce")
    call_frame["time_ns"] = us_to_ns(call_frame["time_ns"].tolist()) if len(call_frame) else []
    kernel_frame = attach_launch_times(kernel_frame, call_frame)
    if len(range_frame) and len(kernel_frame) and "correlation_id" in kernel_frame:
        join_ranges = range_frame.rename(columns={"thread": "tid"}).rename(columns={"key": "thread"})
        kernel_frame, nested = attach_paths(kernel_frame, join_ranges, call_frame)
        range_frame = nested.rename(columns={"thread": "key"}).rename(columns={"tid": "thread"})
    if profiler_ranges:
        notes.append(f"{profiler_ranges} cuda_profiler_range events: CUPTI range-profiler counters, one kernel each; "
                     "their span is the profiler's replay, so kernel durations are missing")
    devices = _devices(doc, spec)
    if kernels and devices and all(d.get("vendor") == "amd" for d in devices):
        notes.append("ROCm trace: kernels carry no registers, grid or occupancy (roctracer does not record them)")
    meta = {"format": "kineto-json", "tool": "PyTorch profiler (Kineto)",
            "version": _version(doc), "schema": f"{schema} (schemaVersion {doc.get('schemaVersion', 'absent')})",
            "notes": notes, **_distributed(doc)}
    return build(path, kernels=kernel_frame, ranges=range_frame.drop(columns=["key"], errors="ignore"),
                 metrics=pd.DataFrame(metrics, columns=["kernel_id", "metric", "value"]).assign(unit=None),
                 transfers=transfer_frame, devices=with_cards(devices), meta=meta)


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


def _time(path: Any, event: dict[str, Any], index: int) -> tuple[float, float]:
    ts, dur = event.get("ts"), event.get("dur", 0)
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


def _name(path: Any, event: dict[str, Any], index: int) -> str:
    name = event.get("name")
    if not isinstance(name, str):
        raise TraceFormatError(path, f"traceEvents[{index}] has no name", "the file is damaged")
    return name


def _thread(threads: dict[tuple[Any, Any], int], event: dict[str, Any]) -> int:
    key = (str(event.get("pid")), str(event.get("tid")))
    return threads.setdefault(key, len(threads))


def _timed(frame: pd.DataFrame, ts: list[Any]) -> pd.DataFrame:
    if not len(frame):
        return frame
    start = us_to_ns(ts)
    frame["start_ns"] = start
    duration = pd.to_numeric(frame["duration_ns"], errors="coerce")
    end = start + duration.fillna(0).round().astype("int64").to_numpy()
    frame["end_ns"] = pd.array(end, dtype="Int64")
    frame.loc[duration.isna(), "end_ns"] = pd.NA
    return frame


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

