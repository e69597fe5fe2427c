"""Issue 45 item 2: communication kernels that are not NCCL's get communication findings (exposed time, overlap), never
grid, occupancy, register or split-K advice; NCCL stays NCCL; a GEMM with a small grid keeps its small-grid advice.

On the corpus's real vLLM V1 trace (Llama 3 70B, 4-way tensor parallel on H100 SXM, rank 0), read as a user reads
it (``iotrace report --json``) and recomputed from the file with plain gzip + json; and on the launch a B200 vLLM
trace showed (PyTorch symmetric memory's multimem_all_reduce_kernel, 8 blocks), as the rules' facts.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.findings.kernel_rules import KERNEL_RULES
from iotrace.trace.findings.launch_rules import LAUNCH_RULES
from iotrace.trace.reports.origin import classify
from iotrace.trace.reports.report import build_report
from tests.conftest import CORPUS, cli_in_process, load_corpus

H100 = "kineto/h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz"
#: The rules that judge a kernel's grid, occupancy, registers or stalls: advice for a kernel its author tunes.
GRID_RULES = {"small-grid", "tail", "occupancy-limit", "achieved-gap", "dominant-stall", "configurations"}


@cache
def _report_json() -> dict[str, Any]:
    code, out, err = cli_in_process("report", str(CORPUS / H100), "--json")
    assert code == 0, err
    return json.loads(out)


def _kineto_kernels(path: Path) -> list[tuple[int, int, str]]:
    """(start ns, end ns, name) of every kernel event of a Kineto trace (Kineto writes µs)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), e["name"]) for e in events
            if e.get("ph") == "X" and e.get("cat") == "kernel"]


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _uncovered_ns(spans: list[tuple[int, int]], cover: list[tuple[int, int]]) -> int:
    """Time of ``spans`` (disjoint, sorted) no interval of ``cover`` (disjoint, sorted) covers."""
    total, j = 0, 0
    for a, b in spans:
        cursor = a
        while j < len(cover) and cover[j][1] <= cursor:
            j += 1
        k = j
        while k < len(cover) and cover[k][0] < b:
            if cover[k][0] > cursor:
                total += cover[k][0] - cursor
            cursor = max(cursor, cover[k][1])
            k += 1
        total += max(0, b - cursor)
    return total


def test_vllm_custom_allreduce_is_communication_and_gets_no_grid_advice(corpus: Path) -> None:
    data = _report_json()
    by_name = {k["name"]: k for k in data["kernels"]}
    [allreduce] = [n for n in by_name if "vllm::cross_device_reduce_1stage" in n]
    origin = by_name[allreduce]["origin"]
    assert (origin["family"], origin["label"], origin["communication"]) == \
        ("vllm-allreduce", "vLLM custom all-reduce", True)
    assert origin["evidence"] == "name '::cross_device_reduce_1stage'"
    fired = [f for f in data["findings"] if "cross_device_reduce" in str(f["kernel"])]
    assert not [f for f in fired if f["rule"] in GRID_RULES], fired
    # Before issue 45 it was told: "Tiny grid: 2 blocks of 512 threads on a 132-SM GPU ... launch more blocks".
    assert not [f for f in data["findings"] if "split-K" in f["try"] and "cross_device" in str(f["kernel"])]


def test_nccl_stays_nccl_and_communication(corpus: Path) -> None:
    data = _report_json()
    nccl = [k for k in data["kernels"] if k["name"].startswith("ncclDevKernel_")]
    assert {k["name"].split("(")[0] for k in nccl} == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                                                       "ncclDevKernel_AllGather_RING_LL"}
    for k in nccl:
        assert (k["origin"]["family"], k["origin"]["label"], k["origin"]["communication"]) == ("nccl", "NCCL", True)
    assert not [f for f in data["findings"] if str(f["kernel"]).startswith("nccl") and f["rule"] in GRID_RULES]


def test_a_small_gemm_grid_keeps_its_small_grid_advice(corpus: Path) -> None:
    """The check must still fire where it should: cuBLAS's 64x128-tile GEMM runs 64 blocks on the 132-SM H100."""
    data = _report_json()
    gemm = [f for f in data["findings"] if f["rule"] == "small-grid"
            and str(f["kernel"]).startswith("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64")]
    texts = {f["text"] for f in gemm}
    assert "Small grid: 64 blocks of 384 threads on a 132-SM GPU; under one wave, 52% of the GPU's block slots sit " \
           "idle." in texts
    assert all("The cuBLAS call launches fewer blocks than the GPU has SMs" in f["try"] for f in gemm)
    # The decode RMSNorm (Triton, one program) runs 5 µs a launch, mostly launch cost: no grid finding; its
    # launches are among the tiny ones (tests/test_findings_ranking.py). A Triton kernel long enough for more programs
    # to help still gets the author's knobs (split the reduction).
    assert not [f for f in data["findings"] if f["rule"] == "small-grid"
                and f["kernel"] == "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_2"]
    assert [f for f in data["findings"] if f["rule"] == "tiny-launches"]
    long = _facts("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_2", 1, 128, 132, "9.0")
    [triton] = [f for r in LAUNCH_RULES for f in r.check(long)]
    assert "Launch more programs" in triton.try_next and "split-K" in triton.try_next


def test_exposed_communication_counts_the_custom_allreduce(corpus: Path) -> None:
    """Exposed communication, recomputed from the file: the union of the communication kernels (NCCL's and vLLM's
    custom all-reduce) not covered by any other kernel. NCCL alone (HTA's definition) would miss most of it."""
    kernels = _kineto_kernels(corpus / H100)
    is_comm = [n.startswith("ncclDevKernel") or "vllm::cross_device_reduce" in n for _, _, n in kernels]
    compute = _union([(a, b) for (a, b, _), c in zip(kernels, is_comm, strict=True) if not c])
    comm = _union([(a, b) for (a, b, _), c in zip(kernels, is_comm, strict=True) if c])
    exposed = _uncovered_ns(comm, compute)
    nccl_only = _uncovered_ns(_union([(a, b) for a, b, n in kernels if n.startswith("ncclDevKernel")]),
                              _union([(a, b) for a, b, n in kernels if not n.startswith("ncclDevKernel")]))
    report = build_report(load_corpus(corpus / H100))
    [row] = report.timeline.split.devices.to_dict("records")
    assert row["communication_ns"] == pytest.approx(exposed, rel=1e-6, abs=2_000)  # Kineto's µs rounding
    assert (round(exposed / 1e6, 1), round(nccl_only / 1e6, 1)) == (24.2, 16.7)  # docs/findings.md quotes both
    [finding] = [f for f in _report_json()["findings"] if f["rule"] == "comm-exposed"]
    assert finding["text"].startswith(f"GPU 0: communication kernels run {exposed / 1e6:.1f} ms ")
    assert "exposed, not overlapped" in finding["text"]


def _facts(name: str, blocks: int, threads: int, sms: int, cc: str) -> KernelFacts:
    return KernelFacts(0, name, 1, (0,), True, (blocks, 1, 1), (threads, 1, 1), 1e4, 1e5, classify(name),
                       device_cc=cc, sms=sms, sms_source="card b200")


def test_symmetric_memory_allreduce_with_8_blocks_is_not_told_to_split(corpus: Path) -> None:
    """The launch a B200 vLLM trace showed: multimem_all_reduce_kernel with 8 blocks on 148 SMs. PyTorch launches
    it with at most 8 blocks (CUDASymmetricMemoryOps.cu): no finding of the grid rules; the same grid of a user
    kernel still is one, with the split advice."""
    multimem = ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned "
                "long, unsigned int**, unsigned long, unsigned long)")
    facts = _facts(multimem, 8, 1024, 148, "10.0")
    assert facts.origin.family == "symm-mem" and facts.origin.communication
    assert [f for r in (*LAUNCH_RULES, *KERNEL_RULES) for f in r.check(facts)] == []
    user = _facts("reduce_rows(float*, int)", 8, 1024, 148, "10.0")
    [small] = [f for r in LAUNCH_RULES for f in r.check(user)]
    assert small.rule == "small-grid" and "split-K" in small.try_next and "Small grid: 8 blocks" in small.text
