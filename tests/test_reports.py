"""Reports on the real corpus (../shared/corpus): every asserted value is stored in the file itself.

Expected values are read from the reports with NVIDIA's ``ncu_report`` module directly (not through iotrace's
loader), from the CSV with ``csv``, or computed in the test from the raw tables; the classifications are those the
reports issue names (T4 matrix add, A10G SGEMM variants, GTX 1660 SUPER dot product, RTX 4050 coalescing).
"""

from __future__ import annotations

import csv
import io
import math
import re
from functools import cache
from pathlib import Path

import pytest

from iotrace.errors import IotraceError
from iotrace.plugins.spec import Cost
from iotrace.trace import load
from iotrace.trace.findings import KernelFacts
from iotrace.trace.findings.registry import rule
from iotrace.trace.reports.diff import diff_reports
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.origin import classify
from iotrace.trace.reports.plugin_costs import KernelModel
from iotrace.trace.reports.report import build_report
from iotrace.trace.reports.roofline import roofline_point
from iotrace.trace.reports.stall_reasons import canonical, reasons
from iotrace.trace.tables import build

from .conftest import corpus_bench_results, corpus_exports, load_corpus

ncu_report = pytest.importorskip("ncu_report", reason="ncu-report is not installed: pip install 'iotrace[nsight]'")

T4 = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"
A10G = "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep"
A10G_CSV = "ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv"
GTX = "ncu-rep/gtx1660super_dot_product_full_ncu2024.1.ncu-rep"
UNCOALESCED = "ncu-rep/rtx4050laptop_rgb_uncoalesced_memchart_ncu2023.3.ncu-rep"
COALESCED = "ncu-rep/rtx4050laptop_rgb_coalesced_memchart_ncu2023.3.ncu-rep"
NSYS = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"
KINETO = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"


@cache
def _raw(path: str) -> list[dict[str, float]]:
    """Every numeric metric of every profiled launch, read with ncu_report (independently of iotrace)."""
    context = ncu_report.load_report(path)
    out = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            values = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric.kind() != ncu_report.IMetric.ValueKind_STRING:
                    values[name] = metric.as_double()
            out.append(values)
    return out


@cache
def _report(corpus: Path, name: str, **options: object):
    return build_report(load_corpus(corpus / name), top=1000, each_launch=True, **options)  # compared launch by launch


def _ncu_reps(corpus: Path) -> list[Path]:
    return sorted(p for p in (corpus / "ncu-rep").iterdir() if p.suffix in (".ncu-rep", ".nsight-cuprof-report"))


def _not_profiled(stored: dict[str, float]) -> bool:
    """Nsight Compute recorded no launch__* metric and no duration for the launch: it was not profiled."""
    return not any(name.startswith("launch__") for name in stored) and \
        not math.isfinite(stored.get("gpu__time_duration.sum", math.nan))


def test_theoretical_occupancy_equals_ncus_stored_value_for_every_ncu_rep_kernel(corpus: Path) -> None:
    """Every profiled launch against ncu's stored value; a launch ncu did not profile (the RTX 4070 file's #1) has none
    to compare, and iotrace says it was not profiled and gives it no occupancy."""
    compared, failed = 0, []
    for path in _ncu_reps(corpus):
        raw = _raw(str(path))
        report = _report(corpus, str(path.relative_to(corpus)))
        assert len(report.kernels) == len(raw), path.name
        for kernel, stored in zip(report.kernels, raw, strict=True):
            if _not_profiled(stored):
                assert not kernel.profiled and kernel.occupancy is None, f"{path.name} #{kernel.kernel_id}"
                assert kernel.to_dict()["occupancy"]["theoretical_pct"] is None
                failed.append((path.name, kernel.kernel_id))
                continue
            assert kernel.profiled, f"{path.name} #{kernel.kernel_id}"
            occ = kernel.occupancy
            assert occ is not None and occ.theoretical_pct is not None, f"{path.name} #{kernel.kernel_id}"
            expected = stored["sm__maximum_warps_per_active_cycle_pct"]
            assert occ.theoretical_pct == pytest.approx(expected, abs=1e-9), f"{path.name} #{kernel.kernel_id}"
            assert occ.theoretical_pct_file == pytest.approx(expected, abs=1e-9) and occ.agrees
            achieved = stored.get("sm__warps_active.avg.pct_of_peak_sustained_active")
            assert occ.achieved_pct == (None if achieved is None else pytest.approx(achieved))
            # The limiter is every resource whose block limit equals the active blocks ncu stores.
            blocks = stored["sm__maximum_warps_avg_per_active_cycle"] / occ.result.warps_per_block
            assert occ.result.active_blocks_per_sm == blocks
            compared += 1
    assert compared >= 30
    assert failed == [("rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep", 1)]


_COUNTER = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_SAMPLED = re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$")


def _order(stored: dict[str, float], pattern: re.Pattern[str]) -> list[str]:
    pairs = [(canonical(m.group(1)), v) for n, v in stored.items() if (m := pattern.match(n))
             and not n.endswith("_not_issued")]
    return [name for name, value in sorted(pairs, key=lambda p: (-p[1], p[0])) if value > 0]


def test_stall_ranking_equals_the_order_of_ncus_own_stall_metrics(corpus: Path) -> None:
    checked = 0
    for path in _ncu_reps(corpus):
        report = _report(corpus, str(path.relative_to(corpus)))
        for kernel, stored in zip(report.kernels, _raw(str(path)), strict=True):
            for family, pattern in (("counters", _COUNTER), ("sampling", _SAMPLED)):
                expected = _order(stored, pattern)
                if not expected:
                    continue
                ranked = kernel.stalls[kernel.stalls["family"] == family].sort_values("rank")
                assert [r for r, v in zip(ranked["reason"], ranked["value"], strict=True) if v > 0] == expected
                total = sum(v for n, v in stored.items() if pattern.match(n) and not n.endswith("_not_issued"))
                top = ranked.iloc[0]
                assert top["share"] == pytest.approx(top["value"] / total)
                checked += 1
    assert checked >= 10  # T4, GTX (2), V100 (5), each with both families where collected
    # PC sampling: the family's sum is ncu's own sample count.
    stored = _raw(str(corpus / T4))[0]
    assert sum(v for n, v in stored.items() if _SAMPLED.match(n) and not n.endswith("_not_issued")) == \
        stored["smsp__pcsamp_sample_count"]


def test_every_stall_reason_in_the_corpus_has_a_text(corpus: Path) -> None:
    seen = set()
    for path in _ncu_reps(corpus):
        for stored in _raw(str(path)):
            for name in stored:
                for pattern in (_COUNTER, _SAMPLED):
                    m = pattern.match(name)
                    if m and not name.endswith("_not_issued"):
                        seen.add(canonical(m.group(1)))
    assert seen and seen <= set(reasons()), seen - set(reasons())
    assert canonical("no_instructions") == "no_instruction"
    assert {"gmma", "warpgroup_arrive"} <= set(reasons())  # Hopper's reasons, absent from this corpus


def test_t4_matrix_add_is_memory_bound_with_long_scoreboard_dominant(corpus: Path) -> None:
    report = _report(corpus, T4)
    (kernel,) = report.kernels
    stored = _raw(str(corpus / T4))[0]
    roof = kernel.roofline
    assert roof is not None and roof.basis == "measured"
    assert roof.bound == "memory"
    # 1000 × 1000 float additions: the file's fadd rate × elapsed cycles.
    assert roof.flops == pytest.approx(1e6, rel=1e-6)
    assert roof.dram_bytes == pytest.approx(stored["dram__bytes_read.sum"] + stored["dram__bytes_write.sum"],
                                            rel=1e-6)
    # % of the DRAM roof is ncu's own DRAM throughput (both: bytes per second over the file's peak).
    assert roof.pct_of_attainable == pytest.approx(stored["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"],
                                                   abs=0.1)
    assert roof.level("dram").ceiling_source.startswith("file: dram__bytes.sum.peak_sustained")
    assert roof.level("l2").bytes == stored["lts__t_sectors.sum"] * 32
    lsu = [f"l1tex__t_sectors_pipe_lsu_mem_{space}_op_{op}.sum" for space, ops in
           (("global", ("ld", "st", "atom", "red")), ("local", ("ld", "st"))) for op in ops]
    assert roof.level("l1").bytes == 32 * sum(stored[name] for name in lsu)
    assert [lv.level for lv in roof.levels] == ["dram", "l2", "l1"]
    shares = kernel.stall_shares()
    assert next(iter(shares)) == "long_scoreboard" and shares["long_scoreboard"] > 0.5
    # At 88% of the memory roof the long-scoreboard stalls are the roof's symptom, not a latency problem: the one
    # finding is the memory bound with the roof's advice (fewer bytes), never "keep more loads in flight".
    memory = stored["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]
    assert memory >= 80
    top = report.findings[0]
    assert top.rule == "bound" and top.text.startswith(f"Memory bound: memory throughput {memory:.1f}% of peak")
    assert "Move fewer bytes" in top.try_next and "in flight" not in top.try_next
    assert top.gain.fraction == pytest.approx(1 - memory / 100)
    assert top.gain.ns == pytest.approx((1 - memory / 100) * stored["gpu__time_duration.sum"])
    assert not any(f.rule in ("dominant-stall", "occupancy-limit") for f in kernel.findings)


def test_a10g_sgemm_variants_rank_by_dram_bytes_and_duration_as_the_file_says(corpus: Path) -> None:
    report = _report(corpus, A10G)
    raw = _raw(str(corpus / A10G))
    file_bytes = [s["dram__bytes.sum.per_second"] * s["gpu__time_duration.sum"] / 1e9 for s in raw]
    file_time = [s["gpu__time_duration.sum"] for s in raw]
    ours_bytes = [k.roofline.dram_bytes for k in report.kernels]
    ours_time = [k.duration_ns for k in report.kernels]
    assert ours_bytes == pytest.approx(file_bytes, rel=1e-9) and ours_time == file_time

    def rank(values: list[float]) -> list[int]:
        return sorted(range(len(values)), key=lambda i: -values[i])

    assert rank(ours_bytes) == rank(file_bytes) and rank(ours_time) == rank(file_time)
    names = [re.match(r"void (\w+)", k.name).group(1) for k in report.kernels]
    assert [names[i] for i in rank(ours_time)] == ["one_blocktiling", "two_blocktiling", "vectorized_blocktiling",
                                                    "warptiling"]
    # 2·M·N·K FLOPs with M = N = K = 1024, from the file's FFMA rates.
    for k in report.kernels:
        assert k.roofline.flops == pytest.approx(2 * 1024**3, rel=1e-3)

    with (corpus / A10G_CSV).open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle)]
    by_id: dict[str, dict[str, float]] = {}
    for r in rows:
        by_id.setdefault(r["ID"], {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
    csv_report = _report(corpus, A10G_CSV, card="a10g")
    assert len(csv_report.kernels) == len(by_id) == 9
    for k, stored in zip(csv_report.kernels, by_id.values(), strict=True):
        assert k.roofline.dram_bytes == stored["dram__bytes.sum"]
        assert k.roofline.flops == (stored["sm__sass_thread_inst_executed_op_fadd_pred_on.sum"]
                                    + stored["sm__sass_thread_inst_executed_op_fmul_pred_on.sum"]
                                    + 2 * stored["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"])
        assert k.roofline.peak_source.startswith("card a10g")  # a CSV without peak metrics: the card's ceilings
    csv_bytes = [k.roofline.dram_bytes for k in csv_report.kernels]
    assert rank(csv_bytes) == rank([s["dram__bytes.sum"] for s in by_id.values()])


def test_gtx1660_naive_dot_product_shows_drain_then_long_scoreboard(corpus: Path) -> None:
    report = _report(corpus, GTX)
    naive = next(k for k in report.kernels if k.name.startswith("dot_prod_naive"))
    assert list(naive.stall_shares())[:2] == ["drain", "long_scoreboard"]
    sampled = naive.stalls[naive.stalls["family"] == "sampling"].sort_values("rank")
    assert list(sampled["reason"][:2]) == ["drain", "long_scoreboard"]
    (stall,) = [f for f in naive.findings if f.report == "warp stalls"]
    assert stall.text.startswith("Drain dominates") and "Long scoreboard" in stall.text
    assert "atomic" in stall.try_next  # drain at the end of the kernel: the per-thread atomicAdd
    tuned = next(k for k in report.kernels if k.name.startswith("dot_prod("))
    assert next(iter(tuned.stall_shares())) != "drain"


def test_diff_of_rtx4050_uncoalesced_and_coalesced_shows_the_memory_traffic_change(corpus: Path) -> None:
    diff = diff_reports(_report(corpus, UNCOALESCED), _report(corpus, COALESCED))
    (row,) = diff.kernels.to_dict("records")
    before, after = _raw(str(corpus / UNCOALESCED))[0], _raw(str(corpus / COALESCED))[0]
    assert row["match"] == "only kernel left on each side"
    assert row["l2_bytes_before"] == before["lts__t_sectors.sum"] * 32
    assert row["l2_bytes_after"] == after["lts__t_sectors.sum"] * 32
    assert row["l2_bytes_ratio"] == pytest.approx(after["lts__t_sectors.sum"] / before["lts__t_sectors.sum"])
    assert row["l1_to_l2_write_bytes_before"] == before["l1tex__m_l1tex2xbar_write_bytes.sum"] == 2_356_480
    assert row["l1_to_l2_write_bytes_after"] == after["l1tex__m_l1tex2xbar_write_bytes.sum"] == 786_432
    assert row["dram_bytes_ratio"] == pytest.approx(1.0, abs=0.01)  # same data read either way
    assert (row["duration_ns_before"], row["duration_ns_after"]) == (before["gpu__time_duration.sum"],
                                                                     after["gpu__time_duration.sum"])
    texts = [f.text for f in diff.findings]
    assert any(t.startswith("L2 bytes changed 0.50×") for t in texts)
    assert any(t.startswith("L1→L2 write bytes changed 0.33×") for t in texts)


def test_missing_counters_are_not_available_lines_not_zeros(corpus: Path) -> None:
    report = _report(corpus, COALESCED)  # --section MemoryWorkloadAnalysis_Chart only: no stalls, no FLOPs
    lines = [u["line"] for u in report.unavailable]
    assert ("warp stalls not available: needs metric smsp__average_warps_issue_stalled_*_per_issue_active.ratio "
            "(collect with `ncu --section WarpStateStats`)") in [line.split(";")[0] for line in lines]
    assert any(line.startswith("roofline FLOPs not available: needs metric smsp__sass_thread_inst_executed_op_"
                               "ffma_pred_on.sum (collect with `ncu --section SpeedOfLight_RooflineChart`)")
               for line in lines)
    data = report.kernels[0].to_dict()
    assert data["stalls"] == {} and data["roofline"]["flops"] is None and data["roofline"]["intensity"] is None
    assert data["occupancy"]["achieved_pct"] is None  # not collected: None, never 0

    kineto = _report(corpus, KINETO)
    assert all(k.roofline is None for k in kineto.kernels)
    assert any(u["line"].startswith("roofline not available: needs metric dram__bytes.sum (collect with "
                                    "`ncu --section SpeedOfLight_RooflineChart`)") for u in kineto.unavailable)


def _tables(name: str, **kernel: object):
    row = {"id": 0, "name": name, "start_ns": 1_000, "end_ns": 101_000, "duration_ns": 100_000.0, "grid_x": 128,
           "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1, "registers_per_thread": 64,
           "smem_bytes": 16384, **kernel}
    return build(Path("synthetic.json"), kernels=[row], devices=[{"device": 0, "name": "NVIDIA H100 80GB HBM3",
                                                                   "cc": "9.0", "card": "h100"}],
                 meta={"format": "kineto-json", "tool": "test"})


def test_a_kernel_with_no_counters_is_placed_by_its_plugin_model_and_labelled_modelled() -> None:
    tables = _tables("gemm_kernel", nvtx_path="step > iotrace/gemm > config BLOCK_M=128")
    report = build_report(tables, shape={"M": 4096, "N": 4096, "K": 4096, "bias": 0}, dtype="fp16")
    (kernel,) = report.kernels
    assert kernel.plugin == "gemm"
    roof = kernel.roofline
    assert roof is not None and roof.basis == "modelled"
    assert roof.flops == 2 * 4096**3
    assert roof.achieved_flop_per_s == pytest.approx(2 * 4096**3 / 100e-6)
    assert roof.peak_source.startswith("card h100") and roof.bound in ("memory", "compute", "latency")
    assert all(f.basis == "modelled" for f in kernel.findings if f.report == "roofline")
    # Occupancy from the launch resources alone (H100: 64 registers × 256 threads → 4 blocks of 8 warps).
    assert kernel.occupancy.theoretical_pct == 50.0 and kernel.occupancy.limiters == ("registers",)
    assert "carveout assumed" in kernel.occupancy.assumptions


def test_counters_beside_a_cost_model_say_how_many_times_the_bytes_the_algorithm_needs(corpus: Path) -> None:
    tables = load_corpus(corpus / A10G)
    view = MetricView(tables.metrics)
    # SGEMM with M = N = K = 1024 in fp32: 2·M·N·K FLOPs, A, B read and C written once, 4 bytes each.
    cost = Cost(2.0 * 1024**3, 3 * 1024 * 1024 * 4.0, "fp32", "2MNK; (MK + KN + MN)·4 bytes")
    model = KernelModel("sgemm", {"M": 1024, "N": 1024, "K": 1024}, "fp32", cost)
    kernel = tables.kernels.iloc[0]
    point, _ = roofline_point(view, 0, kernel["name"], kernel["duration_ns"], None, model=model)
    stored = _raw(str(corpus / A10G))[0]
    measured = stored["dram__bytes.sum.per_second"] * stored["gpu__time_duration.sum"] / 1e9
    assert point.model.dram_ratio == pytest.approx(measured / cost.bytes)
    facts = KernelFacts(0, kernel["name"], 1, (0,), True, (None,) * 3, (None,) * 3, None, None,
                        classify(kernel["name"]), roofline=point)
    (finding,) = rule("model-excess").check(facts)
    assert finding.text == f"DRAM bytes are {measured / cost.bytes:.1f}× what the algorithm needs (sgemm cost model)."
    assert point.model.flops_ratio == pytest.approx(1.0, rel=1e-3)


def test_ceilings_come_from_the_file_or_the_card_and_say_which(corpus: Path) -> None:
    tables = load_corpus(corpus / T4)
    by_file = build_report(tables, ceilings="file").kernels[0].roofline
    by_card = build_report(tables, ceilings="card").kernels[0].roofline
    assert by_file.peak_source.startswith("file: 2 × sm__sass_thread_inst_executed_op_ffma_pred_on")
    assert by_card.peak_source.startswith("card t4: fp32 peak")
    assert by_card.level("dram").ceiling_bytes_per_s == 320e9  # T4 datasheet: 320 GB/s
    stored = _raw(str(corpus / T4))[0]
    assert by_file.level("dram").ceiling_bytes_per_s == pytest.approx(
        stored["dram__bytes.sum.peak_sustained"] * stored["dram__cycles_elapsed.avg.per_second"])


def test_timeline_of_an_nsys_trace_matches_its_tables(corpus: Path) -> None:
    tables = load_corpus(corpus / NSYS)
    report = build_report(tables)
    line = report.timeline
    assert line is not None
    top = line.top_kernels
    assert top.iloc[0]["total_ns"] == tables.kernels.groupby("name")["duration_ns"].sum().max()
    # Idle time recomputed here: the span minus the union of kernel and copy intervals.
    spans = sorted([(int(s), int(e)) for s, e in zip(tables.kernels["start_ns"], tables.kernels["end_ns"],
                                                     strict=True)]
                   + [(int(s), int(e)) for s, e in zip(tables.transfers["start_ns"], tables.transfers["end_ns"],
                                                       strict=True)])
    busy, end = 0, spans[0][0]
    for s, e in spans:
        if e > end:
            busy += e - max(s, end)
            end = e
    (idle,) = line.idle.to_dict("records")
    assert idle["span_ns"] == max(e for _, e in spans) - spans[0][0]
    assert idle["busy_ns"] == busy and idle["idle_ns"] == idle["span_ns"] - busy
    ranges = tables.ranges.groupby("name")["duration_ns"].sum()
    for row in line.ranges.to_dict("records"):
        assert row["total_ns"] == ranges[row["name"]]
    copy_ns = tables.transfers["duration_ns"].sum()
    assert line.memcpy["share"] == pytest.approx(copy_ns / (copy_ns + tables.kernels["duration_ns"].sum()))
    # Launch latency: kernel start minus the start of the runtime call with its correlation id, from the file.
    import sqlite3

    with sqlite3.connect(corpus / NSYS) as db:
        gaps = sorted(k - r for k, r in db.execute(
            "SELECT k.start, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId"))
    assert line.launch_latency["count"] == len(gaps) == len(tables.kernels)
    assert line.launch_latency["max"] == gaps[-1] and line.launch_latency["median"] == pytest.approx(
        (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2]) / 2 if len(gaps) % 2 == 0 else gaps[len(gaps) // 2])
    assert not any(u["report"] == "launch latency" for u in report.unavailable)


def test_kernel_filter_and_bad_regex(corpus: Path) -> None:
    tables = load_corpus(corpus / A10G)
    assert [k.name.split("<")[0] for k in build_report(tables, kernel="warptiling").kernels] == ["void warptiling"]
    with pytest.raises(IotraceError, match="matches none"):
        build_report(tables, kernel="no_such_kernel")
    with pytest.raises(IotraceError, match="not a regular expression"):
        build_report(tables, kernel="(")


def test_json_has_the_keys_the_issue_lists(corpus: Path) -> None:
    data = _report(corpus, T4).to_dict()
    (kernel,) = data["kernels"]
    assert {"name", "grid", "block", "registers", "duration_ns", "occupancy", "stalls", "roofline",
            "findings"} <= set(kernel)
    assert {"theoretical_pct", "theoretical_pct_ncu", "achieved_pct", "limiters"} <= set(kernel["occupancy"])
    assert {"flops", "dram_bytes", "intensity", "bound", "pct_of_attainable"} <= set(kernel["roofline"])
    assert kernel["grid"] == [63, 63, 1] and kernel["block"] == [16, 16, 1] and kernel["registers"] == 16
    assert list(kernel["stalls"].values()) == sorted(kernel["stalls"].values(), reverse=True)
    assert {"text", "evidence", "try", "basis"} <= set(kernel["findings"][0])


def test_an_empty_selection_of_counters_gives_no_zero_stalls() -> None:
    report = build_report(_tables("plain"))
    assert report.kernels[0].stall_shares() == {}
    assert report.kernels[0].to_dict()["roofline"]["flops"] is None


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_every_corpus_file_renders_in_every_text_format(corpus: Path) -> None:
    import json

    from rich.console import Console

    from iotrace.trace.render.html import report_html
    from iotrace.trace.render.jsonout import dumps
    from iotrace.trace.render.markdown import report_markdown
    from iotrace.trace.render.terminal import print_report

    def refuse(constant: str) -> None:
        raise AssertionError(f"JSON holds {constant}")

    for path in corpus_exports(corpus):
        report = build_report(load_corpus(path), top=20)
        console = Console(width=100, record=True, color_system=None, file=io.StringIO())
        print_report(console, report)
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= 100, path.name
        assert report_markdown(report).startswith("# iotrace report")
        assert report_html(report).endswith("</html>\n")
        data = json.loads(dumps(report.to_dict()), parse_constant=refuse)
        assert len(data["kernels"]) == len(report.kernels), path.name
        # An nsys stats CSV holds ranges only; a rocprof v1 copy or HIP API --stats CSV only totals, said in a note.
        assert report.kernels or (report.timeline is not None and len(report.timeline.ranges) > 0) or any(
            "totals" in note or "summary rows" in note for note in report.notes), path.name
        # A missing value is null or absent, never a zero standing in for "not collected".
        for kernel in data["kernels"]:
            if kernel["roofline"]["flops"] is None:
                # A bound without FLOPs comes from DRAM bytes, or from the file's speed-of-light throughputs.
                assert kernel["roofline"]["bound"] is None or kernel["roofline"]["dram_bytes"] is not None \
                    or set(kernel["roofline"]["sol"]) == {"sm_throughput_pct", "memory_throughput_pct"}


def test_corpus_bench_results_are_refused_before_any_report(corpus: Path) -> None:
    """The bench-outputs/ files (LLM benchmark results) get no trace report: load() refuses each in one line that
    names it and the command that reads it, never as a damaged trace."""
    from iotrace.trace import TraceFormatError

    refused = corpus_bench_results(corpus)
    assert len(refused) == 5 and not set(refused) & set(corpus_exports(corpus))
    for path in refused:
        with pytest.raises(TraceFormatError) as caught:
            build_report(load(path), top=20)
        message = str(caught.value)
        assert message.startswith(f"{path}: is ") and "\n" not in message, message
        assert "a benchmark result and not a profiler trace" in message and "iotrace bench import FILE" in message


def test_a_plugin_kernels_stall_finding_names_the_plugins_tuning_knobs() -> None:
    tables = build(Path("plugin.json"), kernels=[{"id": 0, "name": "_gemm_kernel", "duration_ns": 1e5,
                                                  "nvtx_path": "iotrace/gemm > config BLOCK_M=128"}],
                   metrics=[{"kernel_id": 0, "metric": f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio",
                             "unit": "", "value": v} for r, v in (("long_scoreboard", 20.0), ("selected", 1.0))],
                   meta={"format": "test", "tool": "test"})
    (kernel,) = build_report(tables).kernels
    assert kernel.plugin == "gemm"
    (finding,) = [f for f in kernel.findings if f.report == "warp stalls"]
    assert finding.text.startswith("Long scoreboard dominates: 95%")
    assert "In this iotrace kernel, tune num_stages" in finding.try_next


def test_launch_latency_is_measured_once_the_tables_keep_the_launch_call(corpus: Path) -> None:
    """A trace without the launching calls (``launch_ns`` missing) says so; with them, the latency is their gap."""
    from iotrace.trace.reports.timeline import timeline

    tables = load_corpus(corpus / NSYS)
    tables.kernels["launch_ns"] = None
    assert timeline(tables).launch_latency is None
    tables.kernels["launch_ns"] = tables.kernels["start_ns"] - 7_000  # every kernel starts 7 µs after its call
    tables.kernels.loc[0, "launch_ns"] = tables.kernels.loc[0, "start_ns"] - 20_000
    latency = timeline(tables).launch_latency
    assert latency == {"count": len(tables.kernels), "median": 7_000.0,
                       "p90": pytest.approx(7_000.0), "max": 20_000.0}


def test_with_card_ceilings_a_level_the_card_lacks_names_the_card(corpus: Path) -> None:
    """`--ceilings card` on the T4 report: L2 and L1 have no ceiling because the CardBook states DRAM bandwidth only,
    not because there is 'no card' (the card is t4 and sets the DRAM ceiling: 320 GB/s, its datasheet)."""
    (kernel,) = _report(corpus, T4, ceilings="card").kernels
    levels = {lv.level: lv for lv in kernel.roofline.levels}
    assert levels["dram"].ceiling_bytes_per_s == 320e9 and levels["dram"].ceiling_source.startswith("card t4")
    for name in ("l2", "l1"):
        assert levels[name].ceiling_bytes_per_s is None
        assert "no card" not in levels[name].ceiling_source and "card t4" in levels[name].ceiling_source
    auto = {lv.level: lv for lv in _report(corpus, T4).kernels[0].roofline.levels}
    assert auto["l2"].ceiling_bytes_per_s is None  # the report holds no lts__t_bytes.sum.peak_sustained
    assert auto["l2"].ceiling_source == ("none: the file has no L2 *.peak_sustained (the CardBook states DRAM "
                                         "bandwidth only)")
