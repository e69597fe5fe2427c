"""The AMD roofline (iotrace/trace/reports/roofline_amd.py through roofline_point) on real rocprof-compute workloads:
FLOPs and bytes by rocprof-compute's formulas (src/utils/roofline_calc.py) applied here by hand to pmc_perf.csv
cells read with the csv module, ceilings from roofline.csv or the CardBook."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from iotrace.cards import lookup
from iotrace.trace import load
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.roofline import LATENCY_PCT, RooflinePoint, roofline_point

MI300X = "rocprof/mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1"
MI210 = "rocprof/mi210_multikernel_omniperf2.1_rocm6.2"
MI100 = "rocprof/mi100_vcopy_omniperf2.0_rocm6.0"
BMM = "batched_matrix_multiplication_matrix_core_64x64x4"
FILL = "__amd_rocclr_fillBufferAligned"


def _rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "pmc_perf.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _point(folder: Path, dispatch: int, card: str | None, with_file: bool = True, ceilings: str = "auto",
           ) -> tuple[RooflinePoint | None, list]:
    tables = load(folder)
    row = tables.kernels[tables.kernels["id"] == dispatch].iloc[0]
    rows = tables.meta.get("roofline_ceilings") if with_file else None
    return roofline_point(MetricView(tables.metrics), dispatch, str(row["name"]), float(row["duration_ns"]),
                          lookup(card) if card else None, ceilings, None, rows)


def _first(rows: list[dict[str, str]], name: str) -> dict[str, str]:
    return next(r for r in rows if name in r["Kernel_Name"])


def _f(row: dict[str, str], column: str) -> float:
    return float(row[column])


def test_mi300x_bmm_flops_bytes_and_ceilings(corpus: Path) -> None:
    folder = corpus / MI300X
    row = _first(_rows(folder), BMM)
    point, missing = _point(folder, int(row["Dispatch_ID"]), "mi300x")
    assert point is not None and not missing
    # FLOPs: 64 lanes × (ADD + MUL + 2·FMA + TRANS) per VALU type + 512 × MFMA MOPS per type (roofline_calc.py)
    valu = sum(64 * (_f(row, f"SQ_INSTS_VALU_ADD_{t}") + _f(row, f"SQ_INSTS_VALU_MUL_{t}")
                     + 2 * _f(row, f"SQ_INSTS_VALU_FMA_{t}") + _f(row, f"SQ_INSTS_VALU_TRANS_{t}"))
               for t in ("F16", "F32", "F64"))
    mfma = {t: 512 * _f(row, f"SQ_INSTS_VALU_MFMA_MOPS_{t}") for t in ("F16", "BF16", "F32", "F64", "F8", "I8")}
    assert mfma["BF16"] == 512 * 4194304 and valu == 0
    assert point.flops == pytest.approx(valu + sum(mfma.values()))
    assert point.flops_by_precision == {"bf16 mfma": pytest.approx(mfma["BF16"])}
    assert point.precision == "bf16 mfma"
    # HBM bytes, MI300 form: 128·BUBBLE + 64·(RDREQ − BUBBLE − RDREQ_32B) + 32·RDREQ_32B + 32·(WRREQ − WRREQ_64B)
    # + 64·WRREQ_64B
    bubble, rd, rd32 = (_f(row, c) for c in ("TCC_BUBBLE_sum", "TCC_EA0_RDREQ_sum", "TCC_EA0_RDREQ_32B_sum"))
    wr, wr64 = _f(row, "TCC_EA0_WRREQ_sum"), _f(row, "TCC_EA0_WRREQ_64B_sum")
    hbm = 128 * bubble + 64 * (rd - bubble - rd32) + 32 * rd32 + 32 * (wr - wr64) + 64 * wr64
    assert point.dram_bytes == pytest.approx(hbm)
    l2 = 64 * sum(_f(row, c) for c in ("TCP_TCC_READ_REQ_sum", "TCP_TCC_WRITE_REQ_sum",
                                       "TCP_TCC_ATOMIC_WITH_RET_REQ_sum", "TCP_TCC_ATOMIC_WITHOUT_RET_REQ_sum"))
    assert point.level("l2").bytes == pytest.approx(l2)
    assert point.level("l1").bytes == pytest.approx(64 * _f(row, "TCP_TOTAL_CACHE_ACCESSES_sum"))
    assert point.level("lds").bytes == pytest.approx(
        4 * 32 * (_f(row, "SQ_LDS_IDX_ACTIVE") - _f(row, "SQ_LDS_BANK_CONFLICT")))
    # Ceilings: roofline.csv's device-0 values
    assert point.level("dram").ceiling_bytes_per_s == pytest.approx(4244.3501e9)
    assert point.level("dram").ceiling_source.startswith("file: roofline.csv HBMBw of device 0")
    assert point.level("l2").ceiling_bytes_per_s == pytest.approx(25345.92e9)
    assert point.level("lds").ceiling_bytes_per_s == pytest.approx(73037.414e9)
    assert point.peak_flop_per_s == pytest.approx(516455.44e9)
    assert "MFMABF16Flops" in point.peak_source
    # The bound: intensity left of the ridge, so the roof is HBM's; at under 60% of it, latency.
    seconds = (_f(row, "End_Timestamp") - _f(row, "Start_Timestamp")) / 1e9
    intensity, ridge = point.flops / hbm, 516455.44 / 4244.3501
    assert point.intensity == pytest.approx(intensity) and point.ridge == pytest.approx(ridge)
    assert intensity < ridge
    pct = 100 * (point.flops / seconds) / (intensity * 4244.3501e9)
    assert point.pct_of_attainable == pytest.approx(pct)
    assert point.bound == ("latency" if pct < LATENCY_PCT else "memory")


def test_mi300x_fill_kernel_has_bytes_and_no_flops(corpus: Path) -> None:
    folder = corpus / MI300X
    row = _first(_rows(folder), FILL)
    point, _ = _point(folder, int(row["Dispatch_ID"]), "mi300x")
    assert point is not None
    counts = [c for c in row if c.startswith(("SQ_INSTS_VALU_ADD_", "SQ_INSTS_VALU_MUL_", "SQ_INSTS_VALU_FMA_",
                                              "SQ_INSTS_VALU_TRANS_", "SQ_INSTS_VALU_MFMA_MOPS_"))]
    assert len(counts) == 18 and all(_f(row, c) == 0 for c in counts)  # counted, and zero
    assert point.flops == 0 and point.flops_by_precision == {} and point.precision is None
    assert point.peak_flop_per_s is None and "no floating-point work" in point.peak_source
    wr, wr64 = _f(row, "TCC_EA0_WRREQ_sum"), _f(row, "TCC_EA0_WRREQ_64B_sum")
    rd, rd32 = _f(row, "TCC_EA0_RDREQ_sum"), _f(row, "TCC_EA0_RDREQ_32B_sum")
    bubble = _f(row, "TCC_BUBBLE_sum")
    assert (wr, wr64, bubble) == (262144, 262144, 0)
    hbm = 128 * bubble + 64 * (rd - bubble - rd32) + 32 * rd32 + 32 * (wr - wr64) + 64 * wr64
    assert point.dram_bytes == pytest.approx(hbm)
    # Judged by bandwidth alone: HBM bytes per second against the measured HBMBw.
    seconds = (_f(row, "End_Timestamp") - _f(row, "Start_Timestamp")) / 1e9
    assert point.pct_of_attainable == pytest.approx(100 * hbm / seconds / 4244.3501e9)
    assert point.bound == ("latency" if point.pct_of_attainable < LATENCY_PCT else "memory")


def test_mi300x_without_file_ceilings_meets_the_card(corpus: Path) -> None:
    folder = corpus / MI300X
    dispatch = int(_first(_rows(folder), BMM)["Dispatch_ID"])
    point, _ = _point(folder, dispatch, "mi300x", with_file=False)
    card = lookup("mi300x")
    assert point.peak_flop_per_s == pytest.approx(card.peak_tflops["bf16_tensor"] * 1e12)
    assert point.peak_source.startswith("card mi300x: bf16_tensor peak")
    assert point.level("dram").ceiling_bytes_per_s == pytest.approx(card.memory_bandwidth_gbs * 1e9)
    assert point.level("l2").ceiling_bytes_per_s is None
    # --ceilings card ignores the file's measured peaks even when handed them
    point, _ = _point(folder, dispatch, "mi300x", ceilings="card")
    assert point.peak_source.startswith("card mi300x")


def test_mi100_falls_back_to_the_cardbook(corpus: Path) -> None:
    folder = corpus / MI100
    assert not (folder / "roofline.csv").exists()
    row = _rows(folder)[0]
    point, missing = _point(folder, int(row["Dispatch_ID"]), "mi100")
    assert point is not None
    dram = point.level("dram")
    rd, rd32 = _f(row, "TCC_EA_RDREQ_sum"), _f(row, "TCC_EA_RDREQ_32B_sum")
    wr, wr64 = _f(row, "TCC_EA_WRREQ_sum"), _f(row, "TCC_EA_WRREQ_64B_sum")
    assert dram.bytes == pytest.approx(32 * rd32 + 64 * (rd - rd32) + 64 * wr64 + 32 * (wr - wr64))
    assert dram.ceiling_bytes_per_s == pytest.approx(1228.8e9)
    assert dram.ceiling_source.startswith("card mi100: memory bandwidth")
    assert "the workload has no roofline.csv" in dram.ceiling_source
    # Omniperf 2.0 collected no per-type VALU/MFMA counts on MI100: FLOPs not available, never zero
    assert "SQ_INSTS_VALU_ADD_F32" not in row
    assert point.flops is None and point.precision is None
    assert [m.report for m in missing] == ["roofline FLOPs"]
    assert "rocprof-compute profile --roof-only" in missing[0].line


def test_mi210_counters_faster_than_the_memory_give_no_roofline(corpus: Path) -> None:
    """Omniperf's MI210 test workload repeats one TCC_EA_RDREQ_sum (33,551,804) on every dispatch, 1-thread kernels
    included: over 1 GB in microseconds, not the dispatch's own traffic, so no point is placed (not a 10⁴ % one)."""
    folder = corpus / MI210
    rows = _rows(folder)
    assert {r["TCC_EA_RDREQ_sum"] for r in rows} == {"33551804.0"}
    for card in ("mi210", None):
        point, missing = _point(folder, int(rows[1]["Dispatch_ID"]), card)
        assert point is None
        assert "not this dispatch's alone" in missing[0].line


def test_nvidia_counters_take_the_ncu_path(corpus: Path) -> None:
    """An ncu report has no SQ_/TCC_/TCP_ counter: nothing of the AMD path reaches it."""
    from iotrace.trace.reports.roofline_amd import has_amd_counters
    path = next(iter(sorted((corpus / "ncu-csv").glob("*.csv"))), None)
    if path is None:
        pytest.skip("no ncu CSV in the corpus")
    tables = load(path)
    view = MetricView(tables.metrics)
    assert not any(has_amd_counters(view, int(k)) for k in tables.kernels["id"])
