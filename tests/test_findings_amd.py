"""Findings on AMD traces in AMD's terms: the same rules and ranking as NVIDIA's, never CUDA-only advice.

A sweep over the real AMD corpus files (rocprofv3's rocpd database, rocprof v1's results.csv and results.json, three
rocprof-compute workloads, a ROCm Kineto trace) asserts that no finding's sentence, next step or evidence and no
report note names an NVIDIA-only tool, call or word; the findings that fire are pinned with their numbers; the same
rules on NVIDIA files keep NVIDIA's words; AMD's library kernels classify as libraries.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from iotrace.trace.findings.advice import next_step
from iotrace.trace.reports.origin import AMD_FAMILIES, TOPICS, call_advice, classify
from iotrace.trace.reports.records import Finding
from iotrace.trace.reports.report import Report, build_report
from iotrace.trace.reports.vendor import AMD, NVIDIA, vocabulary_of
from tests.conftest import CORPUS, load_corpus

ROCPD = "rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db"
V1_CSV = "rocprof/mi250_laplacian_rocprof-v1_results.csv"
V1_JSON = "rocprof/mi300x_naive_bmm_rocprof-v1_results.json"
BF16 = "rocprof/mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1"
MI210 = "rocprof/mi210_multikernel_omniperf2.1_rocm6.2"
MI100 = "rocprof/mi100_vcopy_omniperf2.0_rocm6.0"
KINETO = "kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz"
FAST = (ROCPD, V1_CSV, V1_JSON, BF16, MI210, MI100)
NVIDIA_MEMCPY = "nsys/rtx4090_sumarray_pageable_zerocopy_nsys2023.3.sqlite"
NVIDIA_KINETO = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"

#: Words that are NVIDIA's alone: its tools, its runtime calls, its hardware words, its compiler knobs.
CUDA_ONLY = re.compile(r"\bncu\b|\bnsys\b|Nsight|cudaMemcpy|cudaMemset|cudaHost|cudaGraph|CUDA graph|\bSMs?\b"
                       r"|\bwarps?\b|__launch_bounds__|maxrregcount|\bnvcc\b|tensor cores?|\bTF32\b|cuBLAS|cuDNN"
                       r"|compute capability|smsp__|launch__|-gencode|carveout")
#: A threshold's citation of the NVIDIA rule whose check an AMD finding makes: honest, and not advice.
CITATION = re.compile(r"the same check as [^()]*\((?:[^()]|\([^()]*\))*\)")


@cache
def _report(name: str) -> Report:
    return build_report(load_corpus(CORPUS / name), top=1000)


def _texts(report: Report) -> list[str]:
    out = list(report.notes)
    for f in report.findings:
        out += [f.text, f.try_next] + [f"{e.metric} {e.threshold}" for e in f.evidence]
    out += [u["line"] for u in report.unavailable]  # what is missing, and the command that collects it
    return out


def _cuda_words(report: Report) -> list[str]:
    return [f"{m.group(0)!r} in {t[:160]!r}" for t in _texts(report)
            for m in CUDA_ONLY.finditer(CITATION.sub("", t))]


def _rule(report: Report, rule: str) -> list[Finding]:
    return [f for f in report.findings if f.rule == rule]


@pytest.mark.parametrize("name", FAST)
def test_no_cuda_only_words_on_amd(corpus, name: str) -> None:
    report = _report(name)
    assert vocabulary_of(report.tables) is AMD
    assert report.findings  # the sweep reads findings that fired, not an empty report
    assert _cuda_words(report) == []


@pytest.mark.slow
def test_no_cuda_only_words_on_the_rocm_kineto_trace(corpus) -> None:
    report = _report(KINETO)
    assert vocabulary_of(report.tables) is AMD  # a Kineto trace whose devices are AMD's
    assert _cuda_words(report) == []
    [launch] = _rule(report, "launch-bound")
    assert launch.evidence[0].value == 7
    assert "HIP graph" in launch.try_next and "hipgraph.html" in launch.try_next
    [memcpy] = _rule(report, "sync-memcpy")
    assert "hipMemcpyWithStream ×2" in memcpy.text and "hipMemcpyAsync" in memcpy.try_next


def test_the_sweep_catches_nvidia_words(corpus) -> None:
    # The same rules on an NVIDIA trace say ncu, cudaMemcpyAsync: the pattern finds them there.
    assert _cuda_words(_report(NVIDIA_MEMCPY))


def test_sync_memcpy_names_hip_on_amd_and_cuda_on_nvidia(corpus) -> None:
    [amd] = _rule(_report(KINETO), "sync-memcpy")
    assert amd.text.startswith("2 synchronous memcpy calls (hipMemcpyWithStream ×2) held the host 0.096 ms in all "
                               "and left the GPU idle ")
    assert amd.try_next.startswith("Use hipMemcpyAsync on a stream with pinned host memory")
    assert amd.evidence[0].threshold.startswith("the same check as nsys cuda_memcpy_sync rule")
    # The naive MI300X GEMM's hipMemcpy back waits 331 s for the kernel, and the ck_tile run's for its GEMMs: that
    # wait is GPU work, and neither leaves the GPU idle after it, so neither is a finding (the kernel leads instead).
    assert not _rule(_report(V1_JSON), "sync-memcpy") and not _rule(_report(ROCPD), "sync-memcpy")
    assert _report(V1_JSON).findings[0].rule == "top-kernel"
    [nvidia] = _rule(_report(NVIDIA_MEMCPY), "sync-memcpy")
    assert nvidia.try_next == ("Use cudaMemcpyAsync on a stream with pinned host memory (PyTorch: .to(device, "
                               "non_blocking=True) from pinned tensors), so the host does not wait for the copy.")
    assert nvidia.evidence[0].threshold == ("nsys cuda_memcpy_sync rule (Nsight Systems User Guide, 'Expert Systems "
                                            "Analysis')")


def test_small_grid_in_workgroups_and_cus(corpus) -> None:
    [grid] = _rule(_report(ROCPD), "small-grid")
    assert grid.text.startswith("Small grid: 256 workgroups of 256 work-items on a 304-CU GPU; under one wave, ")
    assert grid.evidence[0].metric == "workgroups in the grid" and grid.evidence[0].value == 256
    assert "< 304 CUs" in grid.evidence[0].threshold
    assert "the same check as Nsight Compute's LaunchConfiguration rule" in grid.evidence[0].threshold
    assert grid.evidence[1].metric == "workgroups per CU"
    # The ck_tile GEMM is Composable Kernel's: the advice is on the call and its instance, not source knobs.
    assert "Composable Kernel call launches fewer workgroups than the GPU has CUs" in grid.try_next
    # AMD's calculator: 128 arch + 384 accum VGPRs and 64 KiB of LDS hold one workgroup per CU.
    assert (grid.evidence[1].value, grid.evidence[1].threshold) == (1, "iotrace occupancy calculator")
    assert grid.gain.fraction == pytest.approx(1 - 256 / 304)
    # MI210 (104 CUs): single-workgroup kernels of 2-6 µs a launch, mostly launch cost: no grid finding, one
    # tiny-launches finding in AMD's words (a HIP graph, workgroups).
    assert not _rule(_report(MI210), "small-grid")
    [tiny] = _rule(_report(MI210), "tiny-launches")
    assert tiny.text.startswith("7 launches under 10 µs each") and "capture a HIP graph" in tiny.text
    assert "more workgroups per launch cannot help" in tiny.try_next and "hipgraph.html" in tiny.try_next


def test_top_kernel_says_rocprof_compute(corpus) -> None:
    for name in FAST:
        [top] = _rule(_report(name), "top-kernel")
        assert top.try_next.startswith("Profile this kernel with rocprof-compute (rocprof-compute profile) first")


@pytest.mark.slow
def test_nvidia_top_kernel_and_launch_bound_keep_their_words(corpus) -> None:
    report = _report(NVIDIA_KINETO)
    assert vocabulary_of(report.tables) is NVIDIA
    [top] = _rule(report, "top-kernel")
    assert top.try_next == "Profile this kernel with ncu first: it bounds what tuning anything else can win."


def test_notes_and_stall_lines_in_rocm_terms(corpus) -> None:
    csv = _report(V1_CSV)
    assert any("the trace holds no HIP runtime calls (rocprofv3 --hip-trace records them" in n for n in csv.notes)
    lines = [u["line"] for u in csv.unavailable if "stall" in u["report"]]
    assert lines == ["wavefront stalls not available: needs metric SQ_WAIT_ANY, SQ_WAIT_INST_ANY per SQ_WAVE_CYCLES "
                     "(rocprof-compute's Wavefront panel) (collect with `rocprof-compute profile`); this trace has no "
                     "hardware counters (profile the kernel with rocprof-compute)"]
    # A rocprof-compute workload has the wait counters, not a split by reason.
    [line] = [u["line"] for u in _report(BF16).unavailable if "stall" in u["report"]]
    assert line.startswith("wavefront stall reasons not available: needs metric stall reasons per instruction")
    assert "this capture has SQ_WAIT_ANY, SQ_WAIT_INST_ANY" in line


AMD_LIBRARY_NAMES = [
    # ROCm/clr rocclr/device/blitcl.cpp; the corpus's rocpd, rocprof v1 and rocprof-compute files launch it.
    ("__amd_rocclr_fillBufferAligned", "rocclr"), ("__amd_rocclr_copyBuffer", "rocclr"),
    # ROCm/composable_kernel: ck_tile::kentry (the rocpd file), ck:: device kernels.
    ("void ck_tile::kentry<1, ck_tile::BatchedGemmKernel<ck_tile::GemmPipelineProblem<int> > >(int)",
     "composable-kernel"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<int>, true>(int)", "composable-kernel"),
    # ROCm/Tensile solution names (the ROCm Kineto trace and the llama.cpp rocprof stats).
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0",
     "tensile"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB1_GRVW8", "tensile"),
    # ROCm/MIOpen: src/kernels/gpu_reference_kernel/naive_conv.cpp and the MIOpen*.cl kernels.
    ("naive_conv_fwd_nchw_float", "miopen"), ("MIOpenBatchNormFwdTrainSpatial", "miopen"),
    # ROCm/rccl keeps NCCL's kernel names; its own helpers start rccl.
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "nccl"), ("rcclGenerateBuffer", "nccl"),
]


@pytest.mark.parametrize(("name", "family"), AMD_LIBRARY_NAMES, ids=[n[:30] for n, _ in AMD_LIBRARY_NAMES])
def test_amd_library_kernels_are_libraries(name: str, family: str) -> None:
    origin = classify(name)
    assert (origin.family, origin.library, origin.tunable) == (family, True, ())
    assert origin.built_for is None  # "ISA90a", "MI16x16x1" are not NVIDIA architectures


@pytest.mark.parametrize("family", sorted(AMD_FAMILIES | {"nccl", "aten"}))
def test_amd_call_advice_is_rocm_advice(family: str) -> None:
    origin = classify({"rocclr": "__amd_rocclr_copyBuffer", "composable-kernel": "ck_tile::kentry<1>(int)",
                       "tensile": "Cijk_Alik_Bljk_SB", "miopen": "naive_conv_fwd_nchw_float",
                       "nccl": "ncclDevKernel_Generic", "aten": "at::native::reduce_kernel<1>(int)",
                       # ROCm/aiter, csrc/: namespace aiter
                       "aiter": "void aiter::grouped_topk_kernel<float, float __vector(4), 1, true>(float*)"}[family])
    for topic in TOPICS:
        text = call_advice(origin, topic, amd=True)
        assert not CUDA_ONLY.search(text), (family, topic, text)
        assert "NCCL's API" in text or "NCCL_" in text or "NCCL" not in text.replace("ncclGroup", "")


def test_user_kernel_knobs_in_hip_terms(corpus) -> None:
    # The occupancy knob for the limiter AMD's calculator names: VGPRs, LDS.
    from dataclasses import replace

    from iotrace.trace.findings.facts import KernelFacts

    facts = KernelFacts(0, "vecCopy(double*, double*, double*, int, int)", 1, (0,), True, (1, 1, 1), (64, 1, 1),
                        1.0, 1.0, classify("vecCopy(double*, double*, double*, int, int)"), vocab=AMD)
    assert "amdgpu_waves_per_eu" in next_step(facts, "occupancy", limiter="vgprs")
    assert "LDS per workgroup" in next_step(facts, "occupancy", limiter="lds")
    for topic in ("memory", "balanced", "compute", "latency", "occupancy", "small-grid", "tail", "old-build"):
        assert not CUDA_ONLY.search(next_step(facts, topic)), topic
    nvidia = replace(facts, vocab=NVIDIA)
    assert "__launch_bounds__" in next_step(nvidia, "occupancy", limiter="registers")
