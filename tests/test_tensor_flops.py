"""Tensor-core FLOPs and their peak (iotrace.trace.reports.tensor_flops) against the corpus, read independently with
NVIDIA's ``ncu_report``, and against the analytic 2·M·N·K of the corpus H100 GEMM (PROVENANCE.md: 8192³, bf16).

The corpus holds no ``sm__ops_path_tensor_*`` counters (checked below), so the counter hierarchy is tested on
hand-built views that use the metric names NVIDIA defines (``ncu --query-metrics``); the corpus's tensor work is in the
per-opcode SASS table (``sass__inst_executed_per_opcode_with_modifier_all``), whose per-opcode values iotrace's ncu
reader keeps only where it stores that instanced metric per instance: where it does not, iotrace must say which FLOPs it
lacks, never count them as zero.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from iotrace.cards import lookup
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.report import build_report
from iotrace.trace.reports.roofline import roofline_point
from iotrace.trace.reports.tensor_flops import (
    PER_OPCODE,
    card_tensor_peak,
    key_of,
    precision_of,
    sass_flops,
    tensor_flops,
    tensor_peak,
)

from .conftest import load_corpus, ncu_launches

ncu_report = pytest.importorskip("ncu_report", reason="ncu-report is not installed: pip install 'iotrace[nsight]'")

H100_GEMM = "ncu-rep/h100sxm_bf16_gemm_pc_pipeline_full_ncu2024.1.ncu-rep"
H100_1BLOCK = "ncu-rep/h100_stochastic_round_bf16_1block_full_ncu2024.3.ncu-rep"
A40_IMMA = "ncu-rep/a40_imma_int8_tensor_julia_full_ncu2022.1.ncu-rep"
A40_1BLOCK = "ncu-rep/a40_imma_1block_grid_julia_full_ncu2021.2.ncu-rep"
GEMM_FLOPS = 2 * 8192**3  # 1.0995e12 per launch: every multiply-add of C = A·B, 2 FLOPs each
#: Tensor work evidence ncu defines: ops counters, per-pipe instruction counters, GMMA instruction counts.
_TENSORISH = ("__ops_path_tensor_", "pipe_tensor", "gmma")


def _read(action: Any) -> dict[str, Any]:
    """One launch as ncu_report reads it: numeric metrics, the per-opcode table, and metric descriptions."""
    values, per_opcode, described = {}, {}, {}
    for name in action.metric_names():
        metric = action.metric_by_name(name)
        if metric.kind() == ncu_report.IMetric.ValueKind_STRING:
            continue
        values[name] = metric.as_double()
        described[name] = metric.description()
        if name == PER_OPCODE and metric.has_correlation_ids():
            ids = metric.correlation_ids()
            per_opcode = {ids.as_string(i): metric.as_double(i) for i in range(metric.num_instances())}
    return {"values": values, "per_opcode": per_opcode, "described": described}


def _described_alone(path: Path, launch: int, metric: str) -> str:
    """A metric's description as ncu_report gives it for this report opened first in a fresh process: in a process
    that loaded another report before, ncu_report can answer with that report's (older) metric library's text."""
    code = ("import sys, ncu_report\n"
            "c = ncu_report.load_report(sys.argv[1])\n"
            "actions = [c.range_by_idx(r).action_by_idx(a) for r in range(c.num_ranges())"
            " for a in range(c.range_by_idx(r).num_actions())]\n"
            "print(actions[int(sys.argv[2])].metric_by_name(sys.argv[3]).description())")
    done = subprocess.run([sys.executable, "-c", code, str(path), str(launch), metric], capture_output=True,
                          text=True, timeout=120, check=True)  # a hang guard, not a speed check
    return done.stdout


def _expected(per_opcode: dict[str, float]) -> tuple[dict[str, float], list[str], float]:
    """FLOPs per tensor key from the per-opcode table (decoded by sass_flops), the uncountable matrix opcodes, and
    the matrix instructions."""
    flops: dict[str, float] = {}
    uncountable, instructions = [], 0.0
    for sass, count in per_opcode.items():
        decoded = sass_flops(sass)
        if decoded is None or count == 0:
            continue
        instructions += count
        if isinstance(decoded, str):
            uncountable.append(sass)
        else:
            flops[decoded[0]] = flops.get(decoded[0], 0.0) + count * decoded[1]
    return flops, uncountable, instructions


def _view(rows: dict[str, float], kid: int = 0) -> MetricView:
    return MetricView(pd.DataFrame({"kernel_id": [kid] * len(rows), "metric": list(rows),
                                    "value": list(rows.values())}))


def _with_per_opcode(metrics: pd.DataFrame, launches: list[dict[str, Any]]) -> MetricView:
    """iotrace's metrics table plus the per-opcode rows ncu_report reads (what a reader keeping them would store)."""
    extra = [(kid, f"{PER_OPCODE}[{sass}]", count) for kid, launch in enumerate(launches)
             for sass, count in launch["per_opcode"].items()]
    rows = pd.DataFrame(extra, columns=["kernel_id", "metric", "value"])
    return MetricView(pd.concat([metrics[["kernel_id", "metric", "value"]], rows], ignore_index=True))


def _ncu_reps(corpus: Path) -> list[Path]:
    return sorted(p for p in (corpus / "ncu-rep").iterdir() if p.suffix in (".ncu-rep", ".nsight-cuprof-report"))


# --- the per-opcode identity ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sass", "key", "flops"), [
    ("HGMMA.64x128x16.F32.BF16", "bf16 dense", 2 * 64 * 128 * 16 / 4),  # a warpgroup's 4 warps each count it
    ("QGMMA.64x256x32.F32.E4M3.E4M3", "fp8 dense", 2 * 64 * 256 * 32 / 4),
    ("IGMMA.64x64x32.S32.S8.S8", "int8 dense", 2 * 64 * 64 * 32 / 4),
    ("HMMA.16816.F32.BF16", "bf16 dense", 2 * 16 * 8 * 16),
    ("HMMA.16816.F16", "fp16 dense", 2 * 16 * 8 * 16),
    ("HMMA.1684.F32.TF32", "tf32 dense", 2 * 16 * 8 * 4),
    ("HMMA.SP.16832.F32.BF16", "bf16 sparse", 2 * 16 * 8 * 32),
    ("IMMA.8816.S8.S8.SAT", "int8 dense", 2 * 8 * 8 * 16),
    ("IMMA.16832.S4.S4", "int4 dense", 2 * 16 * 8 * 32),
    ("DMMA.884", "fp64 dense", 2 * 8 * 8 * 4),
    ("BMMA.168256.AND.POPC", "int1 dense", 2 * 16 * 8 * 256),
])
def test_a_sass_opcode_that_fixes_its_shape_gives_2mnk_flops(sass: str, key: str, flops: float) -> None:
    assert sass_flops(sass) == (key, flops)


@pytest.mark.parametrize("sass", ["HMMA.884.F32.F32.STEP0", "HMMA.884.F16.F16", "UTCHMMA", "UTCQMMA.2CTA", "HGMMA"])
def test_a_matrix_opcode_whose_shape_is_not_in_its_name_is_not_counted(sass: str) -> None:
    assert isinstance(sass_flops(sass), str)  # a reason: Volta quad-pair steps, tcgen05 descriptors, no shape


@pytest.mark.parametrize("sass", ["HFMA2.MMA", "HFMA2", "FFMA", "F2FP.BF16.F32.PACK_AB", "IMAD.WIDE"])
def test_element_wise_instructions_are_no_tensor_work(sass: str) -> None:
    assert sass_flops(sass) is None


def test_precision_names_round_trip() -> None:
    for key in ("bf16 dense", "fp8 sparse", "fp4/fp6 dense", "int8 dense"):
        assert key_of(precision_of(key)) == key
    assert precision_of("bf16 dense") == "bf16 tensor" and precision_of("fp8 sparse") == "fp8 tensor sparse"
    assert key_of("fp32") is None and key_of("fp64") is None


# --- sm__ops_path_tensor_* : one level of the hierarchy, never an aggregate added to its parts ---------------------

_P = "sm__ops_path_tensor_"
_HOPPER_BF16 = {  # a dense bf16 kernel: mostly wgmma (HGMMA), some mma.sync (HMMA); ncu 2024 Hopper metric names
    f"{_P}src_bf16_dst_fp32.sum": 1.0e12,
    f"{_P}src_bf16_dst_fp32_sparsity_off.sum": 1.0e12,
    f"{_P}src_bf16_dst_fp32_sparsity_on.sum": 0.0,
    f"{_P}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum": 0.9e12,
    f"{_P}op_hgmma_src_bf16_dst_fp32_sparsity_on.sum": 0.0,
    f"{_P}op_hmma_src_bf16_dst_fp32_sparsity_off.sum": 0.1e12,
    f"{_P}op_hmma_src_bf16_dst_fp32_sparsity_on.sum": 0.0,
    f"{_P}src_fp8_sparsity_off.sum": 0.0,
    f"{_P}src_fp64.sum": 0.0,
    # peaks (ops per cycle, all SMs): the unqualified aggregate's is the sparse rate, twice the dense one
    f"{_P}src_bf16_dst_fp32.sum.peak_sustained": 2 * 540672.0,
    f"{_P}src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 540672.0,
    f"{_P}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 540672.0,
    f"{_P}op_hgmma_src_bf16_dst_fp32_sparsity_on.sum.peak_sustained": 2 * 540672.0,
    f"{_P}src_fp4_dst_fp32_sparsity_on.sum.peak_sustained": 16 * 540672.0,
    "sm__cycles_elapsed.avg.per_second": 1.443e9,
}


def test_ops_counters_count_each_flop_once_at_the_most_specific_level() -> None:
    count = tensor_flops(_view(_HOPPER_BF16), 0, None)
    assert count is not None and not count.lacking
    assert count.flops_by_type == {"bf16 dense": pytest.approx(1.0e12)}  # not 3e12: aggregates add only what is left
    assert count.dense == pytest.approx(1.0e12) and count.sparse == 0.0
    assert "op_hgmma_src_bf16_dst_fp32_sparsity_off" in count.source and "src_bf16_dst_fp32.sum" not in count.source


def test_the_brief_s_double_count_is_gone() -> None:
    """An aggregate beside one of its sub-path counters (the bug this module replaces): counted once."""
    rows = {f"{_P}src_bf16_dst_fp32.sum": 5.0e11, f"{_P}op_hmma_src_bf16_dst_fp32_sparsity_off.sum": 5.0e11}
    assert tensor_flops(_view(rows), 0, None).total == pytest.approx(5.0e11)


def test_an_aggregate_adds_only_the_work_its_parts_lack() -> None:
    rows = {f"{_P}src_fp16_dst_fp32.sum": 3.0e11, f"{_P}op_hmma_src_fp16_dst_fp32_sparsity_off.sum": 1.0e11,
            f"{_P}op_hmma_src_fp16_dst_fp32_sparsity_on.sum": 0.5e11, f"{_P}src_fp16.sum": 3.5e11,
            f"{_P}src_fp16_dst_fp16.sum": 0.5e11, f"{_P}src_int8.sum": 2.0e11}
    count = tensor_flops(_view(rows), 0, None)
    assert count.total == pytest.approx(3.5e11 + 2.0e11)  # src_fp16 covers both fp16 paths; int8 is apart
    assert count.flops_by_type["fp16 dense"] == pytest.approx(1.0e11)
    assert count.flops_by_type["fp16 sparse"] == pytest.approx(0.5e11)
    assert "fp16 dense or sparse" in count.flops_by_type and "dense and sparse" in count.lacking  # said, not guessed


def test_parts_larger_than_their_aggregate_leave_the_aggregate_out() -> None:
    rows = {f"{_P}src_tf32_dst_fp32.sum": 1.0e9, f"{_P}op_hmma_src_tf32_dst_fp32_sparsity_off.sum": 2.0e9}
    count = tensor_flops(_view(rows), 0, None)
    assert count.total == pytest.approx(2.0e9) and "less than its parts" in count.lacking


def test_rates_from_a_roofline_section_become_totals() -> None:
    rows = {f"{_P}src_bf16_dst_fp32_sparsity_off.sum.per_cycle_elapsed": 1000.0, "sm__cycles_elapsed.avg": 2.0e6}
    assert tensor_flops(_view(rows), 0, None).flops_by_type == {"bf16 dense": 2.0e9}


def test_zero_ops_counters_mean_no_tensor_work_whatever_the_pipe_says() -> None:
    rows = {f"{_P}src_fp16_dst_fp32.sum": 0.0,
            "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active": 3.0}
    assert tensor_flops(_view(rows), 0, None) is None


def test_dense_work_meets_the_dense_peak_of_its_own_path_never_a_sparse_or_fp4_one() -> None:
    view = _view(_HOPPER_BF16)
    count = tensor_flops(view, 0, None)
    peak, source = tensor_peak(view, 0, count)
    assert peak == pytest.approx(540672.0 * 1.443e9)  # 132 SMs x 4096 dense bf16 FLOP/clk at the file's clock
    assert "op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained" in source
    assert "sparsity_on" not in source and "fp4" not in source
    # Without sparsity-qualified counters a dense kernel takes no file peak at all: the aggregate's is the sparse one.
    bare = _view({f"{_P}src_bf16_dst_fp32.sum": 1.0e12, f"{_P}src_bf16_dst_fp32.sum.peak_sustained": 2 * 540672.0,
                  "sm__cycles_elapsed.avg.per_second": 1.443e9})
    assert tensor_peak(bare, 0, tensor_flops(bare, 0, None)) is None


def test_the_roofline_places_tensor_work_under_its_own_peak() -> None:
    point, _ = roofline_point(_view({**_HOPPER_BF16, "dram__bytes.sum": 1.0e9}), 0, "gemm", 4.0e6, lookup("h100-sxm"))
    assert point.precision == "bf16 tensor" and point.flops == pytest.approx(1.0e12)
    assert point.flops_by_precision == {"bf16 tensor": pytest.approx(1.0e12)}
    assert point.peak_flop_per_s == pytest.approx(540672.0 * 1.443e9) and "sparsity_off" in point.peak_source
    assert "tensor FLOPs (bf16 dense)" in point.flops_source and point.flops_lacking == ""
    by_card, _ = roofline_point(_view({**_HOPPER_BF16, "dram__bytes.sum": 1.0e9}), 0, "gemm", 4.0e6,
                                lookup("h100-sxm"), ceilings="card")
    # The card's peak is a boost-clock figure: scaled to the SM clock the file ran at (issue 45 item 5), and said so.
    assert by_card.peak_flop_per_s == pytest.approx(989.5e12 * 1.443e9 / 1.98e9)
    assert "bf16_tensor" in by_card.peak_source and "at the file's SM clock, 1.443 GHz" in by_card.peak_source
    assert "not the 1.98 GHz boost" in by_card.peak_source


def test_the_card_peak_is_the_dense_peak_of_the_same_type() -> None:
    h100 = lookup("h100-sxm")
    peak, source = card_tensor_peak(h100, "bf16 dense")
    assert peak == pytest.approx(989.5e12) and source.startswith("card h100-sxm: bf16_tensor peak")
    assert card_tensor_peak(h100, "int8 dense")[0] == pytest.approx(1979e12)
    assert card_tensor_peak(h100, "bf16 sparse")[0] == pytest.approx(2 * 989.5e12)
    assert card_tensor_peak(h100, "fp4 dense") is None and card_tensor_peak(h100, "bf16 dense or sparse") is None
    assert card_tensor_peak(None, "bf16 dense") is None


# --- the corpus -------------------------------------------------------------------------------------------------------

def test_every_corpus_report_with_tensor_counters_is_counted_or_says_what_it_lacks(corpus: Path) -> None:
    """Each launch of each report that holds tensor counters (found here with ncu_report): iotrace counts exactly the
    FLOPs the per-opcode table gives, or (where its metrics lack that table's values) counts none and names the tensor
    work it lacks; a launch with no matrix instruction has no tensor FLOPs and nothing lacking."""
    with_tensor_counters = 0
    for path in _ncu_reps(corpus):
        launches = ncu_launches(path, _read)
        if not any(any(t in n for t in _TENSORISH) for launch in launches for n in launch["values"]):
            continue
        with_tensor_counters += 1
        tables = load_corpus(path)
        view = MetricView(tables.metrics)
        report = build_report(tables, top=1000, each_launch=True)
        assert not any(n.split(".")[0].startswith(("sm__ops_path", "smsp__ops_path"))
                       for launch in launches for n in launch["values"]), "the corpus now has ops counters: test them"
        for kernel, launch in zip(report.kernels, launches, strict=True):
            where = f"{path.name} #{kernel.kernel_id}"
            flops, uncountable, instructions = _expected(launch["per_opcode"])
            count = tensor_flops(view, kernel.kernel_id, None)
            roof = kernel.roofline
            if not flops and not uncountable:
                assert count is None, where
                assert roof is None or roof.precision is None or key_of(roof.precision) is None, where
                continue
            assert count is not None, where
            if count.flops_by_type:  # the metrics hold the per-opcode rows: exact, under a same-type dense peak
                assert count.flops_by_type == pytest.approx(flops), where
                assert roof.precision == precision_of(max(flops, key=flops.__getitem__)), where
                assert "sparse" not in roof.peak_source and "fp4" not in roof.peak_source, where
            else:  # not countable from iotrace's metrics: lacking, never zero tensor FLOPs
                assert count.lacking.startswith("tensor FLOPs not countable"), where
                assert PER_OPCODE in count.lacking and roof.flops_lacking == count.lacking, where
                assert "lacking: tensor FLOPs not countable" in roof.flops_source, where
                assert roof.precision is None or key_of(roof.precision) is None, where
            assert uncountable == [] or "not countable" in count.lacking, where
            assert instructions > 0, where
    assert with_tensor_counters >= 10


def test_h100_wgmma_gemm_counts_2mnk_at_8192_cubed(corpus: Path) -> None:
    """HGMMA.64x128x16.F32.BF16: 2·64·128·16 FLOPs per warpgroup MMA, counted once per warp (4 per warpgroup); per
    launch that is exactly 2·8192³. Through iotrace's roofline with the per-opcode rows: bf16 tensor, under the H100's
    dense bf16 peak."""
    path = corpus / H100_GEMM
    launches = ncu_launches(path, _read)
    tables = load_corpus(path)
    view = _with_per_opcode(tables.metrics, launches)
    durations = tables.kernels["duration_ns"].to_list()
    for kid, launch in enumerate(launches):
        assert launch["per_opcode"]["HGMMA.64x128x16.F32.BF16"] == 4 * (8192 // 64) * (8192 // 128) * (8192 // 16)
        assert _expected(launch["per_opcode"])[0] == {"bf16 dense": GEMM_FLOPS}
        count = tensor_flops(view, kid, None)
        assert count.flops_by_type == {"bf16 dense": GEMM_FLOPS} and count.instructions == 16_777_216
        point, _ = roofline_point(view, kid, "gemm", durations[kid], lookup("h100-sxm"))
        assert point.precision == "bf16 tensor" and point.flops == pytest.approx(GEMM_FLOPS, rel=1e-3)
        # The dense bf16 peak is a boost-clock figure (1.98 GHz): at the file's SM clock, read with ncu_report.
        at_clock = launch["values"]["sm__cycles_elapsed.avg.per_second"] / 1.98e9
        assert point.peak_flop_per_s == pytest.approx(989.5e12 * at_clock, rel=1e-3)
        assert "bf16_tensor" in point.peak_source and "at the file's SM clock" in point.peak_source
        # 1.0995e12 FLOPs in ~4.04 ms: ~272 TFLOP/s under ncu, at the 1.443 GHz SM clock the file records (not the
        # 300-360 TFLOP/s such a kernel reaches at boost clock). Cross-check with the tensor pipe's own busy time:
        # achieved / (132 SMs x 4096 dense bf16 FLOP/clk x clock) = the share of cycles the pipe ran matrix ops
        # (4096 = 989.4 TFLOPS / (132 SMs x 1.83 GHz), H100 SXM5 datasheet and Hopper whitepaper).
        achieved = GEMM_FLOPS / (durations[kid] * 1e-9)
        assert 260e12 < achieved < 285e12
        clock = launch["values"]["sm__cycles_elapsed.avg.per_second"]
        busy = launch["values"]["sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg."
                                "pct_of_peak_sustained_elapsed"]
        assert 100 * achieved / (132 * 4096 * clock) == pytest.approx(busy, rel=0.01)
    # Through iotrace's own reader: exactly that, or the GMMA work named as lacking (with its instruction count).
    for kid, launch in enumerate(launches):
        count = tensor_flops(MetricView(tables.metrics), kid, None)
        if count.flops_by_type:
            assert count.flops_by_type == {"bf16 dense": GEMM_FLOPS}
        else:
            assert count.instructions == launch["values"]["smsp__sass_inst_executed_op_shared_gmma.sum"] == 16_777_216
            assert "16,777,216 warp-level HGMMA" in count.lacking


@pytest.mark.parametrize(("name", "sass", "ops"), [(A40_IMMA, "IMMA.8816.S8.S8.SAT", 704_643_072 * 2 * 8 * 8 * 16),
                                                   (A40_1BLOCK, "IMMA.16816.S8.S8", 3_072 * 2 * 16 * 8 * 16)])
def test_a40_int8_imma_reports(corpus: Path, name: str, sass: str, ops: int) -> None:
    """Ampere IMMA (mma.sync int8): 2·m·n·k OPs per warp instruction, int8 dense, under the A40's dense int8 peak
    (299.3 TOPS); iotrace's own metrics hold only the IMMA pipe's utilisation, which it names as lacking FLOPs."""
    path = corpus / name
    (launch,) = ncu_launches(path, _read)
    assert _expected(launch["per_opcode"]) == ({"int8 dense": ops}, [], launch["per_opcode"][sass])
    tables = load_corpus(path)
    view = _with_per_opcode(tables.metrics, [launch])
    assert tensor_flops(view, 0, None).flops_by_type == {"int8 dense": ops}
    point, _ = roofline_point(view, 0, "julia", float(tables.kernels["duration_ns"][0]), lookup("a40"))
    # The A40's dense int8 peak at its boost clock, scaled to the SM clock the file ran at (read with ncu_report).
    at_clock = launch["values"]["sm__cycles_elapsed.avg.per_second"] / (lookup("a40").boost_clock_mhz * 1e6)
    assert point.precision == "int8 tensor" and point.peak_flop_per_s == pytest.approx(299.3e12 * at_clock, rel=1e-3)
    own = tensor_flops(MetricView(tables.metrics), 0, None)
    if not own.flops_by_type:
        imma = launch["values"]["sm__inst_executed_pipe_tensor_op_imma.avg.pct_of_peak_sustained_active"]
        assert imma > 0 and f"IMMA pipe {imma:.3g}% of peak" in own.lacking
        assert "(IMMA/BMMA ops)" in launch["described"]["sm__inst_executed_pipe_tensor_op_imma.avg."
                                                         "pct_of_peak_sustained_active"]


def test_h100_one_block_hfma2_mma_is_no_tensor_work(corpus: Path) -> None:
    """Two HFMA2.MMA per launch make ncu's HMMA pipe counter non-zero (its description: "HMMA/HFMA2.MMA ops"), but
    HFMA2.MMA is an element-wise FP16x2 FMA: no matrix instruction ran (the typed tensor counter is 0), so no tensor
    FLOPs, nothing lacking, and no tensor peak."""
    path = corpus / H100_1BLOCK
    launches = ncu_launches(path, _read)
    tables = load_corpus(path)
    report = build_report(tables, top=1000, each_launch=True)
    for kid, (kernel, launch) in enumerate(zip(report.kernels, launches, strict=True)):
        hmma = "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active"
        assert launch["values"][hmma] > 0 and "HFMA2.MMA" in _described_alone(path, kid, hmma)
        assert launch["per_opcode"]["HFMA2.MMA"] == 2 and _expected(launch["per_opcode"]) == ({}, [], 0.0)
        assert launch["values"]["sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg."
                                "pct_of_peak_sustained_elapsed"] == 0
        for view in (MetricView(tables.metrics), _with_per_opcode(tables.metrics, launches)):
            assert tensor_flops(view, kid, None) is None
        roof = kernel.roofline
        assert roof.flops_lacking == "" and "tensor" not in (roof.precision or "") and "tensor" not in roof.peak_source
