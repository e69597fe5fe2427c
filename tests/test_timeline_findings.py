"""Timeline conclusions tested like values: where the time goes, the launch split and each timeline rule, on real
corpus files where they fire and where they must not, against a computation here with ``sqlite3`` or ``json`` (never
iotrace's parsers or joins on the reference side), and a sweep of the corpus's timelines.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import sqlite3
from functools import cache
from pathlib import Path

import pytest

from iotrace.trace import load
from iotrace.trace.findings.timeline_rules import GAP_NS, LAUNCH_BOUND_RUN, UTIL_CHUNKS, UTIL_PCT
from iotrace.trace.reports.report import Report, build_report
from tests.conftest import CORPUS, cli_in_process, load_corpus, merge_spans, write_kineto
from tests.test_findings_ranking import SYNC_NAMES, idle_after, sqlite_busy

ALEXNET = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"
RTX4090 = "nsys/rtx4090_sumarray_pageable_zerocopy_nsys2023.3.sqlite"
CLOVERLEAF = "nsys/a100_sxm4_80gb_cloverleaf_nsys2024.5.sqlite"
CUTLASS = "nsys/a40_a100pcie_cutlass_gemm_nsys2023.2.sqlite"
TRT = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"
RANK0 = "kineto-ranks/rank-0.json.gz"
NCCL = "kineto/a100_pg509_nccl_kineto.json.gz"
RESNET = "kineto/v100_dgxs_resnet50_tbplugin_kineto.json.gz"


@cache
def _report(name: str, top: int = 1000) -> Report:
    return build_report(load_corpus(CORPUS / name), top=top)


def _sqlite_gpu_ops(path: Path) -> list[tuple[int, int]]:
    """Every kernel, copy and set of an nsys export, read with sqlite3."""
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
        ops = []
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if table in tables:
                ops += db.execute(f"select start, end from {table}").fetchall()
    return ops


def _kineto_events(path: Path) -> list[dict]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)["traceEvents"]


def _kineto_gpu_ops(path: Path) -> list[tuple[int, int, str, str]]:
    """Kernels, copies and sets of a Kineto trace in ns (Kineto writes µs), with their names and categories."""
    return [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), e["name"], e["cat"])
            for e in _kineto_events(path)
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def test_gpu_gaps_fire_on_a_long_gap_with_the_hosts_activity_and_not_below_500_ms(corpus: Path) -> None:
    busy = merge_spans([(a, b) for a, b, *_ in _kineto_gpu_ops(corpus / ALEXNET)])
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(busy) if b[0] - a[1] >= GAP_NS]
    [finding] = [f for f in _report(ALEXNET).findings if f.rule == "gpu-gaps"]
    assert len(gaps) >= 1 and finding.evidence[0].value == len(gaps)
    assert finding.evidence[1].value == pytest.approx(sum(gaps) / 1e6, abs=1e-3)
    assert finding.gain.ns == pytest.approx(sum(gaps))
    assert "(" in finding.text  # each gap names what the host did in it
    rtx = merge_spans(_sqlite_gpu_ops(corpus / RTX4090))
    assert max(b[0] - a[1] for a, b in itertools.pairwise(rtx)) < GAP_NS  # 370 ms at most
    assert "gpu-gaps" not in [f.rule for f in _report(RTX4090).findings]


def _low_chunks(busy: list[tuple[int, int]]) -> tuple[int, float]:
    start, end = busy[0][0], busy[-1][1]
    width = (end - start) / UTIL_CHUNKS
    low, idle = 0, 0.0
    for k in range(UTIL_CHUNKS):
        a, b = start + k * width, start + (k + 1) * width
        used = sum(max(0.0, min(b, e) - max(a, s)) for s, e in busy)
        if 100 * used / width < UTIL_PCT:
            low, idle = low + 1, idle + width - used
    return low, idle


def test_gpu_utilization_chunks_match_an_independent_count(corpus: Path) -> None:
    low, idle = _low_chunks(merge_spans(_sqlite_gpu_ops(corpus / RTX4090)))
    [finding] = [f for f in _report(RTX4090).findings if f.rule == "gpu-utilization"]
    assert low > 0 and finding.evidence[0].value == low
    assert finding.gain.ns == pytest.approx(idle, rel=1e-6)
    assert _low_chunks(merge_spans(_sqlite_gpu_ops(corpus / TRT)))[0] == 0
    assert "gpu-utilization" not in [f.rule for f in _report(TRT).findings]


def _sqlite_launches(path: Path) -> list[tuple[int, int, int, int]]:
    """(kernel start, end, launch call start, call end) per kernel, joined here by correlation id."""
    with sqlite3.connect(path) as db:
        return db.execute("select k.start, k.end, r.start, r.end from CUPTI_ACTIVITY_KIND_KERNEL k join "
                          "CUPTI_ACTIVITY_KIND_RUNTIME r on r.correlationId = k.correlationId "
                          "order by k.start").fetchall()


def test_launch_bound_stretches_match_an_independent_join(corpus: Path) -> None:
    rows = _sqlite_launches(corpus / CLOVERLEAF)
    span = inside = kernels = 0
    run: list[tuple[int, int, int, int]] = []
    for row in [*rows, None]:
        short = row is not None and row[1] - row[0] < row[3] - row[2]
        if short:
            run.append(row)  # type: ignore[arg-type]
            continue
        if len(run) >= LAUNCH_BOUND_RUN:
            span += max(r[1] for r in run) - min(r[0] for r in run)
            inside += sum(r[1] - r[0] for r in run)
            kernels += len(run)
        run = []
    [finding] = [f for f in _report(CLOVERLEAF).findings if f.rule == "launch-bound"]
    assert kernels > 0 and finding.evidence[0].value == kernels
    assert finding.gain.ns == pytest.approx(span - inside)
    assert "launch-bound" not in [f.rule for f in _report(CUTLASS).findings]  # milliseconds-long GEMMs


def test_the_launch_split_matches_an_independent_join(corpus: Path) -> None:
    """Latency where a kernel opened a busy run on an idle GPU: from the later of its call's end and the last GPU
    work's end; queueing the rest of the wait."""
    rows = _sqlite_launches(corpus / CLOVERLEAF)
    busy = merge_spans(_sqlite_gpu_ops(corpus / CLOVERLEAF))
    latency, queued = [], []
    for start, _, _, call_end in rows:
        wait = start - call_end
        if wait < 0:
            continue
        before = [b for a, b in busy if b <= start]
        opened = any(a == start for a, _ in busy)
        idle = max(0, start - max(call_end, before[-1] if before else call_end)) if opened else 0
        idle = min(idle, wait)
        if idle > 0:
            latency.append(idle)
        if wait - idle > 0:
            queued.append(wait - idle)
    split = _report(CLOVERLEAF).timeline.launches
    assert split.latency["count"] == len(latency) and split.latency["total_ns"] == pytest.approx(sum(latency))
    assert split.queueing["count"] == len(queued) and split.queueing["total_ns"] == pytest.approx(sum(queued))
    assert split.api["count"] == len(rows)
    assert split.api["total_ns"] == pytest.approx(sum(r[3] - r[2] for r in rows))


@pytest.mark.parametrize("name", [RANK0, NCCL])
def test_where_the_time_goes_sums_to_the_span_and_exposed_communication_is_computed_apart(corpus: Path,
                                                                                        name: str) -> None:
    ops = _kineto_gpu_ops(corpus / name)
    kernels = [(a, b, n) for a, b, n, cat in ops if cat == "kernel"]
    compute = merge_spans([(a, b) for a, b, n in kernels if "ncclKernel" not in n and "ncclDevKernel" not in n])
    comm = merge_spans([(a, b) for a, b, n in kernels if "ncclKernel" in n or "ncclDevKernel" in n])
    exposed = sum(max(0, b - a) for a, b in _subtract(comm, compute))
    row = _report(name).timeline.split.devices.iloc[0]
    assert row["compute_ns"] + row["communication_ns"] + row["copies_ns"] + row["idle_ns"] == row["span_ns"]
    assert row["communication_ns"] == pytest.approx(exposed, rel=1e-6, abs=2_000)  # Kineto's µs rounding
    fired = [f for f in _report(name).findings if f.rule == "comm-exposed"]
    assert bool(fired) == (exposed / row["span_ns"] >= 0.05)


def _subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intervals of ``a`` not covered by ``b`` (both disjoint and sorted)."""
    out = []
    for start, end in a:
        cursor = start
        for s, e in b:
            if e <= cursor or s >= end:
                continue
            if s > cursor:
                out.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            out.append((cursor, end))
    return out


def _timelines() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return sorted(str(p.relative_to(CORPUS)) for d in ("nsys", "kineto", "kineto-ranks") if (CORPUS / d).is_dir()
                  for p in (CORPUS / d).iterdir() if p.suffix not in (".nsys-rep", ".qdrep"))


@pytest.mark.parametrize("name", _timelines() or ["(no corpus)"])
def test_no_nccl_kernel_gets_launch_or_occupancy_advice_and_top_limits_findings(corpus: Path, name: str) -> None:
    full = build_report(load_corpus(corpus / name), top=1000)
    for f in full.findings:
        if f.kernel and ("ncclKernel" in f.kernel or "ncclDevKernel" in f.kernel):
            assert f.rule not in ("small-grid", "tail", "occupancy-limit", "achieved-gap", "dominant-stall"), f.text
    top = build_report(load_corpus(corpus / name), top=3)
    assert len(top.findings) <= 3 and top.findings_total == len(full.findings)
    split = None if full.timeline is None else full.timeline.split
    if split is not None:  # the four parts always sum to the span
        parts = split.devices[["compute_ns", "communication_ns", "copies_ns", "idle_ns"]].sum(axis=1)
        assert (parts == split.devices["span_ns"]).all()


def test_a_rule_without_its_data_says_so_once(corpus: Path) -> None:
    notes = [n for n in _report(RTX4090).notes if "could not run" in n]
    assert len(notes) == len(set(notes)) and all(n.startswith("rule") for n in notes)
    assert math.isfinite(_report(RTX4090).timeline.split.devices["span_ns"].iloc[0])


def _sqlite_calls(path: Path) -> list[tuple[str, int]]:
    """(name, duration) of every runtime call of an nsys export, names without CUPTI's _vNNNN suffix."""
    with sqlite3.connect(path) as db:
        rows = db.execute("select s.value, r.end - r.start from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
                          "on s.id = r.nameId").fetchall()
    return [(name.split("_v")[0] if "_v" in name else name, dur) for name, dur in rows]


def _sqlite_call_times(path: Path) -> list[tuple[str, int, int]]:
    """(name, start, end) of every runtime call of an nsys export, names without CUPTI's _vNNNN suffix."""
    with sqlite3.connect(path) as db:
        rows = db.execute("select s.value, r.start, r.end from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
                          "on s.id = r.nameId").fetchall()
    return [(name.split("_v")[0] if "_v" in name else name, a, b) for name, a, b in rows]


def test_sync_rules_match_the_runtime_calls_read_with_sqlite(corpus: Path) -> None:
    """Counts and host time from the export's runtime calls; the gain is the GPU idle the calls leave, not their
    host time (tests/test_findings_ranking.py checks it against sqlite on CloverLeaf and the GTX 1650 run)."""
    calls = _sqlite_calls(corpus / CLOVERLEAF)
    sync = [d for n, d in calls if n in SYNC_NAMES]
    [finding] = [f for f in _report(CLOVERLEAF).findings if f.rule == "sync-api"]
    assert finding.evidence[0].value == len(sync) == 1312  # cudaDeviceSynchronize after every kernel
    assert finding.evidence[1].value == round(sum(sync) / 1e6, 3) and 0 < finding.gain.ns < sum(sync)
    path = corpus / RTX4090
    memcpy = [(a, b) for n, a, b in _sqlite_call_times(path) if n.startswith("cudaMemcpy") and "Async" not in n]
    [copies] = [f for f in _report(RTX4090).findings if f.rule == "sync-memcpy"]
    assert copies.evidence[0].value == len(memcpy)
    assert copies.evidence[1].value == round(sum(b - a for a, b in memcpy) / 1e6, 3)
    assert copies.gain.ns == pytest.approx(idle_after(sqlite_busy(path), memcpy))
    # The TensorRT run copies with cudaMemcpyAsync only: no synchronous-memcpy finding.
    assert not [n for n, _ in _sqlite_calls(corpus / TRT) if n.startswith("cudaMemcpy") and "Async" not in n]
    assert "sync-memcpy" not in [f.rule for f in _report(TRT).findings]


def test_pageable_async_copies_match_the_events_read_with_json(corpus: Path) -> None:
    events = _kineto_events(corpus / RESNET)
    # This 2021 trace writes the older category names ("Runtime", "Memcpy" for cuda_runtime, gpu_memcpy).
    async_ids = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "Runtime")
                 and "Async" in e["name"] and "correlation" in e.get("args", {})}
    pageable = [e for e in events if e.get("cat") in ("gpu_memcpy", "Memcpy") and "Pageable" in e["name"]
                and e["args"].get("correlation") in async_ids]
    [finding] = [f for f in _report(RESNET).findings if f.rule == "pageable-memcpy"]
    assert finding.evidence[0].value == len(pageable) > 0
    assert finding.gain.ns == pytest.approx(sum(e["dur"] * 1000 for e in pageable), rel=1e-6)
    # The RTX 4090 run copies pageable memory with plain cudaMemcpy: the synchronous rule's, not this one's; the
    # AlexNet run's pageable async copies take under 1% of its 12.9 s span (CALL_FLOOR): noise, not a finding.
    assert "pageable-memcpy" not in [f.rule for f in _report(RTX4090).findings]
    assert "pageable-memcpy" not in [f.rule for f in _report(ALEXNET).findings]


def test_runtime_calls_without_gpu_activity_name_the_missing_capture(corpus: Path, tmp_path: Path) -> None:
    events = [e for e in _kineto_events(corpus / ALEXNET)
              if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")]
    calls = sum(1 for e in events if e.get("cat") == "cuda_runtime")
    path = write_kineto(tmp_path / "no_gpu.json", events)
    report = build_report(load(path))
    [line] = [n for n in report.notes if n.startswith("GPU activity was not captured")]
    assert f"{calls} CUDA runtime calls" in line and "ProfilerActivity.CUDA" in line
    code, out, _ = cli_in_process("report", str(path))
    assert code == 0 and "no kernels in this trace: GPU activity was not captured" in out


def test_copies_by_kind_and_memory_match_sqlite(corpus: Path) -> None:
    """The RTX 4090 run's pageable copies, grouped here through the export's own enum tables."""
    with sqlite3.connect(corpus / RTX4090) as db:
        rows = db.execute("select o.label, s.label, d.label, count(*), sum(m.end - m.start), sum(m.bytes) "
                          "from CUPTI_ACTIVITY_KIND_MEMCPY m join ENUM_CUDA_MEMCPY_OPER o on o.id = m.copyKind "
                          "join ENUM_CUDA_MEM_KIND s on s.id = m.srcKind join ENUM_CUDA_MEM_KIND d "
                          "on d.id = m.dstKind group by 1, 2, 3").fetchall()
    expected = {(src.lower(), dst.lower()): (n, t, b) for _, src, dst, n, t, b in rows}
    by_kind = _report(RTX4090).timeline.memcpy["by_kind"]
    got = {(r["src_kind"], r["dst_kind"]): (r["count"], r["total_ns"], r["bytes"]) for r in by_kind}
    assert got == expected and ("pageable", "device") in got
    for r in by_kind:
        assert r["bandwidth_gbs"] == pytest.approx(r["bytes"] / r["total_ns"])
