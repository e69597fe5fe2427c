"""Per-range rooflines: kernel time, FLOPs, bytes, % of attainable and occupancy per NVTX / record_function range.

Every expected value is read from the corpus file itself, independently of iotrace: the H200 nvFuser export with
sqlite3 (a kernel belongs to each push/pop range on its launching call's thread that was open when the call began),
the Kineto traces with json (the same join through the ``cuda_runtime`` call's correlation id; FLOPs from the
``aten::mm``/``addmm`` input shapes, 2·M·N·K (+ M·N bias), and from the CUPTI range profiler's counters). The range
nested in itself is a small trace written here in Kineto's schema (no corpus trace repeats a name inside itself).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from iotrace.cards import lookup
from iotrace.trace import load
from iotrace.trace.reports.range_roofline import NO_RANGE, range_rooflines
from iotrace.trace.reports.report import build_report
from tests.conftest import load_corpus, run_cli, write_kineto

H200 = "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"
V100 = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"
RANGE_PROFILER = "kineto/a100_pg509_cupti_range_profiler_flops_kineto.json.gz"


def _inclusive(ranges: list[tuple[str, Any, float, float]], kernels: list[tuple[Any, float, float]],
               ) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, int], set[int]]:
    """Per range name: the kernels launched inside any of its instances (same thread, call start within the range),
    those whose innermost range it is, its depths' minimum; and the kernels outside every range.

    ``ranges``: (name, thread, start, end); ``kernels``: (thread, call start, duration) by position."""
    by_thread: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    for name, thread, start, end in ranges:
        by_thread[thread].append((start, end, name))
    inside: dict[str, set[int]] = defaultdict(set)
    own: dict[str, set[int]] = defaultdict(set)
    outside: set[int] = set()
    for k, (thread, at, _) in enumerate(kernels):
        open_ = [(s, n) for s, e, n in by_thread.get(thread, []) if s <= at <= e]
        if not open_:
            outside.add(k)
        for _, name in open_:
            inside[name].add(k)
        if open_:
            own[max(open_)[1]].add(k)  # the innermost: the latest start among the ranges open at the call
    depth: dict[str, int] = {}
    for name, thread, start, end in ranges:
        enclosing = sum(1 for s, e, _ in by_thread[thread] if s <= start and end <= e and (s, e) != (start, end))
        depth[name] = min(depth.get(name, enclosing), enclosing)
    return inside, own, depth, outside


@functools.cache
def _h200(path: Path) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, int], set[int], list[float]]:
    """The H200 file's push/pop ranges and kernels joined by hand with sqlite3."""
    db = sqlite3.connect(path)
    (push_pop,) = db.execute("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxPushPopRange'").fetchone()
    ranges = [(name, tid, start, end) for name, tid, start, end in db.execute(
        "SELECT COALESCE(n.text, s.value), n.globalTid, n.start, n.end FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = ? AND n.end IS NOT NULL", (push_pop,))]
    kernels = list(db.execute("SELECT r.globalTid, r.start, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                              "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                              "ORDER BY k.start"))
    db.close()
    return (*_inclusive(ranges, kernels), [float(d) for _, _, d in kernels])


def _ns(durations: list[float], members: set[int]) -> float:
    return float(sum(durations[k] for k in members))


def test_h200_nvtx_ranges_match_an_independent_sqlite_join(corpus: Path) -> None:
    path = corpus / H200
    inside, own, depth, outside, durations = _h200(path)
    result = range_rooflines(load_corpus(path), lookup("h200-sxm"))
    assert result is not None
    rows = result.table.set_index("range")
    named = rows.drop(index=NO_RANGE)
    assert set(named.index) == set(inside) and len(inside) == 5 and len(durations) == 19  # names with kernels
    for name, members in inside.items():
        row = rows.loc[name]
        assert (row["launches"], row["kernel_ns"]) == (len(members), _ns(durations, members)), name
        assert row["self_ns"] == _ns(durations, own.get(name, set())), name
        assert row["depth"] == depth[name], name
    total = sum(durations)
    assert result.kernel_ns == total and rows.loc[NO_RANGE, "kernel_ns"] == _ns(durations, outside)
    assert rows.loc[NO_RANGE, "launches"] == len(outside) == 17
    assert result.in_ranges_ns + rows.loc[NO_RANGE, "kernel_ns"] == total  # the table sums to the trace
    assert rows.loc["KernelExecutor::runFusion", "share_pct"] == pytest.approx(
        100 * _ns(durations, inside["KernelExecutor::runFusion"]) / total)
    # No counters, no shapes, no plugin: FLOPs and bytes are missing with the reason, never 0.
    assert rows["flops"].isna().all() and rows["pct_of_attainable"].isna().all()
    assert all(s.startswith("none: no hardware counters") for s in rows["flops_source"])
    # Occupancy: the file has launch resources only, so theoretical from them, labelled.
    assert set(rows["occupancy_basis"]) == {"theoretical (iotrace calculator, launch resources)"}


def test_plugin_cost_model_places_an_nvtx_range_on_the_h200_roof(corpus: Path) -> None:
    """--plugin gemm --shape: the nvFuser kernel's range gets the plugin's FLOPs and bytes, judged by identity 4."""
    path = corpus / H200
    inside, _, _, _, durations = _h200(path)
    report = build_report(load(path), kernel="nvfuser", plugin="gemm", shape={"M": 1024, "N": 1024, "K": 1024,
                                                                             "bias": 0}, dtype="fp16")
    rows = report.range_rooflines.table.set_index("range")
    row = rows.loc["ExecutorRunFusion::cuLaunchKernel"]
    kernel_ns = _ns(durations, inside["ExecutorRunFusion::cuLaunchKernel"])
    flops, nbytes = 2 * 1024**3, 2 * 3 * 1024 * 1024  # 2·M·N·K; A, B and C of 2-byte elements
    assert (row["flops"], row["bytes"], row["flops_source"]) == (flops, nbytes, "plugin cost model (gemm)")
    card = lookup("h200-sxm")
    attainable = min(card.peak_flop_per_s("fp16_tensor"), flops / nbytes * card.bandwidth_bytes_per_s)
    assert row["achieved_flop_per_s"] == pytest.approx(flops / (kernel_ns / 1e9))
    assert row["pct_of_attainable"] == pytest.approx(100 * flops / (kernel_ns / 1e9) / attainable)
    assert row["flops_covers_pct"] == 100.0
    # The enclosing range also holds a kernel the plugin does not cover: the FLOPs cover only part of its time.
    outer = rows.loc["KernelExecutor::runFusion"]
    assert outer["flops"] == flops
    assert outer["flops_covers_pct"] == pytest.approx(100 * kernel_ns / _ns(durations, inside[outer.name]))


@functools.cache
def _v100(path: Path) -> dict[str, Any]:
    """The V100 trace joined by hand with json: per range name its kernels, and each kernel's gemm FLOPs."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launch = [calls.get(k["args"]["correlation"]) for k in kernels]
    rows = [((c["pid"], c["tid"]) if c else None, c["ts"] if c else None, k["dur"] * 1000.0)
            for k, c in zip(kernels, launch, strict=True)]
    ranges = [(e["name"], (e["pid"], e["tid"]), e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "user_annotation"]
    inside, own, depth, outside = _inclusive(ranges, rows)
    # Each gemm op's FLOPs 2·M·N·K (+ M·N bias), split over the kernels launched inside it by their time.
    ops: dict[Any, list[tuple[float, float, float]]] = defaultdict(list)
    for e in events:
        dims, types = e.get("args", {}).get("Input Dims"), e.get("args", {}).get("Input type")
        if e.get("cat") != "cpu_op" or not types or types[0] != "float":
            continue
        if e["name"] == "aten::mm":
            (m, k), (_, n) = dims[:2]
            flops, nbytes = 2 * m * n * k, 4 * (m * k + k * n + m * n)  # fp32: 4 bytes per element of A, B, C
        elif e["name"] == "aten::addmm":
            (m, k), (_, n) = dims[1:3]
            flops, nbytes = 2 * m * n * k + m * n, 4 * (m * k + k * n + m * n + n)  # and the bias vector
        else:
            continue
        ops[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], flops, nbytes))
    for listed in ops.values():
        listed.sort()
    members: dict[tuple, list[int]] = defaultdict(list)
    for i, (thread, at, _) in enumerate(rows):
        listed = ops.get(thread, [])
        j = bisect.bisect_right(listed, (at, float("inf"), 0, 0)) - 1
        if j >= 0 and listed[j][0] <= at <= listed[j][1]:
            members[(thread, *listed[j])].append(i)
    # Identity 4 on the V100's fp32 peak and DRAM bandwidth: each op's fastest time, split like its FLOPs.
    card = lookup("v100-sxm2-16gb")
    peak, bandwidth = card.peak_flop_per_s("fp32"), card.bandwidth_bytes_per_s
    flops_of, fastest_of = {}, {}
    for (_, _, _, flops, nbytes), kernel_ids in members.items():
        time = sum(rows[i][2] for i in kernel_ids)
        fastest = flops / min(peak, flops / nbytes * bandwidth)
        flops_of.update({i: flops * rows[i][2] / time for i in kernel_ids})
        fastest_of.update({i: fastest * rows[i][2] / time for i in kernel_ids})
    return {"inside": inside, "own": own, "depth": depth, "outside": outside,
            "durations": [d for _, _, d in rows], "flops": flops_of, "fastest_s": fastest_of}


def test_kineto_record_function_ranges_and_op_flops_match_the_json(corpus: Path) -> None:
    path = corpus / V100
    hand = _v100(path)
    durations, flops_of = hand["durations"], hand["flops"]
    result = range_rooflines(load(path), lookup("v100-sxm2-16gb"), top=100)
    rows = result.table.set_index("range")
    assert set(rows.index) - {NO_RANGE} == set(hand["inside"]) and result.ranges_total == len(hand["inside"]) == 32
    for name, members in hand["inside"].items():
        row = rows.loc[name]
        assert (row["launches"], row["kernel_ns"]) == (len(members), pytest.approx(_ns(durations, members))), name
        assert row["self_ns"] == pytest.approx(_ns(durations, hand["own"].get(name, set()))), name
        assert row["depth"] == hand["depth"][name], name
        costed = members & flops_of.keys()
        if costed:
            assert row["flops"] == pytest.approx(sum(flops_of[k] for k in costed)), name
            assert row["flops_covers_pct"] == pytest.approx(100 * _ns(durations, costed) / _ns(durations, members))
            assert row["flops_source"] == "op cost model (gemm)"
            assert row["pct_of_attainable"] == pytest.approx(
                100 * sum(hand["fastest_s"][k] for k in costed) / (_ns(durations, costed) / 1e9)), name
        else:
            assert row["flops"] != row["flops"] and row["flops_source"].startswith("none: "), name  # NaN, a reason
    forward = rows.loc["## forward ##"]
    assert forward["calls"] == 6 and forward["paths"] == 6  # once per profiler step
    assert forward["path"].startswith("ProfilerStep#") and forward["path"].endswith(" > ## forward ##")
    assert forward["occupancy_basis"] == "estimated by CUPTI"
    assert rows.loc[NO_RANGE, "kernel_ns"] == pytest.approx(_ns(durations, hand["outside"]))
    assert result.in_ranges_ns + rows.loc[NO_RANGE, "kernel_ns"] == pytest.approx(sum(durations))


def test_kineto_top_cut_is_stated_and_keeps_the_no_range_row(corpus: Path) -> None:
    result = range_rooflines(load_corpus(corpus / V100), lookup("v100-sxm2-16gb"), top=3)
    assert list(result.table["range"])[-1] == NO_RANGE and result.shown == 3
    assert "showing 3 of 32 ranges by kernel time; --top 32 shows all" in result.title()
    shown = result.table["kernel_ns"].iloc[:3].tolist()
    assert shown == sorted(shown, reverse=True) and shown[0] == pytest.approx(
        _ns(_v100(corpus / V100)["durations"], _v100(corpus / V100)["inside"]["## forward ##"]))


def test_range_profiler_counter_flops_are_read_and_stated_unjoined(corpus: Path) -> None:
    """The CUPTI range profiler's kernels carry FLOP counters but no launching call: they stay in (no range), with
    FLOPs add + mul + 2·fma summed over fp64, fp32 and fp16, and no kernel time (the span is the replay's)."""
    path = corpus / RANGE_PROFILER
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    profiled = [e["args"] for e in events if e.get("cat") == "cuda_profiler_range"]
    flops = sum(a.get(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum", 0) * (2 if op == "fma" else 1)
                for a in profiled for p in "dfh" for op in ("add", "mul", "fma"))
    result = range_rooflines(load(path), lookup("a100-sxm4-40gb"))
    (row,) = result.table.to_dict("records")
    assert (row["range"], row["launches"], row["flops"], row["flops_source"]) == (NO_RANGE, len(profiled), flops,
                                                                                   "counters")
    assert row["kernel_ns"] is None and row["achieved_flop_per_s"] is None
    assert any("correlation id" in note for note in result.notes)


def _nested_trace(tmp_path: Path) -> Path:
    """Range "block" inside range "block" on one thread, each launching one kernel; one kernel outside both."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "block", "pid": 7, "tid": 7, "ts": 100, "dur": 100,
               "args": {"External id": 1}},
              {"ph": "X", "cat": "user_annotation", "name": "block", "pid": 7, "tid": 7, "ts": 120, "dur": 30,
               "args": {"External id": 2}}]
    for i, at in enumerate((110, 130, 300)):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": at,
                       "dur": 3, "args": {"correlation": 50 + i}})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": at + 10,
                       "dur": 10 * (i + 1), "args": {"correlation": 50 + i, "device": 0, "stream": 7,
                                                     "est. achieved occupancy %": 25 * (i + 1)}})
    return write_kineto(tmp_path / "nested.json", events)


def test_a_range_nested_in_itself_counts_each_kernel_once(tmp_path: Path) -> None:
    result = range_rooflines(load(_nested_trace(tmp_path)), lookup("h100"))
    rows = result.table.set_index("range")
    block = rows.loc["block"]
    assert (block["launches"], block["kernel_ns"], block["self_ns"]) == (2, 30_000.0, 30_000.0)
    assert (block["calls"], block["depth"], block["depth_max"], block["paths"]) == (2, 0, 1, 2)
    assert block["occupancy_pct"] == pytest.approx((25 * 10 + 50 * 20) / 30)  # time-weighted
    assert rows.loc[NO_RANGE, "kernel_ns"] == 30_000.0 and rows.loc[NO_RANGE, "share_pct"] == 50.0


def test_cli_json_and_every_renderer_carry_the_ranges(corpus: Path, tmp_path: Path) -> None:
    path = corpus / H200
    inside, _, _, _, durations = _h200(path)
    done = run_cli("report", str(path), "--json")
    assert done.returncode == 0, done.stderr
    ranges = json.loads(done.stdout)["ranges"]
    assert ranges["inclusive"] is True and "inclusive" in ranges["note"]
    by_name = {r["range"]: r for r in ranges["rows"]}
    for name, members in inside.items():
        assert by_name[name]["kernel_ns"] == _ns(durations, members)
        assert by_name[name]["flops"] is None and by_name[name]["flops_source"].startswith("none: ")
    assert by_name[NO_RANGE]["depth"] is None
    from iotrace.trace.render.html import report_html
    from iotrace.trace.render.markdown import report_markdown

    report = build_report(load(path))
    assert "## Range rooflines (5 ranges by kernel time; inclusive)" in report_markdown(report)
    assert "<h2>Range rooflines (5 ranges by kernel time; inclusive)</h2>" in report_html(report)
    done = run_cli("report", str(path))
    assert done.returncode == 0 and "Range rooflines (5 ranges by kernel time; inclusive)" in done.stdout
    assert "ExecutorRunFusion::cuLaunchKernel" in done.stdout
