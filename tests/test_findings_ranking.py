"""What leads a report, tested on real corpus files against a computation here with ``sqlite3`` (never iotrace's
parsers on the reference side): a blocking call is bounded by the GPU idle it leaves, not by the GPU work it waits for,
so a kernel that is the whole workload ranks above the sync that waits for it (issue 46, item 3).
"""

from __future__ import annotations

import sqlite3
from functools import cache
from pathlib import Path

import pytest

from iotrace.trace import load
from iotrace.trace.reports.records import Finding
from iotrace.trace.reports.report import Report, build_report
from tests.conftest import CORPUS, cli_in_process

GTX1650 = "nsys/gtx1650_windows_matmul_pageable_memcpy_nsys2025.3.sqlite"
CLOVERLEAF = "nsys/a100_sxm4_80gb_cloverleaf_nsys2024.5.sqlite"

SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent")


@cache
def _report(name: str) -> Report:
    return build_report(load(CORPUS / name), top=1000)


def _rule(name: str, rule: str) -> list[Finding]:
    return [f for f in _report(name).findings if f.rule == rule]


def _sqlite(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


def sqlite_busy(path: Path) -> list[tuple[int, int]]:
    """The export's kernels, copies and sets as disjoint sorted busy runs, read with sqlite3."""
    tables = {name for (name,) in _sqlite(path, "select name from sqlite_master where type = 'table'")}
    ops = sorted(op for table in ("KERNEL", "MEMCPY", "MEMSET") if f"CUPTI_ACTIVITY_KIND_{table}" in tables
                 for op in _sqlite(path, f"select start, end from CUPTI_ACTIVITY_KIND_{table}"))
    runs: list[list[int]] = []
    for start, end in ops:
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return [(a, b) for a, b in runs]


def _sync_calls(path: Path) -> list[tuple[int, int]]:
    """(start, end) of every synchronization call, names without CUPTI's _vNNNN suffix."""
    rows = _sqlite(path, "select s.value, r.start, r.end from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
                         "on s.id = r.nameId")
    return [(a, b) for name, a, b in rows if name.split("_v")[0] in SYNC_NAMES]


def idle_after(busy: list[tuple[int, int]], calls: list[tuple[int, int]]) -> int:
    """Per call: the GPU idle from the later of its start and the end of the GPU work before its return, to the next
    GPU operation, at most the call's length (none where the GPU is busy at its return or no work follows)."""
    total = 0
    for start, end in calls:
        before = [r for r in busy if r[0] <= end]
        after = [r for r in busy if r[0] > end]
        if not before or not after or before[-1][1] > end:
            continue
        gap_start = max(start, before[-1][1])
        total += max(0, min(after[0][0] - gap_start, end - start))
    return total


def test_the_kernel_not_the_sync_that_waits_for_it_leads_the_gtx1650_report(corpus: Path) -> None:
    """The GTX 1650 matmul: one 9.9 ms kernel is the workload; cudaDeviceSynchronize holds the host 10 ms waiting for
    it. Before, the sync led ("saves up to 10 ms (72% of span)") and the kernel came fifth, "gain not estimated"."""
    path = corpus / GTX1650
    [(kernel, duration)] = _sqlite(path, "select s.value, k.end - k.start from CUPTI_ACTIVITY_KIND_KERNEL k join "
                                         "StringIds s on s.id = k.demangledName")
    calls = _sync_calls(path)
    held = sum(b - a for a, b in calls)
    idle = idle_after(sqlite_busy(path), calls)
    assert (len(calls), duration, held, idle) == (2, 9_932_539, 10_037_337, 161_281)
    first = _report(GTX1650).findings[0]
    assert first.rule == "top-kernel" and first.kernel == kernel == "matrixMulKernel(float *, float *, float *, int)"
    assert first.gain.ns == pytest.approx(duration)
    [sync] = _rule(GTX1650, "sync-api")
    assert sync.gain.ns == pytest.approx(idle)  # the GPU idle it leaves, not the 10 ms of GPU work it waits for
    assert "held the host 10.037 ms in all and left the GPU idle 0.161 ms after them" in sync.text
    assert "the wait itself is GPU time the call cannot save" in sync.gain.reasoning
    code, out, _ = cli_in_process("report", str(path))
    top = out.split("Top findings", 1)[1]
    assert code == 0 and top.split("\n")[1].startswith("  1. · [timeline] The top kernel takes 100% of kernel time "
                                                       "(1 launch, 9.933 ms).")
    assert "saves up to 9.93 ms (71% of the 13.9 ms span)" in top
    assert "saves up to 10 ms" not in top  # the symptom no longer claims the cause's time


def test_a_sync_that_leaves_the_gpu_idle_stays_a_finding(corpus: Path) -> None:
    """CloverLeaf synchronises after every kernel: each sync returns to an idle GPU that waits for the host's next
    launch. That idle is what the finding claims, and it still fires."""
    path = corpus / CLOVERLEAF
    calls = _sync_calls(path)
    idle = idle_after(sqlite_busy(path), calls)
    [sync] = _rule(CLOVERLEAF, "sync-api")
    assert sync.evidence[0].value == len(calls) == 1312
    assert sync.gain.ns == pytest.approx(idle) and idle > 0.01 * sync.gain.of_ns  # >= 1% of the span: it fires
    assert sync.evidence[2].metric == "GPU idle they leave" and sync.evidence[2].value == round(idle / 1e6, 3)
    assert f"left the GPU idle {idle / 1e6:.3f} ms after them" in sync.text
