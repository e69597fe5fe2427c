"""Every file in ../shared/corpus loads through iotrace.trace.load, with values checked against the file itself.

Expected values were read independently of iotrace: the SQLite files with the sqlite3 CLI, the Kineto JSON with
plain ``json`` (counts of ``cat == kernel`` events, first event's args), the ncu reports with ``ncu_report`` and
PROVENANCE.md, the CSVs by eye. Where a fact is checked here it is recomputed from the raw file in the test too.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from iotrace.trace import TraceFormatError, TraceToolError, load
from iotrace.trace.reports.report import build_report
from tests.conftest import corpus_bench_results, corpus_exports, load_corpus, ncu_launches, run_cli

# file -> (format, kernels, launches, devices' first card, first kernel facts, extras)
# first kernel facts: name fragment, registers, (grid), (block), duration in ns.
EXPECTED = {
    "kineto/a100_pg509_alexnet_kineto_trace.json.gz":
        ("kineto-json", 79, "a100-sxm4-40gb", ("distribution_elementwise_grid_stride_kernel", 47, (864, 1, 1),
                                               (256, 1, 1), 71_000)),
    "kineto/a100_pg509_backward_thread_callstack_kineto.json":
        ("kineto-json", 1, None, ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", 240, (32, 1, 2),
                                  (128, 1, 1), 45_000)),
    "kineto/a100_pg509_cupti_range_profiler_flops_kineto.json.gz":
        ("kineto-json", 77, "a100-sxm4-40gb", ("distribution_elementwise_grid_stride_kernel", None, None, None,
                                               None)),
    "kineto/a100_pg509_multistream_event_sync_kineto.json.gz":
        ("kineto-json", 3, "a100-sxm4-40gb", ("ampere_sgemm_128x64_nn", 122, (8, 16, 5), (128, 1, 1), 123_000)),
    "kineto/a100_pg509_nccl_kineto.json.gz":
        ("kineto-json", 2700, "a100-sxm4-40gb", ("bn_bw_1C11_kernel_new", 40, (512, 1, 1), (512, 1, 1), 41_407)),
    "kineto/a100_pg509_triton_kernel_kineto.json.gz":
        ("kineto-json", 1, "a100-sxm4-40gb", ("triton_poi_fused_add_cos_sin_0", 16, (1, 1, 1), (128, 1, 1), 1_760)),
    "kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz":
        ("kineto-json", 14, None, ("elementwise_kernel<128, 2", None, None, None, 6_880)),
    "kineto/old_schema_theoretical_occupancy_gpu_metrics_input.json":
        ("kineto-json", 30, "v100-dgxs-32gb", ("gemmSN_TN_kernel_64addr", 72, (1, 2, 1), (128, 1, 1), 3_000)),
    "kineto/v100_dgxs_resnet50_tbplugin_kineto.json.gz":
        ("kineto-json", 8772, "v100-dgxs-32gb", ("computeOffsetsKernel", 38, (50, 1, 1), (256, 1, 1), 2_000)),
    "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz":
        ("kineto-json", 9876, "v100-sxm2-16gb", ("CUDAFunctor_add<float>", 20, (110, 1, 1), (128, 1, 1), 5_000)),
    "kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz":
        ("kineto-json", 4350, "v100-sxm2-32gb", ("CatArrayBatchedCopy_aligned16_contig", 30, (4, 106, 1),
                                                (128, 1, 1), 4_928)),
    "ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv":
        ("ncu-csv", 9, None, ("basic(int, int, int", None, (32, 32, 1), (32, 32, 1), 10_776_576)),
    "ncu-csv/nvprof_gpu_summary_epicflow_sor.csv":
        ("nvprof-csv", 2, None, ("red_sor(float*", None, None, None, 237_430_000)),
    "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep":
        ("ncu-rep", 4, "a10g", ("one_blocktiling", 51, (16, 16, 1), (512, 1, 1), 431_648)),
    "ncu-rep/gtx1660super_dot_product_full_ncu2024.1.ncu-rep":
        ("ncu-rep", 2, "gtx1660super", ("dot_prod_naive", 16, (4096, 1, 1), (256, 1, 1), 2_170_464)),
    "ncu-rep/rtx2060super_gsz_compress_ncu2024.3.ncu-rep":
        ("ncu-rep", 10, "rtx2060super", ("GSZ_compress_kernel_outlier", 64, (31, 1, 1), (32, 1, 1), 79_232)),
    "ncu-rep/rtx2070_matrixMul_nsight_compute_2019.nsight-cuprof-report":
        ("ncu-rep", 8, "rtx2070", ("matrixMulCUDA", 16, None, None, None)),
    "ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep":
        ("ncu-rep", 1, "rtx4050-laptop", ("rgb_increase_brightness_pass_ready", 16, (128, 1, 1), (512, 1, 1),
                                          13_600)),
    "ncu-rep/rtx4050laptop_rgb_coalesced_memchart_ncu2023.3.ncu-rep":
        ("ncu-rep", 1, "rtx4050-laptop", ("rgb_increase_brightness_coalesced", 26, (64, 1, 1), (1024, 1, 1),
                                          14_112)),
    "ncu-rep/rtx4050laptop_rgb_uncoalesced_memchart_ncu2023.3.ncu-rep":
        ("ncu-rep", 1, "rtx4050-laptop", ("rgb_increase_brightness(", 16, (64, 1, 1), (1024, 1, 1), 17_504)),
    "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep":
        ("ncu-rep", 1, "t4", ("matrix_addition2D", 16, (63, 63, 1), (16, 16, 1), 52_576)),
    "ncu-rep/v100_sxm2_miniweather_openacc_full_ncu2022.2.ncu-rep":
        ("ncu-rep", 5, "v100-sxm2-32gb", ("set_halo_values_x_396_gpu", 34, (256, 1, 1), (128, 1, 1), 11_360)),
    "nsys/a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite":
        ("nsys-sqlite", 5, "a100-sxm4-40gb", ("saxpy", 26, (2, 1, 1), (512, 1, 1), 17_704_808)),
    "nsys/a100_sxm4_80gb_cloverleaf_nsys2024.5.sqlite":
        ("nsys-sqlite", 1312, "a100-sxm4-80gb", ("par_ranged2d_kernel", 32, (115426, 1, 1), (256, 1, 1),
                                                 1_367_644)),
    "nsys/a40_a100pcie_cutlass_gemm_nsys2023.2.sqlite":
        ("nsys-sqlite", 6, "a100-pcie-40gb", ("cutlass::Kernel", 252, (128, 96, 1), (128, 1, 1), 27_041_947)),
    "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite":
        ("nsys-sqlite", 36, "rtx3090", ("permutationKernelPLC3", 30, (12544, 1, 1), (128, 1, 1), 111_521)),
    "nsys/nbody_nvtx_pushpop_trace_nsys_stats.csv": ("nsys-stats-csv", 0, None, None),
    "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep":
        ("ncu-rep", 1, "a100-pcie-80gb", ("cutlass::gemm::kernel::B2bGemm", 32, (16, 1, 1), (256, 1, 1), 9_344)),
    "ncu-rep/a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep":
        ("ncu-rep", 5, "a40", ("julia__5_11155", 16, (39312, 1, 1), (256, 1, 1), 70_464)),
    "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep":
        ("ncu-rep", 100, "gtx1660", ("assign_pixels_to_centroids", 23, (7500, 1, 1), (128, 1, 1), 120_704)),
    "ncu-rep/gtx1660ti_mojo_math_kernels_ncu2022.4.ncu-rep":
        ("ncu-rep", 4, "gtx1660ti", ("warmingUp", 16, (1, 1, 1), (64, 1, 1), 1_600)),
    "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite":
        ("nsys-sqlite", 19, "h200-sxm", ("distribution_elementwise_grid_stride_kernel", 40, (1056, 1, 1),
                                         (256, 1, 1), 40_641)),
    "kineto-ranks/rank-0.json.gz":
        ("kineto-json", 1154, None, ("fbgemm_gpu::permute_2D_lengths_kernel", 27, (2400, 1, 1), (256, 1, 1),
                                     10_000)),
    "kineto-ranks/rank-1.json.gz":
        ("kineto-json", 1104, None, ("fbgemm_gpu::permute_2D_lengths_kernel", 27, (2400, 1, 1), (256, 1, 1),
                                     10_000)),
    # Tensor cores, tiny grids, pageable/UM copies (PROVENANCE.md, last section): ncu_report's first action; sqlite3.
    "ncu-rep/h100sxm_bf16_gemm_pc_pipeline_full_ncu2024.1.ncu-rep":
        ("ncu-rep", 3, "h100-sxm", ("gemm_bf16_pc_pipeline", 157, (4096, 1, 1), (256, 1, 1), 4_041_312)),
    "ncu-rep/a40_imma_int8_tensor_julia_full_ncu2022.1.ncu-rep":
        ("ncu-rep", 1, "a40", ("julia_runsteps_6563", 64, (84, 1, 1), (32, 32, 1), 16_700_384)),
    "ncu-rep/a40_imma_1block_grid_julia_full_ncu2021.2.ncu-rep":
        ("ncu-rep", 1, "a40", ("julia_runsteps_6374", 63, (1, 1, 1), (32, 32, 1), 32_576)),
    "ncu-rep/h100_stochastic_round_bf16_1block_full_ncu2024.3.ncu-rep":
        ("ncu-rep", 4, "h100-sxm", ("stochastic_round_bf16", 24, (1, 1, 1), (256, 1, 1), 3_968)),
    "nsys/rtx4090_sumarray_pageable_zerocopy_nsys2023.3.sqlite":
        ("nsys-sqlite", 2, "rtx4090", ("sumArrays(float *", 16, (32768, 1, 1), (512, 1, 1), 207_135)),
    "nsys/gtx1650_windows_matmul_pageable_memcpy_nsys2025.3.sqlite":
        ("nsys-sqlite", 1, "gtx1650-laptop", ("matrixMulKernel", 49, (64, 64, 1), (16, 16, 1), 9_932_539)),
    "nsys/rtx4060laptop_um_add_1block_nsys2023.4.sqlite":
        ("nsys-sqlite", 1, "rtx4060-laptop", ("add(int, float *, float *)", 24, (1, 1, 1), (256, 1, 1), 2_337_721)),
    # AMD (rocprof v1, rocpd; grids in workgroups, as CUDA counts blocks: tests/test_rocprof_formats.py has the rest)
    "rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db":
        ("rocpd-sqlite", 151, "mi300x", ("__amd_rocclr_fillBufferAligned", None, (304, 1, 1), (256, 1, 1), 24_175)),
    "rocprof/mi250_laplacian_rocprof-v1_results.csv":
        ("rocprof-csv", 1004, None, ("test_function_kernel", None, (524288, 1, 1), (256, 1, 1), 1_130_883)),
    "rocprof/mi250_laplacian_rocprof-v1_pmc_counters.csv":
        ("rocprof-csv", 1004, None, ("test_function_kernel", None, (524288, 1, 1), (256, 1, 1), None)),
    "rocprof/mi250_laplacian_rocprof-v1_results.stats.csv":
        ("rocprof-csv", 4, None, ("laplacian_kernel", None, None, None, 2_608_618_986)),
    "rocprof/mi300x_naive_bmm_rocprof-v1_results.copy_stats.csv": ("rocprof-csv", 0, None, None),
    "rocprof/mi300x_naive_bmm_rocprof-v1_results.hip_stats.csv": ("rocprof-csv", 0, None, None),
    "rocprof/r9700_gfx1201_llamacpp_q4_0_rocprof-v1_results.stats.csv":
        ("rocprof-csv", 20, None, ("mul_mat_q<(ggml_type)2, 128, false>", None, None, None, 598_069_423)),
    "rocprof/mi300x_naive_bmm_rocprof-v1_results.json":
        ("rocprof-json", 1, "mi300x", ("batched_matrix_multiplication", None, None, None, 331_634_184_678)),
    # A launch whose profiling failed (ncu_report: launch #1 has no launch__* metric and no duration), and a vLLM V1
    # serving trace of a 70B-class model on 4 H100s (plain json: 13,508 cat == kernel events; the first's args).
    "ncu-rep/rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep":
        ("ncu-rep", 2, None, ("initializeBiNodes", 16, (97657, 1, 1), (256, 1, 1), 15_141_984)),
    "kineto/h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz":
        ("kineto-json", 13508, "h100-sxm", ("direct_copy_kernel_cuda", 32, (3, 1, 1), (128, 1, 1), 3_200)),
}
KINETO = sorted(n for n in EXPECTED if n.split("/")[0] in ("kineto", "kineto-ranks"))
NSYS_REPORTS = ["nsys/rtx3090_tensorrt_memfusion.nsys-rep", "nsys/rtx4050laptop_rgb_nsys.nsys-rep",
                "nsys/v100_miniweather_noasync_legacy.qdrep"]

# LLM benchmark results (read by `iotrace bench import`, tests/test_bench_import_corpus.py): file -> what the trace
# loader's one-line refusal says it is (as PROVENANCE.md says).
BENCH_RESULTS = {
    "bench-outputs/l40s_epyc9534_llama-bench_cpu_gpu_b7199.md": "a llama.cpp llama-bench report (Markdown table)",
    "bench-outputs/r9700_gfx1201_llama-bench_rocm_b7981.jsonl": "a llama.cpp llama-bench result file",
    "bench-outputs/8xmi300x_vllm0.6.3_benchmark_serving_llama3.1-405b-fp8_32qps.json":
        "a vLLM benchmark_serving result file",
    "bench-outputs/8xmi300x_vllm0.6.4_benchmark_throughput_405b-fp8-kv.json": "a vLLM benchmark_throughput result file",
    "bench-outputs/4xh200_sglang_bench_serving_llama3.3-70b_offline.jsonl": "an SGLang bench_serving result file",
}

# rocprof-compute workload folders: read whole, as folders (tests/test_rocprof_compute.py checks them).
ROCPROF_COMPUTE = {f"rocprof/{folder}/{n}.csv" for folder, names in (
    ("mi100_vcopy_omniperf2.0_rocm6.0", "pmc_dispatch_info pmc_perf sysinfo timestamps"),
    ("mi210_multikernel_omniperf2.1_rocm6.2", "pmc_dispatch_info pmc_perf roofline sysinfo timestamps"),
    ("mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1", "pmc_dispatch_info pmc_kernel_top pmc_perf roofline sysinfo"))
    for n in names.split()}

def loaded(corpus: Path, name: str):
    return load_corpus(corpus / name)


def test_every_corpus_file_is_covered(corpus: Path) -> None:
    present = {str(p.relative_to(corpus)) for p in corpus.rglob("*") if p.is_file() and p.parent != corpus}
    assert present == set(EXPECTED) | set(NSYS_REPORTS) | set(BENCH_RESULTS) | ROCPROF_COMPUTE
    assert {str(p.relative_to(corpus)) for p in corpus_bench_results(corpus)} == set(BENCH_RESULTS)
    assert not set(map(str, corpus_exports(corpus))) & {str(corpus / n) for n in BENCH_RESULTS}


@pytest.mark.parametrize("name", sorted(BENCH_RESULTS))
def test_bench_results_are_refused_as_traces_in_one_line_by_content(corpus: Path, name: str, tmp_path: Path) -> None:
    """load() names the file, says what it is and which command reads it, under its own name and under one that
    says nothing (a link): never read as the trace format it resembles (a Chrome trace, JSON lines)."""
    anonymous = tmp_path / "capture.bin"
    anonymous.symlink_to(corpus / name)
    for path in (corpus / name, anonymous):
        with pytest.raises(TraceFormatError) as refused:
            load(path)
        message = str(refused.value)
        assert message.startswith(f"{path}: is {BENCH_RESULTS[name]}"), message
        assert ", a benchmark result and not a profiler trace — read it with `iotrace bench import FILE`" in message
        assert "\n" not in message and "damaged" not in message


@pytest.mark.parametrize("name", ["bench-outputs/8xmi300x_vllm0.6.4_benchmark_throughput_405b-fp8-kv.json",
                                  "bench-outputs/4xh200_sglang_bench_serving_llama3.3-70b_offline.jsonl"])
def test_cli_info_refuses_a_bench_result_in_one_line(corpus: Path, name: str) -> None:
    done = run_cli("info", str(corpus / name))
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)  # one line: no traceback
    assert done.stderr.startswith(f"iotrace: error: {corpus / name}: is {BENCH_RESULTS[name]}")
    assert "iotrace bench import FILE" in done.stderr


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_loads_with_its_values(corpus: Path, name: str) -> None:
    fmt, n_kernels, card, first = EXPECTED[name]
    tables = loaded(corpus, name)
    assert tables.meta["format"] == fmt
    assert tables.meta["source"] == str(corpus / name)
    assert len(tables.kernels) == n_kernels
    if card is not None:
        assert card in set(tables.devices["card"])
    if first is None:
        return
    fragment, registers, grid, block, duration = first
    row = tables.kernels.iloc[0]
    assert fragment in row["name"]
    if registers is not None:
        assert row["registers_per_thread"] == registers
    if grid is not None:
        assert (row["grid_x"], row["grid_y"], row["grid_z"]) == grid
        assert (row["block_x"], row["block_y"], row["block_z"]) == block
    if duration is not None:
        assert row["duration_ns"] == pytest.approx(duration)


@pytest.mark.parametrize("name", KINETO)
def test_kineto_counts_and_total_time_match_plain_json(corpus: Path, name: str) -> None:
    """iotrace keeps every kernel event: count and total duration equal a plain json pass over the file."""
    opener = gzip.open if name.endswith(".gz") else open
    with opener(corpus / name, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]
    tables = loaded(corpus, name)
    timed = tables.kernels.dropna(subset=["duration_ns"])
    assert len(timed) == len(kernels)
    assert timed["duration_ns"].sum() == pytest.approx(sum(e["dur"] for e in kernels) * 1000, rel=1e-9)


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.endswith(".sqlite")))
def test_nsys_sqlite_matches_sqlite(corpus: Path, name: str) -> None:
    with sqlite3.connect(f"file:{corpus / name}?mode=ro&immutable=1", uri=True) as db:
        count, total = db.execute("SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        gpus = [r[0] for r in db.execute("SELECT name FROM TARGET_INFO_GPU ORDER BY id")]
    tables = loaded(corpus, name)
    assert len(tables.kernels) == count
    assert tables.kernels["duration_ns"].sum() == total
    assert list(tables.devices["name"]) == gpus
    assert tables.meta["version"] and tables.meta["schema"]


def test_nsys_schema_versions_and_metadata_tables(corpus: Path) -> None:
    old = loaded(corpus, "nsys/a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite").meta
    new = loaded(corpus, "nsys/a100_sxm4_80gb_cloverleaf_nsys2024.5.sqlite").meta
    assert (old["version"], old["schema"]) == ("2022.2.1.31", "2.9.1 (EXPORT_META_DATA)")
    assert (new["version"], new["schema"]) == ("2024.5.1.113", "3.13.2 (META_DATA_EXPORT)")


def test_nsys_nvtx_joined_through_the_launching_call(corpus: Path) -> None:
    """sqlite3: kernel correlationId 104037 was launched at 19309602 ns on a thread where the push/pop ranges
    'ExecutionContext::execute' [18992108, 25834711] and 'Reformatting CopyNode ...' [19261500, 19381712] were open."""
    tables = loaded(corpus, "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite")
    kernel = tables.kernels.set_index("correlation_id").loc[104037]
    assert kernel["nvtx_path"] == ("ExecutionContext::execute > Reformatting CopyNode for Input Tensor 0 to "
                                   "/conv1/Conv + /relu/Relu")
    inner = tables.ranges.set_index("id").loc[kernel["nvtx_range_id"]]
    assert (inner["start_ns"], inner["end_ns"], inner["depth"]) == (19261500, 19381712, 1)
    assert tables.kernels["nvtx_path"].notna().all()
    assert len(tables.ranges) == 59
    saxpy = loaded(corpus, "nsys/a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite")
    assert len(saxpy.ranges) == 22 and set(saxpy.kernels["nvtx_path"]) == {"saxpy"}
    assert "MPI" in set(saxpy.ranges["domain"])


def test_kineto_schemas_occupancy_and_profiler_counters(corpus: Path) -> None:
    old = loaded(corpus, "kineto/old_schema_theoretical_occupancy_gpu_metrics_input.json")
    assert old.meta["schema"].startswith("2021")
    assert old.kernels["theoretical_occupancy_pct"].notna().all()
    assert old.devices.iloc[0]["sm_count"] == 80 and old.devices.iloc[0]["cc"] == "7.0"
    edge = loaded(corpus, "kineto/a100_pg509_backward_thread_callstack_kineto.json").kernels.iloc[0]
    assert (edge["smem_bytes"], edge["blocks_per_sm"], edge["est_achieved_occupancy_pct"]) == (98304, 0.5925926, 0)
    sync = loaded(corpus, "kineto/a100_pg509_multistream_event_sync_kineto.json.gz").kernels.iloc[0]
    assert (sync["smem_bytes"], sync["est_achieved_occupancy_pct"]) == (12544, 25)
    flops = loaded(corpus, "kineto/a100_pg509_cupti_range_profiler_flops_kineto.json.gz")
    assert flops.kernels["duration_ns"].isna().all() and len(flops.metrics) == 77 * 9
    first = flops.metrics[flops.metrics["kernel_id"] == 0].set_index("metric")["value"]
    assert first["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 38731776
    assert first["smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"] == 4866048
    assert any("cuda_profiler_range" in note for note in flops.meta["notes"])


def test_rocm_trace_loads_with_fields_missing(corpus: Path) -> None:
    amd = loaded(corpus, "kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz")
    assert amd.kernels["registers_per_thread"].isna().all()
    assert amd.kernels["est_achieved_occupancy_pct"].isna().all()
    assert set(amd.devices["vendor"]) == {"amd"} and amd.devices["card"].isna().all()
    assert amd.devices["cc"].isna().all()
    assert any("ROCm" in note for note in amd.meta["notes"])


def test_kineto_ranges_give_kernels_their_path(corpus: Path) -> None:
    ns = loaded(corpus, "kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz")
    assert ns.kernels.iloc[0]["nvtx_path"] == "ProfilerStep#101 > ## forward ## > DistributedDataParallel.forward"
    assert ns.kernels.iloc[0]["end_ns"] - ns.kernels.iloc[0]["start_ns"] == 4928  # ns precision kept


def test_ncu_rep_metrics_devices_and_versions(corpus: Path) -> None:
    t4 = loaded(corpus, "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep")
    assert t4.meta["version"] == "2024.2.1.0 (build 34372528)"
    # 1113 metrics, plus the 10 opcodes of sass__inst_executed_per_opcode_with_modifier_all kept per instance
    # (name[OPCODE] rows, which reports/tensor_flops.py reads).
    assert len(t4.metrics) == 1123
    assert t4.metrics["metric"].str.startswith("sass__inst_executed_per_opcode_with_modifier_all[").sum() == 10
    kernel = t4.kernels.iloc[0]
    assert kernel["theoretical_occupancy_pct"] == 100
    assert kernel["achieved_occupancy_pct"] == pytest.approx(79.37, abs=0.01)
    values = t4.metrics.set_index("metric")
    assert values.loc["launch__occupancy_limit_registers", "value"] == 16
    assert values.loc["gpu__time_duration.sum", "unit"] == "ns"
    rgb = loaded(corpus, "ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep")
    assert rgb.kernels.iloc[0]["static_smem_bytes"] == 12288
    assert rgb.devices.iloc[0]["name"] == "NVIDIA GeForce RTX 4050 Laptop GPU"
    legacy = loaded(corpus, "ncu-rep/rtx2070_matrixMul_nsight_compute_2019.nsight-cuprof-report")
    assert legacy.meta["version"] is None and legacy.meta["schema"] == "FileHeader version 7"
    two = loaded(corpus, "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep").kernels.iloc[1]
    assert (two["registers_per_thread"], round(two["theoretical_occupancy_pct"], 1)) == (150, 16.7)


def _csv_values(path: Path, metric: str) -> dict[str, float]:
    with path.open(newline="") as handle:
        return {row["Kernel Name"]: float(row["Metric Value"].replace(",", ""))
                for row in csv.DictReader(handle) if row["Metric Name"] == metric}


def test_a10g_csv_and_report_agree_on_duration_and_dram_bytes(corpus: Path) -> None:
    """Same SGEMM kernels profiled twice: durations agree within 2%. The report holds no dram__bytes.sum, only
    dram__bytes.sum.per_second; that rate times the duration gives 84-90% of the CSV's dram__bytes.sum (checked
    by hand: 0.900, 0.884, 0.863, 0.843), so DRAM bytes are compared within 20%: the two runs' traffic differs, or
    ncu's rate uses a different time base than gpu__time_duration."""
    csv_path = corpus / "ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv"
    csv_tables = loaded(corpus, "ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv")
    rep = loaded(corpus, "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep")
    durations = _csv_values(csv_path, "gpu__time_duration.sum")
    dram = _csv_values(csv_path, "dram__bytes.sum")
    rep_metrics = rep.metrics.pivot_table(index="kernel_id", columns="metric", values="value")
    csv_by_name = csv_tables.kernels.set_index("name")
    compared = 0
    for _, kernel in rep.kernels.iterrows():
        assert kernel["name"] in durations
        assert csv_by_name.loc[kernel["name"], "duration_ns"] == durations[kernel["name"]]
        assert kernel["duration_ns"] == pytest.approx(durations[kernel["name"]], rel=0.02)
        rate = rep_metrics.loc[kernel["id"], "dram__bytes.sum.per_second"]
        assert rate * kernel["duration_ns"] * 1e-9 == pytest.approx(dram[kernel["name"]], rel=0.2)
        compared += 1
    assert compared == 4


def test_files_without_device_names_have_no_card(corpus: Path) -> None:
    """The A10G CSV states only CC 8.6 (A10G, A40, RTX 3090 share it): no card is guessed."""
    a10g = loaded(corpus, "ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv").devices
    assert list(a10g["cc"]) == ["8.6"] and a10g["card"].isna().all()
    assert loaded(corpus, "ncu-csv/nvprof_gpu_summary_epicflow_sor.csv").devices.empty


def test_nvprof_summary_and_nsys_stats_ranges(corpus: Path) -> None:
    nvprof = loaded(corpus, "ncu-csv/nvprof_gpu_summary_epicflow_sor.csv")
    assert list(nvprof.kernels["launches"]) == [150, 150]
    assert set(nvprof.transfers["kind"]) == {"memcpy HtoD", "memcpy DtoH"}
    assert nvprof.transfers.set_index("kind").loc["memcpy HtoD", "launches"] == 45
    stats = loaded(corpus, "nsys/nbody_nvtx_pushpop_trace_nsys_stats.csv")
    assert len(stats.ranges) == 131
    main = stats.ranges.iloc[0]
    assert (main["name"], main["start_ns"], main["end_ns"], main["thread"]) == ("main", 982845927, 1987944256,
                                                                                3086332)
    assert stats.ranges.iloc[1]["parent_id"] == 1


@pytest.mark.parametrize("name", NSYS_REPORTS)
def test_nsys_reports_need_nsys(corpus: Path, name: str) -> None:
    if shutil.which("nsys"):
        tables = load_corpus(corpus / name)
        assert tables.meta["format"] == "nsys-rep"
        return
    with pytest.raises(TraceToolError, match="nsys export --type sqlite"):
        load_corpus(corpus / name)


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs Nsight Systems (nsys) on PATH to export .nsys-rep")
def test_nsys_rep_and_its_sqlite_agree(corpus: Path) -> None:
    rep = load_corpus(corpus / "nsys/rtx3090_tensorrt_memfusion.nsys-rep")
    sql = loaded(corpus, "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite")
    assert list(rep.kernels["name"]) == list(sql.kernels["name"])
    assert list(rep.kernels["duration_ns"]) == list(sql.kernels["duration_ns"])


def test_launch_times_come_from_the_launching_call(corpus: Path) -> None:
    """launch_ns is the start of the runtime call with the kernel's correlation id, read here straight from the
    export's own tables (nsys SQLite, Kineto JSON), so the timeline's launch latency is the file's."""
    path = corpus / "nsys" / "a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite"
    with sqlite3.connect(path) as db:
        want = dict(db.execute("SELECT k.correlationId, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                               "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"))
    kernels = load_corpus(path).kernels
    assert len(want) == len(kernels) == 5
    assert {int(c): int(t) for c, t in zip(kernels["correlation_id"], kernels["launch_ns"], strict=True)} == want
    assert bool((kernels["start_ns"] > kernels["launch_ns"]).all())

    path = corpus / "kineto" / "a100_pg509_triton_kernel_kineto.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernel = next(e for e in events if e.get("cat") == "kernel")
    call = next(e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")  # Triton: cuLaunchKernel
                and e["args"].get("correlation") == kernel["args"]["correlation"])
    assert call["name"] == "cuLaunchKernel"
    loaded = load_corpus(path).kernels
    assert int(loaded["launch_ns"].iloc[0]) == round(call["ts"] * 1000)


_STANDIN_NSYS = """#!{python}
import shutil, sys
argv = sys.argv[1:]
want = ["export", "--type", "sqlite", "--force-overwrite", "true", "--output"]
if argv[:6] != want or len(argv) != 8 or not argv[7].endswith(".nsys-rep"):
    sys.stderr.write(f"stand-in nsys: unexpected argv {{argv}}\\n")
    sys.exit(97)
if "{mode}" == "broken":
    sys.stderr.write("Error: the report file is corrupted\\n")
    sys.exit(1)
shutil.copy("{sqlite}", argv[6])
"""


@pytest.mark.parametrize("mode", ["ok", "broken"])
def test_nsys_rep_is_converted_with_nsys_export(mode: str, corpus: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The .nsys-rep path on a machine with nsys, driven through a stand-in `nsys` first on PATH that checks the
    export command iotrace runs and answers with the same capture's real SQLite export (PROVENANCE.md: the RTX 3090
    pair); a failing export is one TraceFormatError with nsys's own message."""
    import sys

    stand_in = tmp_path / "nsys"
    stand_in.write_text(_STANDIN_NSYS.format(python=sys.executable, mode=mode,
                                             sqlite=corpus / "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"))
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    report = corpus / "nsys/rtx3090_tensorrt_memfusion.nsys-rep"
    if mode == "broken":
        with pytest.raises(TraceFormatError, match=r"nsys export failed \(exit 1\): Error: the report file is "
                                                   r"corrupted"):
            load(report)
        return
    tables = load(report)
    direct = load_corpus(corpus / "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite")
    assert tables.meta["format"] == "nsys-rep" and tables.meta["converted_with"].endswith("nsys export --type sqlite")
    assert len(tables.kernels) == len(direct.kernels) == 36
    assert tables.kernels["duration_ns"].tolist() == direct.kernels["duration_ns"].tolist()


# --- the files added with the CUTLASS opt-in report (PROVENANCE.md, last rows) ------------------------------------

def _ncu_launches(path: Path) -> list[dict[str, object]]:
    """Name, grid, block, shared memory, duration and metric names of every launch, read with ncu_report itself."""
    def launch(action) -> dict[str, object]:
        def num(name: str) -> float:
            return action.metric_by_name(name).as_double()

        return {"name": action.name(), "grid": int(num("launch__grid_size")), "block": int(num("launch__block_size")),
                "dynamic": int(num("launch__shared_mem_per_block_dynamic")), "duration": num("gpu__time_duration.sum"),
                "metrics": set(action.metric_names())}

    return ncu_launches(path, launch)


def test_a40_repeated_names_keep_each_launch_and_its_grid(corpus: Path) -> None:
    name = "ncu-rep/a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep"
    raw = _ncu_launches(corpus / name)
    kernels = loaded(corpus, name).kernels
    assert [(r["name"], r["grid"], r["dynamic"]) for r in raw] == [
        (n.split("(")[0], g, d) for n, g, d in zip(kernels["name"], kernels["grid_x"], kernels["dynamic_smem_bytes"],
                                                   strict=True)]
    grids: dict[str, set[int]] = {}
    for r in raw:
        grids.setdefault(str(r["name"]), set()).add(int(r["grid"]))  # type: ignore[arg-type]
    assert len(raw) == 5 and len(grids) == 3
    assert sorted(len(g) for g in grids.values()) == [1, 2, 2]  # two names launched twice with different grids
    frb = kernels.iloc[4]
    threads = frb["block_x"] * frb["block_y"] * frb["block_z"]
    assert (frb["dynamic_smem_bytes"], frb["registers_per_thread"], threads) == (76_896, 80, raw[4]["block"]) \
        == (76_896, 80, 768)


def test_gtx1660_hundred_launches_all_kept_without_dram_bytes(corpus: Path) -> None:
    name = "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"
    raw = _ncu_launches(corpus / name)
    tables = loaded(corpus, name)
    assert len(raw) == len(tables.kernels) == 100
    assert tables.kernels["duration_ns"].sum() == pytest.approx(sum(float(r["duration"]) for r in raw))  # 12.0 ms
    assert {(r["grid"], r["block"]) for r in raw} == {(7500, 128)}
    assert not any("dram__bytes.sum" in r["metrics"] for r in raw)  # default set: no DRAM byte counter
    assert "dram__bytes.sum" not in set(tables.metrics["metric"])
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in set(tables.metrics["metric"])


def test_gtx1660ti_small_kernels_and_the_cutlass_dynamic_shared_memory(corpus: Path) -> None:
    mojo = "ncu-rep/gtx1660ti_mojo_math_kernels_ncu2022.4.ncu-rep"
    raw = _ncu_launches(corpus / mojo)
    kernels = loaded(corpus, mojo).kernels
    assert [r["name"] for r in raw] == ["warmingUp", "mathKernel1", "mathKernel2", "mathKernel3"]
    assert list(kernels["duration_ns"]) == [r["duration"] for r in raw]
    assert loaded(corpus, mojo).devices.iloc[0]["sm_count"] == 24
    cutlass = "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep"
    (launch,) = _ncu_launches(corpus / cutlass)
    kernel = loaded(corpus, cutlass).kernels.iloc[0]
    assert (kernel["static_smem_bytes"], kernel["dynamic_smem_bytes"]) == (0, launch["dynamic"]) == (0, 148_992)
    device = loaded(corpus, cutlass).devices.iloc[0]
    assert (device["name"], device["sm_count"], device["cc"]) == ("NVIDIA A100 80GB PCIe", 108, "8.0")


def test_h200_nvtx_ranges_and_the_kernels_they_hold(corpus: Path) -> None:
    name = "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"
    with sqlite3.connect(f"file:{corpus / name}?mode=ro&immutable=1", uri=True) as db:
        ranges = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()[0]  # push/pop
        inside = db.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId WHERE EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.eventType = 59 "
            "AND n.globalTid = r.globalTid AND n.start <= r.start AND n.end >= r.start)").fetchone()[0]
    tables = loaded(corpus, name)
    assert (tables.meta["version"], tables.meta["schema"]) == ("2024.6.2.25", "3.16.1 (META_DATA_EXPORT)")
    assert len(tables.ranges) == ranges == 652
    assert int(tables.kernels["nvtx_path"].notna().sum()) == inside == 2
    assert tables.devices.iloc[0]["cc"] == "9.0" and tables.devices.iloc[0]["sm_count"] == 132


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_ranks_of_one_nccl_job(corpus: Path, rank: int) -> None:
    name = f"kineto-ranks/rank-{rank}.json.gz"
    doc = json.loads(gzip.decompress((corpus / name).read_bytes()))
    assert doc["distributedInfo"] == {"backend": "nccl", "rank": rank, "world_size": 128}
    nccl = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    kernels = loaded(corpus, name).kernels
    assert int(kernels["name"].str.contains("nccl", case=False).sum()) == len(nccl) == 10
    assert loaded(corpus, name).devices.empty  # no deviceProperties in the file: no card is guessed


NEW_FILES = ["ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep",
             "ncu-rep/a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep",
             "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep",
             "ncu-rep/gtx1660ti_mojo_math_kernels_ncu2022.4.ncu-rep", "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite",
             "kineto-ranks/rank-0.json.gz", "kineto-ranks/rank-1.json.gz"]
# the tensor-core reports, tiny grids and pageable/UM copy captures (PROVENANCE.md, last section)
NEWER_FILES = [n for n in EXPECTED if n.split("/")[1].startswith(
    ("h100sxm_bf16", "a40_imma", "h100_stochastic", "rtx4090_sumarray", "gtx1650_windows", "rtx4060laptop_um"))]


@pytest.mark.parametrize("name", NEW_FILES + NEWER_FILES)
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_new_files_sniff_by_content_and_run_through_info(corpus: Path, name: str, tmp_path: Path) -> None:
    """Sniffed by content under a name that says nothing (a link, nothing copied), and `iotrace info --json`
    states the file's own kernel count and device (the GTX 1650 capture's second, 0-SM adapter has no card)."""
    fmt, n_kernels, card, _ = EXPECTED[name]
    anonymous = tmp_path / "capture.bin"
    anonymous.symlink_to(corpus / name)
    assert load(anonymous).meta["format"] == fmt
    done = run_cli("info", str(corpus / name), "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["format"] == fmt and info["counts"]["kernel_rows"] == n_kernels
    assert [d["card"] for d in info["devices"]] == ([card] if card else []) + ([None] if "gtx1650" in name else [])


@pytest.mark.parametrize("name", [n for n in NEWER_FILES if n.endswith(".ncu-rep")])
def test_tensor_and_tiny_grid_reports_keep_every_launch(corpus: Path, name: str) -> None:
    """Each launch's name, grid, block, dynamic smem and duration are ncu_report's; counts and grids PROVENANCE.md's."""
    raw = _ncu_launches(corpus / name)
    kernels = loaded(corpus, name).kernels
    grids = kernels["grid_x"] * kernels["grid_y"] * kernels["grid_z"]
    blocks = kernels["block_x"] * kernels["block_y"] * kernels["block_z"]
    assert [(r["grid"], r["block"], r["dynamic"], r["duration"]) for r in raw] == list(
        zip(grids, blocks, kernels["dynamic_smem_bytes"], kernels["duration_ns"], strict=True))
    assert all(str(r["name"]) in k for r, k in zip(raw, kernels["name"], strict=True))
    assert (len(raw), {r["grid"] for r in raw}, {r["dynamic"] for r in raw}) == {
        "h100sxm": (3, {4096}, {163_840}), "a40": (1, {84}, {84_096}) if "int8" in name else (1, {1}, {0}),
        "h100": (4, {1}, {0})}[name.split("/")[1].split("_")[0]]


@pytest.mark.parametrize("name", [n for n in NEWER_FILES if n.endswith(".sqlite")])
def test_pageable_and_unified_memory_copies_match_sqlite(corpus: Path, name: str) -> None:
    """Copies per CUPTI copyKind (1 HtoD, 2 DtoH, 11/12 unified-memory migrations: the export's
    ENUM_CUDA_MEMCPY_OPER) and their bytes, as in sqlite3."""
    named = {1: "memcpy HtoD", 2: "memcpy DtoH", 11: "memcpy HtoD (unified memory)",
             12: "memcpy DtoH (unified memory)"}
    with sqlite3.connect(f"file:{corpus / name}?mode=ro&immutable=1", uri=True) as db:
        want = {named[kind]: (count, total) for kind, count, total in db.execute(
            "SELECT copyKind, count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind")}
    copies = loaded(corpus, name).transfers.groupby("kind")["bytes"].agg(["count", "sum"])
    assert {kind: (int(row["count"]), int(row["sum"])) for kind, row in copies.iterrows()} == want
    assert want == {"rtx4090": {"memcpy HtoD": (2, 134_217_728), "memcpy DtoH": (2, 134_217_728)},
                    "gtx1650": {"memcpy HtoD": (2, 8_388_608), "memcpy DtoH": (1, 4_194_304)},
                    "rtx4060laptop": {"memcpy HtoD (unified memory)": (48, 8_388_608),
                                      "memcpy DtoH (unified memory)": (24, 4_194_304)}}[
        name.split("/")[1].split("_")[0]]


def test_a_display_adapter_with_no_sms_gets_no_card_and_no_properties(corpus: Path) -> None:
    """TARGET_INFO_GPU's 'Microsoft Basic Render Driver' (smCount 0, every property 0) stays device 1 with no card,
    SMs, CC or memory, and a note says why; the GTX 1650 is the 16-SM laptop card; a report divides by no zero."""
    name = "nsys/gtx1650_windows_matmul_pageable_memcpy_nsys2025.3.sqlite"
    with sqlite3.connect(f"file:{corpus / name}?mode=ro&immutable=1", uri=True) as db:
        rows = db.execute("SELECT id, name, smCount, totalMemory FROM TARGET_INFO_GPU ORDER BY id").fetchall()
    assert rows == [(0, "NVIDIA GeForce GTX 1650", 16, 4294639616), (1, "Microsoft Basic Render Driver", 0, 0)]
    tables = loaded(corpus, name)
    gtx, adapter = (tables.devices.iloc[i] for i in (0, 1))
    assert (gtx["card"], gtx["sm_count"], gtx["cc"], gtx["memory_bytes"]) == ("gtx1650-laptop", 16, "7.5", 4294639616)
    assert (adapter["device"], adapter["name"]) == (1, "Microsoft Basic Render Driver")
    assert all(pd.isna(adapter[c]) for c in ("card", "cc", "vendor", "sm_count", "memory_bytes", "warp_size"))
    assert [n[:81] for n in tables.meta["notes"] if "Basic Render" in n or "CardBook" in n] == [
        "device 1 'Microsoft Basic Render Driver' has 0 SMs: a display adapter, not a CUDA"]
    (kernel,) = build_report(tables).kernels
    assert kernel.occupancy is not None and kernel.occupancy.theoretical_pct is not None
