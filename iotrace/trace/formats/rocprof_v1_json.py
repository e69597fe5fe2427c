"""Legacy rocprof (v1) Chrome-trace JSON (``results.json`` of ``rocprof --hip-trace`` / ``--sys-trace``).

A Chrome trace like Kineto's, but laid out by rocprof's own rules (ROCm/rocprofiler bin/tblextr.py and
bin/sqlitedb.py, ``dump_json``): each kind of record is a "process" named by a ``process_name`` metadata event
("CPU HIP API", "COPY", "GPU0", "Markers and Ranges", ...), every value of an event is a quoted string, the exact
times are ``args.BeginNs``/``args.EndNs`` (``ts``/``dur`` are the same in whole microseconds), and ``otherData``
holds the machine's rocminfo flattened to ``AgentN.Key`` strings. It has its own reader, tried before Kineto's,
because none of Kineto's rules (event categories, numeric args, ``deviceProperties``) hold for it.

Kernels are the complete events of the ``GPU<n>`` processes (device: ``args.dev-id``, else ``n``), copies and fills
those of ``COPY``, API calls those of a process whose name ends in "API", roctx markers those of "Markers and
Ranges". Devices are the GPU agents of the rocminfo dump, numbered in their order as rocprof numbers its GPUs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.formats import _sniff
from iotrace.trace.formats._rocm import copy_op, kernel_name, leading_int
from iotrace.trace.formats.api_calls import classify_calls
from iotrace.trace.parser import Head, read_bytes
from iotrace.trace.tables import TraceTables, build

_GPU = re.compile(r"GPU(\d+)$")  # "GPU0": a GPU's kernel timeline ("GPU Barriers0" is its barrier packets)


class RocprofJsonParser(_sniff.RocprofJson):
    """Reads the format :class:`iotrace.trace.formats._sniff.RocprofJson` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        try:
            doc = json.loads(read_bytes(path, head.gzipped))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceFormatError(path, f"is a rocprof JSON trace that does not parse ({exc})",
                                   "the file is truncated or damaged; copy it again") from exc
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise TraceFormatError(path, "has no traceEvents list", "the file is damaged or not a rocprof trace")
        processes = {e.get("pid"): str(e.get("args", {}).get("name", "")) for e in events
                     if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"}
        kernels: list[dict[str, Any]] = []
        transfers: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        ranges: list[dict[str, Any]] = []
        skipped: dict[str, int] = {}
        for event in events:
            if not isinstance(event, dict) or event.get("ph") != "X":
                continue
            process = processes.get(event.get("pid"), "")
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            name = str(args.get("Name") or event.get("name") or "")
            start, end = _int(path, args, "BeginNs"), _int(path, args, "EndNs")
            if start is None or end is None or end < start:
                raise TraceFormatError(path, f"event {name[:40]!r} has no BeginNs/EndNs or ends before it begins",
                                       "the file is damaged")
            span = {"start_ns": start, "end_ns": end, "duration_ns": end - start}
            gpu = _GPU.match(process)
            if gpu:
                device = _int(path, args, "dev-id")
                kernels.append({"id": len(kernels), "name": kernel_name(name), **span,
                                "device": int(gpu.group(1)) if device is None else device,
                                "stream": _int(path, args, "stream-id")})
            elif process == "COPY":
                kind, direction = copy_op(name) or (name, None)
                transfers.append({"kind": kind, "copy_kind": direction, **span, "device": _int(path, args, "dev-id"),
                                  "stream": _int(path, args, "stream-id")})
            elif process.endswith("API"):
                calls.append({"raw": name, **span, "process": _int(path, args, "pid"),
                              "thread": _int(path, args, "tid")})
            elif process.startswith("Markers"):
                ranges.append({"id": len(ranges), "name": name, "domain": "roctx", "kind": "range", **span,
                               "process": _int(path, args, "pid"), "thread": _int(path, args, "tid")})
            else:
                skipped[process or "(unnamed)"] = skipped.get(process or "(unnamed)", 0) + 1
        names, kinds = classify_calls([c.pop("raw") for c in calls])
        calls.sort(key=lambda c: c["start_ns"])
        api_calls = [{"id": i, "name": n, "kind": k, **c} for i, (n, k, c) in enumerate(zip(names, kinds, calls,
                                                                                               strict=True))]
        notes = ["rocprof v1 JSON names no kernel launch geometry or registers (results.csv has them)",
                 "copies carry no byte counts in rocprof's JSON"] if transfers else \
            ["rocprof v1 JSON names no kernel launch geometry or registers (results.csv has them)"]
        notes += [f"{n} events of '{p}' not read" for p, n in sorted(skipped.items())]
        devices = with_cards(_devices(doc.get("otherData")), notes=notes)
        runtime = doc.get("otherData", {}).get("HSASystemAttributes.RuntimeVersion") \
            if isinstance(doc.get("otherData"), dict) else None
        meta = {"format": self.name, "tool": self.tool, "version": None,
                "schema": "Chrome trace" + (f" (HSA runtime {runtime})" if runtime else ""), "notes": notes}
        return build(path, kernels=kernels, transfers=transfers, api_calls=api_calls, ranges=ranges,
                     devices=devices, meta=meta)


def _int(path: Path, args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None or value == "":
        return None
    text = str(value).strip()
    if not text.lstrip("-").isdigit():
        raise TraceFormatError(path, f"args.{key} = {text[:30]!r} is not a whole number", "the file is damaged")
    return int(text)


def _devices(other: Any) -> list[dict[str, Any]]:
    """The GPU agents of rocprof's flattened rocminfo dump (``Agent3.ComputeUnit`` = "304"), in agent order."""
    if not isinstance(other, dict):
        return []
    agents: dict[int, dict[str, str]] = {}
    for key, value in other.items():
        match = re.match(r"Agent(\d+)\.(.+)$", str(key))
        if match:
            agents.setdefault(int(match.group(1)), {})[match.group(2)] = str(value)
    rows = []
    for number in sorted(agents):
        agent = agents[number]
        if agent.get("DeviceType") != "GPU":
            continue
        l2_kb = leading_int(agent.get("CacheInfo.L2"))  # "4096(0x1000)KB"
        rows.append({"device": len(rows), "name": agent.get("MarketingName") or agent.get("Name"), "vendor": "amd",
                     "arch": agent.get("Name"), "sm_count": leading_int(agent.get("ComputeUnit")),
                     "warp_size": leading_int(agent.get("MemoryProperties.WavefrontSize")),
                     "clock_mhz": leading_int(agent.get("MaxClockFreq.(MHz)")),
                     "l2_bytes": None if l2_kb is None else l2_kb * 1024,
                     "max_threads_per_block": leading_int(agent.get("MemoryProperties.WorkgroupMaxSize"))})
    return rows
