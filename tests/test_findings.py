"""Conclusions tested like values (iotrace/trace/findings): each rule on a real corpus file where it fires and one
where it must not, its gain against the file's own figures read with ``ncu_report``, the ranking (gain = fraction ×
the row's time, largest first), and a sweep over the whole corpus for contradictions.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from iotrace.trace.findings.launch_rules import TINY_LAUNCH_NS
from iotrace.trace.findings.registry import RULES, rule
from iotrace.trace.reports.report import Report, build_report
from iotrace.trace.tables import TABLES, TraceTables, build
from tests.conftest import CORPUS, corpus_exports, load_corpus, ncu_launches

T4 = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"
H100_GEMM = "ncu-rep/h100sxm_bf16_gemm_pc_pipeline_full_ncu2024.1.ncu-rep"
H100_1BLOCK = "ncu-rep/h100_stochastic_round_bf16_1block_full_ncu2024.3.ncu-rep"
A40_1BLOCK = "ncu-rep/a40_imma_1block_grid_julia_full_ncu2021.2.ncu-rep"
KMEANS = "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"
RTX4050 = "ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep"
GSZ = "ncu-rep/rtx2060super_gsz_compress_ncu2024.3.ncu-rep"
DOT = "ncu-rep/gtx1660super_dot_product_full_ncu2024.1.ncu-rep"
A10G = "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep"
JULIA = "ncu-rep/a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep"
MINIWEATHER = "ncu-rep/v100_sxm2_miniweather_openacc_full_ncu2022.2.ncu-rep"
TRT = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"

SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
#: Advice only a kernel's author can follow: never given for a library kernel.
SOURCE_KNOBS = ("num_warps", "num_stages", "BLOCK_", "tl.dot", "__launch_bounds__", "maxrregcount", "Triton",
                "-gencode")
#: A balanced kernel's verdict, and the advice of a kernel bound by memory alone: never both about one kernel.
BALANCED, ONE_ROOF = "both compute and memory traffic must fall", "more FLOP/s will not help"
#: Advice that hides latency: never the top finding of a kernel at a roof.
LATENCY_ADVICE = ("in flight", "raise occupancy", "Raise occupancy", "Hide latency", "more resident warps")


@cache
def _report(name: str, **options: object) -> Report:
    return build_report(load_corpus(CORPUS / name), top=1000, **options)  # type: ignore[arg-type]


def _rules(report: Report, kernel_id: int | None = None) -> list[str]:
    return [f.rule for f in report.findings if kernel_id is None or f.kernel_id == kernel_id]


def test_every_rule_states_its_condition_and_cites_its_source() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for r in RULES:
        assert r.condition and r.source, r.id
    with pytest.raises(KeyError, match="the rules are"):
        rule("no-such-rule")


def test_bound_at_a_roof_gets_the_roofs_advice_and_a_gain_of_one_minus_x(corpus: Path) -> None:
    [(sm, memory, duration)] = ncu_launches(corpus / T4, lambda a: (
        a.metric_by_name(SM).as_double(), a.metric_by_name(MEMORY).as_double(),
        a.metric_by_name("gpu__time_duration.sum").as_double()))
    report = _report(T4)
    assert memory >= 80 > sm
    [bound] = [f for f in report.findings if f.rule == "bound"]
    assert bound.text.startswith("Memory bound") and bound.severity == "info"
    assert bound.gain.fraction == pytest.approx(1 - memory / 100)
    assert bound.gain.ns == pytest.approx((1 - memory / 100) * duration)
    assert _rules(report) == ["bound"]  # at the roof: no stall, occupancy or achieved-gap advice
    # No bound without counters: an nsys timeline's kernels get none.
    assert "bound" not in _rules(_report(TRT))


def test_a_balanced_kernel_is_told_to_cut_both_not_that_flops_will_not_help(corpus: Path) -> None:
    """The GTX 1660 k-means kernel runs at 78.6% SM and 75.4% memory throughput: balanced (ncu's SOLBottleneck, whose
    stored result the file keeps). Before issue 46 its advice was a memory-bound kernel's ("more FLOP/s will not
    help"), under a verdict that says both must fall. The T4 kernel, memory bound, keeps that advice."""
    launches = ncu_launches(corpus / KMEANS, lambda a: (a.metric_by_name(SM).as_double(),
                                                        a.metric_by_name(MEMORY).as_double()))
    sm = sum(x for x, _ in launches) / len(launches)
    memory = sum(m for _, m in launches) / len(launches)
    assert (len(launches), round(sm, 1), round(memory, 1)) == (100, 78.6, 75.4)
    [bound] = [f for f in _report(KMEANS).findings if f.rule == "bound"]
    assert bound.text.startswith(f"Balanced: SM throughput {sm:.1f}% and memory throughput {memory:.1f}% of peak")
    assert BALANCED in bound.text and "will not help" not in bound.try_next
    assert bound.try_next.startswith("Cut both the bytes and the instructions: fuse it with its neighbours")
    assert "relieving only compute or only memory leaves the other as near its peak" in bound.try_next
    [t4] = [f for f in _report(T4).findings if f.rule == "bound"]
    assert t4.text.startswith("Memory bound") and ONE_ROOF in t4.try_next and BALANCED not in t4.text


def test_a_tiny_grid_is_named_with_the_share_of_the_gpu_it_leaves_idle(corpus: Path) -> None:
    """The Julia kernel runs one block of 1024 threads for 33 µs on the 84-SM A40: long enough for more blocks to
    help. The H100 stochastic-rounding kernel's single block runs 4 µs a launch, mostly launch cost: no grid finding,
    and its latency verdict does not point at one (tests/test_findings_ranking.py has its tiny-launches finding)."""
    launches = ncu_launches(corpus / A40_1BLOCK, lambda a: (
        a.metric_by_name("launch__grid_size").as_double(),
        a.metric_by_name("device__attribute_multiprocessor_count").as_double(),
        a.metric_by_name("gpu__time_duration.sum").as_double()))
    report = _report(A40_1BLOCK)
    [small] = [f for f in report.findings if f.rule == "small-grid"]
    [(grid, sms, duration)] = launches
    assert grid == 1 and duration >= TINY_LAUNCH_NS
    kernel = next(k for k in report.kernels if k.kernel_id == small.kernel_id)
    per_sm = kernel.occupancy.result.active_blocks_per_sm
    assert small.text.startswith("Tiny grid: 1 block") and f"{int(sms)}-SM GPU" in small.text
    assert small.gain.fraction == pytest.approx(1 - 1 / (sms * per_sm))
    # The latency verdict on it points at the grid first.
    [bound] = [f for f in report.findings if f.rule == "bound" and f.kernel_id == small.kernel_id]
    assert bound.try_next.startswith("The grid cannot fill the GPU")
    assert "small-grid" not in _rules(_report(T4))
    durations = ncu_launches(corpus / H100_1BLOCK, lambda a: a.metric_by_name("gpu__time_duration.sum").as_double())
    assert durations and max(durations) < TINY_LAUNCH_NS
    one_block = _report(H100_1BLOCK)
    assert "small-grid" not in _rules(one_block)
    assert not any(f.try_next.startswith("The grid cannot fill the GPU") for f in one_block.findings)


def test_a_partial_last_wave_is_flagged_from_the_files_wave_count(corpus: Path) -> None:
    [waves] = ncu_launches(corpus / RTX4050, lambda a: a.metric_by_name("launch__waves_per_multiprocessor")
                           .as_double())
    [tail] = [f for f in _report(RTX4050).findings if f.rule == "tail"]
    whole = math.ceil(waves)
    assert tail.gain.fraction == pytest.approx((whole - waves) / whole) and tail.gain.fraction >= 0.2
    assert f"{waves:.2f} waves" in tail.text
    assert "tail" not in _rules(_report(T4))


def test_a_library_kernel_built_for_an_older_architecture_is_named(corpus: Path) -> None:
    report = _report(TRT)
    old = [f for f in report.findings if f.rule == "old-build"]
    assert old and all(f.kernel.startswith("sm50_") for f in old)  # TensorRT's sm50 pooling on an sm_86 RTX 3090
    assert "TensorRT" in old[0].text and "8.6" in old[0].text and old[0].gain is None
    # sm80 kernels on the same 8.6 device share its major: not older.
    assert not any(f.rule == "old-build" and f.kernel.startswith("sm80_") for f in report.findings)


def test_a_dominant_stall_below_every_roof_is_advised_and_bounded_by_the_roof(corpus: Path) -> None:
    report = _report(H100_GEMM)
    [stall] = [f for f in report.findings if f.rule == "dominant-stall"]
    [bound] = [f for f in report.findings if f.rule == "bound"]
    assert stall.text.startswith("Long scoreboard dominates")
    assert stall.gain.fraction <= bound.gain.fraction + 1e-12  # never more than the roof allows
    assert "dominant-stall" not in _rules(_report(T4))


def test_occupancy_advice_only_for_a_latency_bound_kernel_waiting_on_latency() -> None:
    report = _report(GSZ)
    occupancy = [f for f in report.findings if f.rule == "occupancy-limit"]
    assert occupancy and all(f.basis == "modelled" for f in occupancy)  # iotrace's calculator, labelled so
    for f in occupancy:
        kernel = next(k for k in report.kernels if k.kernel_id == f.kernel_id)
        assert kernel.roofline.bound == "latency" and kernel.occupancy.theoretical_pct < 100
    assert "occupancy-limit" not in _rules(_report(T4))  # T4: 100% theoretical and at the memory roof


def test_an_achieved_occupancy_gap_over_a_full_grid_is_flagged() -> None:
    report = _report(DOT)
    gaps = [f for f in report.findings if f.rule == "achieved-gap"]
    assert gaps
    t4 = _report(T4).kernels[0].occupancy
    assert t4.theoretical_pct - t4.achieved_pct >= 10  # a gap as large, at the memory roof: not advice
    assert "achieved-gap" not in _rules(_report(T4))


def test_an_fp32_gemm_on_ampere_gets_the_tf32_finding() -> None:
    report = _report(A10G)  # sgemm variants on an A10G (compute capability 8.6)
    assert {f.kernel_id for f in report.findings if f.rule == "tf32"} == {k.kernel_id for k in report.kernels
                                                                           if "sgemm" in k.name.lower()
                                                                           or "gemm" in k.name.lower()}
    assert "tf32" not in _rules(_report(DOT))


def test_configurations_count_distinct_launch_configurations_only(corpus: Path) -> None:
    julia = _report(JULIA)
    assert sorted((k.config_index, k.configs_of_name) for k in julia.kernels) == [(1, 1), (1, 2), (1, 2), (2, 2),
                                                                                 (2, 2)]
    # Both names with two configurations take under 5% of the kernel time: not worth a finding.
    assert all(k.share_pct < 5 for k in julia.kernels if k.configs_of_name == 2)
    assert "configurations" not in _rules(julia)
    trt = _report(TRT)
    [config] = [f for f in trt.findings if f.rule == "configurations"]
    kernels = load_corpus(corpus / TRT).kernels
    share = kernels.loc[kernels["name"] == config.kernel, "duration_ns"].sum() / kernels["duration_ns"].sum()
    assert share >= 0.05 and config.share_pct == pytest.approx(100 * share)
    assert "distinct launch configurations" in config.text and "library chose" in config.try_next  # TensorRT's
    each = _report(H100_GEMM, each_launch=True)  # three identical launches listed one by one
    assert len(each.kernels) == 3 and "configurations" not in _rules(each)
    assert {(k.config_index, k.configs_of_name) for k in each.kernels} == {(1, 1)}
    assert [k.to_dict()["configuration"] for k in each.kernels] == [{"index": 1, "of": 1}] * 3


def test_findings_rank_by_time_saved_and_top_limits_them(corpus: Path) -> None:
    durations = ncu_launches(corpus / MINIWEATHER, lambda a: a.metric_by_name("gpu__time_duration.sum").as_double())
    report = _report(MINIWEATHER)
    total = sum(durations)
    saved = [f.gain.ns for f in report.findings if f.gain is not None and f.gain.ns is not None]
    assert len(saved) >= 5 and saved == sorted(saved, reverse=True)
    for f in report.findings:
        kernel = next(k for k in report.kernels if k.kernel_id == f.kernel_id)
        assert f.gain.of_ns == pytest.approx(durations[f.kernel_id]) == pytest.approx(kernel.total_ns)
        assert f.gain.ns == pytest.approx(f.gain.fraction * durations[f.kernel_id])
        assert f.share_pct == pytest.approx(100 * durations[f.kernel_id] / total)
    top = build_report(load_corpus(corpus / MINIWEATHER), top=2)
    assert len(top.findings) == 2 and top.findings_total > 2
    assert top.to_dict()["findings_total"] == top.findings_total


def _without_counters(tables: TraceTables, kid: int) -> TraceTables:
    """The loaded tables with every counter of launch ``kid`` removed, as a failed replay leaves it."""
    metrics = tables.metrics
    keep = ~((metrics["kernel_id"] == kid) & ~metrics["metric"].str.startswith(("launch__", "device__")))
    others = {name: tables.table(name) for name in TABLES if name != "metrics"}
    return build(Path(tables.meta["source"]), **others, metrics=metrics[keep].reset_index(drop=True),
                 meta=tables.meta)


def test_a_failed_launch_is_named_once_and_never_analysed(corpus: Path) -> None:
    report = build_report(_without_counters(load_corpus(corpus / MINIWEATHER), 2), top=1000)
    [failed] = [k for k in report.kernels if 2 in k.launch_ids]
    assert not failed.profiled and failed.findings == [] and failed.roofline is None
    [named] = [f for f in report.findings if f.rule == "not-profiled"]
    assert "not profiled (no counters in the file: the kernel or ncu's replay of it failed)" in named.text
    assert not [f for f in report.findings if f.kernel_id == 2 and f.rule != "not-profiled"]
    as_json = failed.to_dict()
    assert as_json["profiled"] is False and as_json["occupancy"]["theoretical_pct"] is None
    assert "modelled" not in str(as_json)


def _verdict_rows() -> list[str]:
    """Every export of the corpus that loads without Nsight Systems (:func:`tests.conftest.corpus_exports`)."""
    return [str(p.relative_to(CORPUS)) for p in corpus_exports(CORPUS)] if CORPUS.is_dir() else []


@pytest.mark.parametrize("name", _verdict_rows() or ["(no corpus)"])
def test_no_contradictions_on_any_corpus_report(corpus: Path, name: str) -> None:
    """No kernel at a roof gets latency advice first; no library kernel gets source-level or Triton knobs; no
    unprofiled launch is analysed; iotrace's bound equals the file's stored SOLBottleneck verdict launch by launch;
    no kernel is called balanced ("both compute and memory traffic must fall") and told that only one of them matters
    ("more FLOP/s will not help": before issue 46 the GTX 1660 k-means report said both). Nsight Compute reports are
    read launch by launch, the others (thousands of timeline launches) by launch group."""
    report = build_report(load_corpus(corpus / name), top=1000, each_launch=name.startswith("ncu-rep/"))
    for kernel in report.kernels:
        mine = [f for f in report.findings if f.kernel_id == kernel.kernel_id and f.rule != "not-profiled"]
        said = " ".join(f"{f.text} {f.try_next}" for f in mine)
        assert not (BALANCED in said and ONE_ROOF in said), (kernel.name, said)
        if not kernel.profiled:
            assert not mine and not kernel.findings
            continue
        roof = kernel.roofline
        x = None if roof is None else roof.utilisation_pct
        if mine and x is not None and x >= 80:
            assert mine[0].rule == "bound", (kernel.name, mine[0].text)
            assert not any(word in mine[0].try_next for word in LATENCY_ADVICE), mine[0].try_next
        shares = kernel.stall_shares()
        lead = next((r for r in shares if r not in ("selected", "not_selected")), None)
        if lead is not None and lead.endswith("_throttle"):  # a full queue or busy pipe: more in flight cannot help
            assert not any("in flight" in f.try_next for f in mine), (kernel.name, lead)
        if roof is not None and "tensor" in (roof.precision or ""):  # on the tensor cores already
            assert not any("Use a faster pipe" in f.try_next for f in mine), kernel.name
        if kernel.origin is not None and kernel.origin.library:
            for f in mine:
                assert not any(knob in f.try_next for knob in SOURCE_KNOBS), (kernel.name, f.try_next)
        stored = [r for r in kernel.stored_rules if r.rule_id == "SOLBottleneck"]
        if stored and roof is not None and roof.bound_basis == "speed of light":
            from iotrace.trace.reports.ncu_rules import bound_verdict
            assert bound_verdict(stored) == roof.bound, (kernel.name, stored[0].title, roof.sol)


def test_no_library_kernel_gets_source_advice_on_the_timelines(corpus: Path) -> None:
    for name in (TRT, "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"):
        report = _report(name)
        for f in report.findings:
            kernel = next((k for k in report.kernels if k.kernel_id == f.kernel_id), None)
            if kernel is not None and kernel.origin.library:
                assert not any(knob in f.try_next for knob in SOURCE_KNOBS), (kernel.name, f.try_next)
    assert pd.notna(_report(TRT).kernels[0].total_ns)


def test_the_documented_rules_are_the_registry_and_the_example_runs(corpus: Path, monkeypatch) -> None:
    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "findings.md").read_text(encoding="utf-8")
    documented = [line.split("`")[1] for line in doc.splitlines() if line.startswith("| `")]
    assert documented == [r.id for r in RULES]
    example = doc.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)  # the example's paths are relative to the repository, as the README's are
    printed: list[str] = []
    exec(compile(example, "docs/findings.md", "exec"), {"print": lambda *a: printed.append(" ".join(map(str, a)))})
    assert printed and printed[0].startswith("bound #") and any(line.startswith("ncu: ") for line in printed)


@pytest.mark.parametrize(("name", "line"), [
    ("ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep", "the file stores no Nsight Compute rule results"),
    (MINIWEATHER, "rule results carry no speedup estimates (Nsight Compute 2022.2"),
    ("ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep", "the rules this capture ran stored none"),
])
def test_rule_results_absent_or_without_estimates_are_said_once(name: str, line: str) -> None:
    report = _report(name)
    assert sum(line in note for note in report.notes) == 1
    assert report.kernels and report.findings  # nothing else in the report is lost
    assert not any("rule results" in note for note in _report(T4).notes)  # a 2024 file with estimates: silent
    assert not any("rule results" in note for note in _report(TRT).notes)  # a timeline is not an ncu report


def test_the_gemm_cost_model_cross_checks_the_tensor_flops_and_bounds_the_excess_bytes(corpus: Path) -> None:
    """The H100 wgmma bf16 GEMM at 8192³ as iotrace's gemm plugin: the counted tensor FLOPs are the analytic 2·M·N·K
    (the file's few fp32 epilogue FLOPs aside), and the excess DRAM bytes' gain is bounded by the roofline floor."""
    report = build_report(load_corpus(corpus / H100_GEMM), plugin="gemm", shape={"M": 8192, "N": 8192, "K": 8192},
                          dtype="bf16")
    roof = report.kernels[0].roofline
    assert roof.model.flops == 2 * 8192**3 and roof.model.flops_ratio == pytest.approx(1.0, abs=1e-3)
    assert roof.precision == "bf16 tensor"
    [excess] = [f for f in report.findings if f.rule == "model-excess"]
    floor = max(roof.model.flops / roof.peak_flop_per_s, roof.model.bytes / roof.level("dram").ceiling_bytes_per_s)
    assert excess.gain.fraction == pytest.approx(1 - floor / (roof.duration_ns / 1e9))
    assert 0 < excess.gain.fraction < 1
