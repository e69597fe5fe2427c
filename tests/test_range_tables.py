"""One table of ranges: the timeline's "time per NVTX range" and the per-range rooflines give every range the same
kernel time, and both equal a join done here from the raw file.

Every corpus export is loaded once; those with ranges are checked (Nsight Systems sqlite exports with NVTX, Kineto
traces with ``record_function`` / user annotations, the nsys stats CSV that holds ranges but no kernels). The rule
both tables follow (reports/range_kernels.py, after Nsight Systems' NVTX GPU projection and PyTorch's
``FunctionEvent.device_time_total``): a kernel belongs to every range open on its launching call's thread when the
call began, so a range's kernel time is *inclusive* of nested ranges (each kernel once per range name), and its self
time counts the kernels whose innermost enclosing range it is.

The reference side never calls iotrace's join: sqlite3 on the nsys exports (``CUPTI_ACTIVITY_KIND_KERNEL`` to
``CUPTI_ACTIVITY_KIND_RUNTIME`` by ``correlationId`` in the same process, then the push/pop ``NVTX_EVENTS`` on the
call's ``globalTid`` that enclose the call's start), json/gzip on the Kineto traces (``kernel`` events to the
``cuda_runtime``/``cuda_driver`` call with the same ``args.correlation``, then the ``user_annotation`` events on
the call's pid/tid enclosing the call's ``ts``).
"""

from __future__ import annotations

import gzip
import json
import math
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from iotrace.trace import load
from iotrace.trace.reports.range_roofline import NO_RANGE, range_rooflines
from iotrace.trace.reports.report import Report, build_report
from iotrace.trace.reports.timeline import timeline
from iotrace.trace.tables import TraceTables
from tests.conftest import corpus_exports, load_corpus, write_kineto

#: Larger exports are left out, by name, so the file stays well under 30 s (the corpus has none today).
SIZE_LIMIT = 15_000_000
#: Everything listed: a report's own cut (--top) is not what is tested here.
ALL = 10**6


@dataclass(frozen=True)
class Export:
    path: Path
    tables: TraceTables
    report: Report  # as the CLI builds it, every range roofline row kept
    ranges: pd.DataFrame  # the timeline's per-range table, every name kept (indexed by name)
    rooflines: pd.DataFrame | None  # the per-range roofline table, every name kept (indexed by range), or None


@dataclass(frozen=True)
class Reference:
    """Per range name: inclusive kernel time and launches, and the self (innermost) kernel time."""

    kernel_ns: dict[str, float]
    launches: dict[str, int]
    self_ns: dict[str, float]


@pytest.fixture(scope="module")
def exports(corpus: Path) -> dict[str, Export]:
    """Every corpus export with ranges, loaded once."""
    out: dict[str, Export] = {}
    for path in corpus_exports(corpus):
        if path.stat().st_size > SIZE_LIMIT:
            continue
        tables = load_corpus(path)
        if not len(tables.ranges):
            continue
        roofline = range_rooflines(tables, None, top=ALL)
        out[str(path.relative_to(corpus))] = Export(
            path, tables, build_report(tables, top=ALL), timeline(tables, top=ALL).ranges.set_index("name"),
            None if roofline is None else roofline.table.set_index("range").drop(index=NO_RANGE, errors="ignore"))
    return out


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_the_corpus_has_ranged_exports_of_both_formats(corpus: Path, exports: dict[str, Export]) -> None:
    large = [str(p.relative_to(corpus)) for p in corpus_exports(corpus) if p.stat().st_size > SIZE_LIMIT]
    assert not large, f"left out as larger than {SIZE_LIMIT / 1e6:.0f} MB (test time): {large}"
    suffixes = {Path(name).suffix for name in exports}
    assert {".sqlite", ".gz", ".json", ".csv"} <= suffixes, sorted(exports)
    # Nested ranges with kernels in both formats: the case where an exclusive and an inclusive table part ways.
    assert sum(1 for e in exports.values() if e.rooflines is not None and (e.rooflines["depth_max"] > 0).any()) >= 5


def test_both_tables_give_each_range_the_same_kernel_time(exports: dict[str, Export]) -> None:
    for name, export in exports.items():
        line, roof = export.ranges, export.rooflines
        if roof is None:  # no kernels: neither table has a kernel time
            assert line["kernel_ns"].isna().all() and (line["kernels"] == 0).all(), name
            continue
        shared = line.index.intersection(roof.index)
        assert len(shared) == len(roof), (name, sorted(set(roof.index) - set(line.index)))  # timed ranges: all there
        for rng in shared:
            assert line.loc[rng, "kernel_ns"] == roof.loc[rng, "kernel_ns"], (name, rng)
            assert line.loc[rng, "kernels"] == roof.loc[rng, "launches"], (name, rng)
            assert line.loc[rng, "self_kernel_ns"] == roof.loc[rng, "self_ns"], (name, rng)
        # The report as built (its timeline cut to the 10 longest ranges) agrees on every range both list.
        report_line = export.report.timeline.ranges.set_index("name")
        report_roof = export.report.range_rooflines.table.set_index("range")
        both = report_line.index.intersection(report_roof.index)
        assert (report_line.loc[both, "kernel_ns"] == report_roof.loc[both, "kernel_ns"]).all(), name
        # A range that launched nothing is absent from the rooflines' table and, in the timeline's, a measured 0
        # where the kernels carry their launching call and a time, missing ("—") where they do not (the CUPTI range
        # profiler's kernels have neither).
        idle = line.index.difference(roof.index)
        kernels = export.tables.kernels
        known = kernels["launch_ns"].notna().any() and kernels["duration_ns"].notna().any()
        cells = line.loc[idle, "kernel_ns"]
        assert ((cells == 0.0).all() if known else cells.isna().all()) and (line.loc[idle, "kernels"] == 0).all(), name


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_both_tables_equal_the_join_done_from_the_file(exports: dict[str, Export]) -> None:
    checked = 0
    for name, export in exports.items():
        if export.path.suffix == ".sqlite":
            ref = _nsys_reference(export.path)
        elif export.path.name.endswith((".json", ".json.gz")):
            ref = _kineto_reference(export.path)
        else:  # the nsys stats CSV: ranges, no kernels
            assert export.tables.kernels.empty and export.rooflines is None, name
            continue
        roof = export.rooflines if export.rooflines is not None else pd.DataFrame(columns=["kernel_ns"])
        assert set(roof.index) == set(ref.kernel_ns), name  # the ranges that hold kernels, no more, no fewer
        for rng, ns in ref.kernel_ns.items():
            # Kineto durations are µs floats times 1000: summed in another order they differ in the last bits.
            assert roof.loc[rng, "kernel_ns"] == pytest.approx(ns, rel=1e-12), (name, rng)
            assert export.ranges.loc[rng, "kernel_ns"] == pytest.approx(ns, rel=1e-12), (name, rng)
            assert roof.loc[rng, "launches"] == export.ranges.loc[rng, "kernels"] == ref.launches[rng], (name, rng)
            own = ref.self_ns.get(rng, 0.0)
            assert roof.loc[rng, "self_ns"] == pytest.approx(own, rel=1e-12, abs=1e-9), (name, rng)
            assert export.ranges.loc[rng, "self_kernel_ns"] == pytest.approx(own, rel=1e-12, abs=1e-9), (name, rng)
        checked += len(ref.kernel_ns)
    assert checked >= 100  # ranges holding kernels across the corpus (163 when written)


def test_the_cut_report_tables_agree_where_both_list_a_range(exports: dict[str, Export]) -> None:
    """What a reader sees: ``iotrace report`` cuts the timeline's table to the 10 longest ranges and the rooflines
    to --top; no range shows two kernel times, and an outer range shows its nested ranges' kernels."""
    for name in ("kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz",
                 "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"):
        export = exports[name]
        line = export.report.timeline.ranges.set_index("name")
        roof = export.report.range_rooflines.table.set_index("range")
        both = line.index.intersection(roof.index)
        assert len(both) >= 1
        assert (line.loc[both, "kernel_ns"] == roof.loc[both, "kernel_ns"]).all(), name
    tensorrt = exports["nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"]
    outer = tensorrt.report.timeline.ranges.set_index("name").loc["ExecutionContext::execute"]
    # Every kernel of the TensorRT run is launched inside ExecutionContext::execute, none directly in it.
    assert outer["kernel_ns"] == tensorrt.tables.kernels["duration_ns"].sum() and outer["self_kernel_ns"] == 0.0
    assert outer["kernels"] == 36


def test_ranges_starting_together_hold_the_kernel_in_both(tmp_path: Path) -> None:
    """Two ranges opened in the same microsecond, the inner one first in the file (Kineto's timestamps make such ties
    common): a kernel launched inside both belongs to both, and its innermost range is the shorter one."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "inner", "pid": 1, "tid": 1, "ts": 100, "dur": 20},
              {"ph": "X", "cat": "user_annotation", "name": "outer", "pid": 1, "tid": 1, "ts": 100, "dur": 80},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 100,
               "dur": 5, "args": {"correlation": 9}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 110, "dur": 4,
               "args": {"correlation": 9, "device": 0, "stream": 7}}]
    tables = load(write_kineto(tmp_path / "tie.json", events))
    line = timeline(tables, top=ALL).ranges.set_index("name")
    roof = range_rooflines(tables, None, top=ALL).table.set_index("range")
    for table, time, own in ((line, "kernel_ns", "self_kernel_ns"), (roof, "kernel_ns", "self_ns")):
        assert (table.loc["outer", time], table.loc["inner", time]) == (4000.0, 4000.0)
        assert (table.loc["outer", own], table.loc["inner", own]) == (0.0, 4000.0)


# --- the references: straight from the files --------------------------------------------------------------------

def _reference(hits: list[tuple[str, Any, tuple[int, int, int], float]]) -> Reference:
    """From (range name, kernel key, the range's (start, -end, file order), kernel duration) for every range that
    encloses a kernel's launch call: per name the kernels (each once), and each kernel's innermost range (the latest
    start; among equal starts the shortest, then the later in the file)."""
    kernels: dict[str, dict[Any, float]] = defaultdict(dict)
    inner: dict[Any, tuple[tuple[int, int, int], str, float]] = {}
    for rng, key, order, ns in hits:
        kernels[rng][key] = ns
        if key not in inner or order > inner[key][0]:
            inner[key] = (order, rng, ns)
    own: dict[str, float] = defaultdict(float)
    for _, rng, ns in inner.values():
        own[rng] += ns
    return Reference({r: math.fsum(k.values()) for r, k in kernels.items()}, {r: len(k) for r, k in kernels.items()},
                     dict(own))


def _nsys_reference(path: Path) -> Reference:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        have = {row[1] for row in db.execute("PRAGMA table_info(NVTX_EVENTS)")}
        text = "coalesce(n.text, s.value)" if "textId" in have else "n.text"
        strings = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in have else ""
        # globalPid keeps the process bits of the calling thread's globalTid (Nsight Systems' own projection joins so).
        rows = db.execute(
            f"SELECT {text}, k.rowid, n.start, n.end, n.rowid, k.end - k.start "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = k.globalPid "
            "JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.end IS NOT NULL AND n.globalTid = r.globalTid "
            f"AND n.start <= r.start AND r.start <= n.end {strings}").fetchall()
    return _reference([(name if name is not None else "(unnamed)", kernel, (start, -end, row), float(ns))
                       for name, kernel, start, end, row, ns in rows])


def _kineto_reference(path: Path) -> Reference:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]

    def ns(us: float) -> int:  # µs (a float in the file) to integer ns, exactly
        return round(Fraction(us) * 1000)

    ranges: dict[tuple[str, str], list[tuple[int, int, int, str]]] = defaultdict(list)
    calls: dict[Any, tuple[tuple[str, str], int]] = {}
    for order, e in enumerate(events):
        thread = (str(e.get("pid")), str(e.get("tid")))
        if e.get("cat") == "user_annotation":
            start = ns(e["ts"])
            ranges[thread].append((start, start + round(e.get("dur", 0) * 1000.0), order, e["name"]))
        elif e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            calls[e["args"]["correlation"]] = (thread, ns(e["ts"]))  # the file's last call of an id launched it
    hits = []
    for order, e in enumerate(events):
        if e.get("cat") != "kernel" or e.get("args", {}).get("correlation") not in calls:
            continue
        thread, at = calls[e["args"]["correlation"]]
        hits += [(name, order, (start, -end, row), e.get("dur", 0) * 1000.0)
                 for start, end, row, name in ranges.get(thread, []) if start <= at <= end]
    return _reference(hits)
