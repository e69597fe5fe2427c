"""Nsight Compute reports (``.ncu-rep``, legacy ``.nsight-cuprof-report``) through NVIDIA's ``ncu_report`` module.

The container, which NVIDIA does not document (the layout was read off the files themselves and holds for
Nsight Compute 2019.x to 2024.3 reports): ``NVR\\0``, a uint32-length-prefixed FileHeader protobuf, then blocks of
[uint32 length + BlockHeader protobuf (field 5 = PayloadSize) + payload]. ``ncu_report`` loads anything, even an
HTML page, as a report with zero ranges, and is native code; so the container is walked
first (a cut-short file is refused before it reaches native code) and zero ranges is an error.

Every numeric metric of every launch lands in ``metrics``; launch and occupancy metrics named in
``iotrace/data/trace_fields.toml`` (section ``ncu``) also fill the kernel columns; ``device__attribute_*`` fill
``devices``. String-valued metrics (cache config, names) are not in ``metrics``, whose values are numbers. The
SourceCounters section's per-address stall samples (instanced ``smsp__pcsamp_warps_issue_stalled_*``) fill
``source_samples``, with each address's SASS and source line as ``ncu_report`` maps them. Nsight Compute's own rule
results (its guided analysis, ``IAction.rule_results_as_dicts``) fill ``rules``; a launch whose rule payload cannot be
read loses only its rules, with a note. A launch with no ``launch__*`` metric and no duration was not profiled: its id
is in ``meta["not_profiled"]``, with a note.
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import re
import select
import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pandas as pd

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError, TraceToolError
from iotrace.trace.fields import NCU_NOT_COUNTERS, fields
from iotrace.trace.formats import _sniff
from iotrace.trace.formats.ncu_rep_rules import NO_RULES, launch_rules, rules_note
from iotrace.trace.parser import Head
from iotrace.trace.tables import SOURCE_SAMPLE_COLUMNS, TraceTables, build

_VERSION = re.compile(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?) \(build (\d+)\)")
# The profiled process's command line, which ncu stores as one length-prefixed protobuf string starting with the ncu
# executable's path ("/opt/nvidia/nsight-compute/2024.1.1/target/.../ncu --set full -o r ./app ").
_COMMAND = re.compile(rb"(?:/[\x21-\x7e]*/)?ncu(?:\.exe)? [\x20-\x7e]+")


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
        sass = _probe_in_child(path, ncu_report)
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
        meta["command"] = capture_command(data)
        return _read(path, context, ncu_report, meta, sass)


def _probe_in_child(path: Path, ncu_report: Any) -> list[dict[int, str | None]] | None:
    """Read the whole report once in a forked child: a damaged report can abort ncu_report's native code, which
    would end this process with no message. The fuzz test found such files; a fork costs milliseconds.

    The child also reads the SASS of every sampled address and hands it back, one line per launch: ncu_report's
    disassembler runs on a thread it starts once per process, so a forked child of a process that has called
    ``sass_by_pc`` waits forever for a thread it does not have. This process never calls it where it can fork.
    Returns the SASS per launch (address -> text or None), or None where there is no fork (the reader then reads
    it)."""
    if not hasattr(os, "fork"):
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read every metric, then leave without running any Python cleanup
        faulthandler.disable()  # a crash here is the expected outcome of a damaged file, not a report to print
        os.close(read_end)
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
                                _per_opcode(name, metric)
                        # A native crash in the rule payload ends the child as above; a Python error is the reader's to
                        # note (the launch loses its rules), and must not stop the SASS the later launches need.
                        with suppress(Exception):
                            action.rule_results_as_dicts()
                        sink: dict[str, list[Any]] = {column: [] for column in SOURCE_SAMPLE_COLUMNS}
                        _source_samples(path, action, 0, sink, None)  # every native call the reader makes
                        found = dict(zip(sink["address"], sink["sass"], strict=True))
                        line = (json.dumps(list(found.items())) + "\n").encode()
                        while line:
                            line = line[os.write(write_end, line):]
        except BaseException:
            code = 3
        os._exit(code)
    os.close(write_end)
    received = bytearray()
    reaped = False
    try:
        while True:
            # No word from the child for this long: ncu_report hangs (a damaged file, or the disassembler case above).
            if not select.select([read_end], [], [], _CHILD_SILENCE_S)[0]:
                raise TraceFormatError(path, f"makes NVIDIA's ncu_report hang (no progress in {_CHILD_SILENCE_S} s)",
                                       "the report is damaged; export it again (or, where this process called "
                                       "ncu_report's sass_by_pc itself, load the report in a fresh process)")
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            received += chunk
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        os.close(read_end)
        if not reaped:  # the silence, an alarm or an error ended the wait: the child must not outlive it
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise TraceFormatError(path, f"makes NVIDIA's ncu_report crash (signal {os.WTERMSIG(status)}) while reading it",
                               "the report is damaged; export it again")
    # A child that stopped on an error wrote the launches it finished; the reader meets the error itself.
    return [{int(address): text for address, text in json.loads(line)} for line in bytes(received).splitlines()]


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


def capture_command(data: bytes) -> str | None:
    """The ``ncu ...`` command line the report was captured with (the executable's path shortened to ``ncu``), or
    None where the file does not store one (2019-era reports)."""
    for match in _COMMAND.finditer(data):
        start, text = match.start(), match.group()
        # The string's protobuf length is the varint just before it: one byte below 128 characters, else two. The
        # printable run can continue past the string into the next field's bytes, so the length that fits is taken.
        lengths = [data[start - 1]] if start >= 1 and data[start - 1] < 0x80 else []
        if start >= 2 and data[start - 2] & 0x80 and data[start - 1] < 0x80:
            lengths.append((data[start - 2] & 0x7F) | (data[start - 1] << 7))
        fits = [n for n in lengths if len(text) - 8 <= n <= len(text)]
        if fits:
            text = text[:max(fits)]
        words = text.decode("ascii").split()
        return " ".join(["ncu", *words[1:]])
    return None


def _read(path: Path, context: Any, ncu_report: Any, meta: dict[str, Any],
          sass: list[dict[int, str | None]] | None = None) -> TraceTables:
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
    sections: set[str] = set()
    samples: dict[str, list[Any]] = {column: [] for column in SOURCE_SAMPLE_COLUMNS}
    rules: list[dict[str, Any]] = []
    rules_damaged = False
    not_profiled: list[int] = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            kid = len(kernels)
            if listed := _section_ids(action):
                sections.update(listed)
            launch_not_finite: set[str] = set()
            counters = 0
            row: dict[str, Any] = {"id": kid, "name": action.name(ncu_report.IAction.NameBase_DEMANGLED),
                                   "mangled_name": action.name(ncu_report.IAction.NameBase_MANGLED) or None}
            device: dict[str, Any] = {}
            cc: dict[str, float] = {}
            launch_metrics = timed = False
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric is None:
                    continue
                launch_metrics = launch_metrics or name.startswith("launch__")
                if metric.kind() == string_kind:
                    if name in device_map:
                        device[device_map[name]] = metric.as_string()
                    continue
                value = metric.as_double()
                if not math.isfinite(value):
                    # ncu 2019 stores an unlimited occupancy limit (no shared memory used) as a non-finite value;
                    # a launch whose replay failed has every counter non-finite.
                    launch_not_finite.add(name)
                    continue
                counters += not name.startswith(NCU_NOT_COUNTERS)
                timed = timed or name.startswith("gpu__time_duration")
                metric_ids.append(kid)
                metric_names.append(name)
                metric_units.append(metric.unit())
                metric_values.append(value)
                for label, instance in _per_opcode(name, metric):
                    metric_ids.append(kid)
                    metric_names.append(label)
                    metric_units.append(metric.unit())
                    metric_values.append(instance)
                if name in kernel_map:
                    row[kernel_map[name]] = value
                elif name in device_map:
                    device[device_map[name]] = value
                elif name.startswith("device__attribute_compute_capability_"):
                    cc[name.rsplit("_", 1)[1]] = value
            if "major" in cc and "minor" in cc:
                device["cc"] = f"{int(cc['major'])}.{int(cc['minor'])}"
            if not launch_metrics and not timed:
                # ncu writes launch__* and gpu__time_duration for every launch it profiled; without both nothing was
                # recorded (the kernel or ncu's replay failed) and the finite values left are device peaks and zeros.
                not_profiled.append(kid)
            elif counters:  # a launch with no counter at all was not profiled: its non-finite values say nothing
                not_finite |= launch_not_finite
            device["device"] = row.get("device", 0)
            devices.setdefault(device["device"], device)
            kernels.append(row)
            found_rules, problem = launch_rules(action, kid)
            rules.extend(found_rules)
            if problem is not None:
                rules_damaged = True
                meta["notes"].append(rules_note(path, kid, problem))
            _source_samples(path, action, kid, samples, None if sass is None else sass[kid] if kid < len(sass) else {})
    meta["sections"] = sorted(sections)
    if not hasattr(ncu_report.IAction, "sections"):
        meta["notes"].append(f"{NO_SECTIONS} ({Path(ncu_report.__file__).parent}): the sections captured are not "
                             "listed; the metrics and rule results are read in full (pip install 'iotrace[nsight]' "
                             "for the current module)")
    if not_profiled:
        meta["not_profiled"] = not_profiled
        meta["notes"].append(not_profiled_note(kernels, not_profiled))
    if not rules and not rules_damaged:
        # Rules run per section at capture time: an empty list means they did not run, not that they found nothing.
        version = (meta.get("version") or "version not stated").replace("(", "").replace(")", "")
        listed = ", ".join(sorted(sections)) or ("none" if hasattr(ncu_report.IAction, "sections") else "not listed")
        meta["notes"].append(f"{NO_RULES} (Nsight Compute {version}; sections captured: {listed}): its guided "
                             "analysis is absent, not clean")
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
    return build(path, kernels=kernel_frame, metrics=metrics, devices=with_cards(rows, notes=meta["notes"]),
                 source_samples=samples, rules=rules, meta=meta)


#: How the note begins when the ncu_report module cannot list a launch's sections: ``IAction.sections()`` is absent
#: from ncu_report 2025.3.1 (PyPI, and Nsight Compute 2025.3.1's extras/python) and present in 2026.2.0.
NO_SECTIONS = "this ncu_report module has no IAction.sections()"


def _section_ids(action: Any) -> list[str]:
    """The identifiers of the sections captured for one launch ([] where the module cannot list them)."""
    listing = getattr(action, "sections", None)
    return [str(s.identifier()) for s in listing()] if listing is not None else []


#: How the reader's note on launches it found not profiled begins (``meta["not_profiled"]`` lists their ids); a report
#: says it in its not-profiled finding instead.
NOT_PROFILED_NOTE = "not profiled (no launch__* metric and no duration: no counters were recorded)"


def not_profiled_note(kernels: list[dict[str, Any]], ids: list[int]) -> str:
    """The note naming the launches ``ids`` of ``kernels`` (the reader's rows) that were not profiled."""
    named = ", ".join(f"#{kid} {str(kernels[kid]['name']).split('(')[0]}" for kid in ids[:10])
    more = f" and {len(ids) - 10} more" if len(ids) > 10 else ""
    return (f"{NOT_PROFILED_NOTE}: {named}{more}; rule results stored for {'them' if len(ids) > 1 else 'it'} are "
            "rule errors, not advice")


#: Instanced metrics kept per instance, as ``name[instance]`` rows beside the total: the InstructionStats section's
#: executed warp instructions per SASS opcode with all its modifiers (e.g. ``HGMMA.64x128x16.F32.BF16``), from which
#: reports.tensor_flops counts tensor-core FLOPs where the opcode fixes the matrix shape.
_PER_INSTANCE = frozenset({"sass__inst_executed_per_opcode_with_modifier_all"})


def _per_opcode(name: str, metric: Any) -> list[tuple[str, float]]:
    """``(name[opcode], value)`` for each instance of a metric in :data:`_PER_INSTANCE`; [] for any other metric."""
    if name not in _PER_INSTANCE or not metric.has_correlation_ids():
        return []
    ids = metric.correlation_ids()
    out = []
    for i in range(min(metric.num_instances(), ids.num_instances())):
        value = metric.as_double(i)
        if math.isfinite(value):
            out.append((f"{name}[{ids.as_string(i)}]", value))
    return out


#: The PC-sampling stall counters of ncu's SourceCounters section, one instance per SASS address (its correlation
#: id). Their ``_not_issued`` twins count the subset of those samples in which the warp issued nothing (Nsight
#: Compute Profiling Guide, "Warp Stall Reasons (Not Issued)"; CUPTI_ActivityPCSampling3: samples "includes
#: latencySamples"), so they are left out rather than counted twice.
_SAMPLED_STALL = "smsp__pcsamp_warps_issue_stalled_"
#: What ``sass_by_pc`` returns where the report holds no SASS for an address (the V100 OpenACC corpus report).
_NO_SASS = "???"
#: Seconds the probe child may go without finishing a launch before it counts as hung. Reading one launch takes
#: milliseconds to a second on the corpus (1,729 sampled addresses at most); this leaves a wide margin.
_CHILD_SILENCE_S = 60


def _sampled(path: Path, action: Any) -> list[tuple[int, str, int]]:
    """(address, reason as the file spells it, samples) for every address and reason with samples; refuses counts
    no sampler writes (negative, fractional, not finite)."""
    rows: list[tuple[int, str, int]] = []
    for name in action.metric_names():
        if not name.startswith(_SAMPLED_STALL) or name.endswith("_not_issued"):
            continue
        metric = action.metric_by_name(name)
        if metric is None or not metric.has_correlation_ids():
            continue
        addresses = metric.correlation_ids()
        count = metric.num_instances()
        if addresses.num_instances() != count:
            raise TraceFormatError(path, f"{name} has {count} values for {addresses.num_instances()} addresses",
                                   "the report is damaged; export it again")
        reason = name[len(_SAMPLED_STALL):]
        for i in range(count):
            value = metric.as_double(i)
            if value == 0:
                continue
            if not (math.isfinite(value) and value > 0 and value == int(value)):
                raise TraceFormatError(path, f"{name} holds {value!r} samples at one address",
                                       "the report is damaged; export it again")
            rows.append((addresses.as_uint64(i), reason, int(value)))
    return rows


def _source_samples(path: Path, action: Any, kid: int, out: dict[str, list[Any]], sass: dict[int, str | None] | None,
                    ) -> None:
    """Append one launch's stall samples per SASS address and reason to ``out`` (the ``source_samples`` columns),
    with the address's SASS (``sass``, read by the probe child; None: read it here) and, where the report maps the
    address, its source file and line, and that line's text where ncu imported the file."""
    rows = _sampled(path, action)
    if not rows:
        return
    texts: dict[str, str] | None = None  # file name -> its text ("" where ncu did not import it), read once
    split: dict[str, list[str]] = {}
    where: dict[int, tuple[str | None, str | None, int | None, str | None]] = {}
    for address in dict.fromkeys(row[0] for row in rows):
        if sass is None:
            instruction = action.sass_by_pc(address).strip()
            instruction = instruction if instruction and instruction != _NO_SASS else None
        else:
            instruction = sass.get(address)
        info = action.source_info(address)
        file = (info.file_name() or None) if info is not None else None
        line = info.line() if file is not None else None
        text = None
        if file is not None and texts is None:
            texts = dict(action.source_files().items())
        if file is not None and texts and texts.get(file) and line is not None:
            # split on "\n" only: splitlines also breaks at form feeds and other separators, shifting line numbers.
            lines = split.setdefault(file, texts[file].split("\n"))
            if 0 < line <= len(lines):
                text = lines[line - 1].strip() or None
        where[address] = (instruction, file, line, text)
    for address, reason, samples in rows:
        instruction, file, line, text = where[address]
        for column, value in (("kernel_id", kid), ("address", address), ("reason", reason), ("samples", samples),
                              ("sass", instruction), ("file", file), ("line", line), ("text", text)):
            out[column].append(value)
