"""AMD kernels in the report: theoretical occupancy in waves per CU with its AMD limiters, the kernel card in AMD's
words (VGPRs, SGPRs, LDS, wave size) in the terminal, Markdown, HTML and JSON alike, and ``iotrace info``'s device
line in gfx targets and CUs, on real rocprofv3 and rocprof-compute files; an NVIDIA kernel's card as before.

Expected values follow from the files' launch resources and iotrace.cu_limits (tests/test_occupancy_amd.py proves
the calculator): the ck_tile GEMM grants 128 arch + 384 accum VGPRs (the whole 512-entry file of a gfx942 SIMD lane)
and 65,536 B of LDS (a whole CU's), so one 4-wave workgroup per CU = 4 of 32 waves = 12.5%, VGPRs and LDS binding.
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path

import pytest
from rich.console import Console

from iotrace.cards import lookup
from iotrace.trace.reports.amd_occupancy import device_gfx
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.occupancy import occupancy_row
from iotrace.trace.reports.report import KernelReport, Report, build_report
from tests.conftest import cli_in_process, load_corpus

ROCPD = "rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db"
BMM = "rocprof/mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1"
VCOPY = "rocprof/mi100_vcopy_omniperf2.0_rocm6.0"
LAPLACIAN = "rocprof/mi250_laplacian_rocprof-v1_results.csv"
NCU = "ncu-rep/gtx1660super_dot_product_full_ncu2024.1.ncu-rep"
CK_CARD = "VGPRs 128 arch + 384 accum, 112 SGPRs, LDS 65,536 B per workgroup, scratch 0 B per work-item, wave64"


@cache
def _report(path: Path) -> Report:
    return build_report(load_corpus(path))


def _kernel(report: Report, prefix: str) -> KernelReport:
    return next(k for k in report.kernels if k.name.removeprefix("void ").startswith(prefix))


def _terminal(report: Report) -> str:
    from iotrace.trace.render.terminal import print_report

    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    print_report(console, report)
    return console.export_text()


def test_ck_tile_gemm_holds_one_workgroup_per_cu_bound_by_vgprs_and_lds(corpus: Path) -> None:
    k = _kernel(_report(corpus / ROCPD), "ck_tile::kentry")
    occ = k.occupancy
    assert occ is not None and occ.amd_result is not None
    assert occ.theoretical_pct == 12.5 and occ.limiters == ("VGPRs", "LDS")
    assert occ.active_blocks_per_sm == 1 and occ.result is None  # NVIDIA's OccupancyResult stays NVIDIA's
    data = occ.to_dict()
    assert (data["gfx"], data["waves_per_cu"], data["max_waves_per_cu"], data["waves_per_simd"]) == \
        ("gfx942", 4, 32, 1.0)
    assert data["resources"] == {"arch_vgpr": 128, "accum_vgpr": 384, "sgpr": 112, "lds_per_workgroup": 65536,
                                 "scratch_per_work_item": 0, "wave_size": 64, "workgroup_size": 256}
    assert data["limits"]["VGPRs"] == data["limits"]["LDS"] == 1 and data["limits"]["wave slots"] == 8
    assert data["steps"][-1].endswith("= 4 of 32 waves per CU = 1 waves per SIMD = 12.5 %")
    # The runtime's fill kernel (12 + 4 VGPRs, no LDS) fills every wave slot: it must not read as limited.
    fill = _kernel(_report(corpus / ROCPD), "__amd_rocclr_fillBufferAligned").occupancy
    assert fill is not None and (fill.theoretical_pct, fill.limiters) == (100.0, ("wave slots",))


def test_rocprof_compute_bmm_fills_the_wave_slots_and_names_achieved_as_not_read(corpus: Path) -> None:
    report = _report(corpus / BMM)
    occ = _kernel(report, "batched_matrix_multiplication_matrix_core").occupancy
    assert occ is not None and occ.amd is not None
    assert (occ.amd.arch_vgpr, occ.amd.lds_per_workgroup, occ.amd.workgroup_size) == (48, 2048, 256)
    assert (occ.theoretical_pct, occ.limiters, occ.active_blocks_per_sm) == (100.0, ("wave slots",), 8)
    assert occ.to_dict()["waves_per_cu"] == 32
    assert occ.achieved_pct is None  # rocprof-compute's Wavefront Occupancy needs the XCD count (not kept)
    assert any(u["report"] == "achieved occupancy" and "SQ_ACCUM_PREV_HIRES" in u["line"]
               for u in report.to_dict()["unavailable"])


def test_mi100_vcopy_on_gfx908_has_ten_wave_slots_per_simd(corpus: Path) -> None:
    occ = _report(corpus / VCOPY).kernels[0].occupancy
    assert occ is not None and occ.amd_result is not None
    assert occ.amd_result.gfx == "gfx908" and occ.amd_result.max_waves_per_cu == 40
    assert (occ.theoretical_pct, occ.limiters, occ.active_blocks_per_sm) == (100.0, ("wave slots",), 10)


def test_a_file_naming_no_gpu_needs_the_card_for_the_gfx_target(corpus: Path) -> None:
    tables = load_corpus(corpus / LAPLACIAN)
    row = tables.kernels.iloc[0]
    occ, missing = occupancy_row(row, MetricView(tables.metrics), None, gfx=device_gfx(tables, row["device"]))
    assert occ.theoretical_pct is None and occ.amd is not None and occ.amd.arch_vgpr == 16
    assert [m.metric for m in missing] == ["the device's gfx target"]
    gfx = device_gfx(tables, row["device"], lookup("mi250x"))
    occ, missing = occupancy_row(row, MetricView(tables.metrics), None, gfx=gfx)
    assert gfx == "gfx90a" and occ.theoretical_pct == 100.0 and not missing


def test_the_amd_kernel_card_reads_the_same_in_every_format(corpus: Path) -> None:
    from iotrace.trace.render.html import report_html
    from iotrace.trace.render.jsonout import dumps
    from iotrace.trace.render.markdown import report_markdown

    report = _report(corpus / ROCPD)
    text = _terminal(report)
    assert "grid 2×128×1 workgroups, workgroup 256×1×1 work-items, " + CK_CARD in text
    assert "registers/thread" not in text and "shared memory/block" not in text
    assert "theoretical 12.5% = 4 of 32 waves per CU (1 wave per SIMD, 1 workgroup per CU; iotrace, gfx942), " \
           "limited by VGPRs, LDS" in text
    markdown = report_markdown(report)
    assert CK_CARD in markdown and "| LDS/workgroup |" in markdown and "smem/block" not in markdown
    page = report_html(report)
    assert CK_CARD in page and "128 arch + 384 accum VGPRs, 112 SGPRs" in page and "LDS/workgroup" in page
    kernel = next(k for k in json.loads(dumps(report.to_dict()))["kernels"] if "ck_tile" in k["name"])
    assert kernel["occupancy"]["resources"]["accum_vgpr"] == 384 and kernel["occupancy"]["theoretical_pct"] == 12.5


def test_an_nvidia_kernel_card_is_unchanged(corpus: Path) -> None:
    report = _report(corpus / NCU)
    text = _terminal(report)
    assert "registers/thread, shared memory/block" in text and "VGPRs" not in text and "wave64" not in text
    occ = report.kernels[0].occupancy
    assert occ is not None and occ.amd is None and occ.result is not None
    assert occ.active_blocks_per_sm == occ.result.active_blocks_per_sm
    assert not {"resources", "gfx", "steps", "waves_per_cu"} & set(occ.to_dict())


def test_info_names_the_gfx_target_cus_and_api_calls(corpus: Path) -> None:
    code, out, _ = cli_in_process("info", str(corpus / ROCPD))
    assert code == 0
    assert "0: AMD Instinct MI300X, gfx942, 304 CUs -> card mi300x" in out
    assert "8 devices" in out and "CC ?" not in out and "SMs" not in out
    code, out, _ = cli_in_process("info", str(corpus / ROCPD), "--json")
    assert json.loads(out)["counts"]["api_calls"] == 629  # the HIP API rows (the text line is the report's counts)
    code, out, _ = cli_in_process("info", str(corpus / VCOPY))
    assert "2: MI100, gfx908, 120 CUs -> card mi100" in out and "lds 0 B" in out


@pytest.mark.parametrize("name", [ROCPD, VCOPY])
def test_info_json_keeps_the_gfx_target(corpus: Path, name: str) -> None:
    code, out, _ = cli_in_process("info", str(corpus / name), "--json")
    assert code == 0
    devices = json.loads(out)["devices"]
    assert {(d["vendor"], d["arch"]) for d in devices} in ({("amd", "gfx942")}, {("amd", "gfx908")})
