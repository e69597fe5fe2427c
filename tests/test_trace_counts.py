"""Counts and shared memory, the same in ``iotrace info`` and ``iotrace report``, checked against the raw files.

Every expected value is read here without iotrace: the ncu reports with ``ncu_report``, the nsys exports with
``sqlite3``, the Kineto traces with ``json``. The counts: distinct kernel names, launches, launches with a
duration, CPU-side ranges with the GPU mirrors of Kineto annotations apart, memcpy and memset apart.

The CLI is called in this process (what these tests check is what it counts, not the process), but for one real
subprocess each of ``info`` and ``report``.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from iotrace.trace.info import render_info, summarise
from iotrace.trace.reports import build_report

from .conftest import load_corpus, ncu_launches, run_cli
from .conftest import run_cli_in_process as _in_process

KMEANS = "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"
CUTLASS = "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep"
JULIA = "ncu-rep/a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep"
ALEXNET = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"
TRACE_DIFF = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"
NCCL = "kineto/a100_pg509_nccl_kineto.json.gz"
RANGE_PROFILER = "kineto/a100_pg509_cupti_range_profiler_flops_kineto.json.gz"
H200 = "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"
RTX3090 = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"


def _ncu_launches(path: Path) -> list[dict[str, object]]:
    """Name and shared memory of every profiled launch, read with ncu_report itself."""
    return ncu_launches(path, lambda action: {
        "name": action.name(),
        "static": int(action.metric_by_name("launch__shared_mem_per_block_static").as_double()),
        "dynamic": int(action.metric_by_name("launch__shared_mem_per_block_dynamic").as_double())})


def _kineto(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)["traceEvents"]



def _info(path: Path, run=_in_process) -> dict:
    done = run("info", str(path), "--json", "--top", "1000")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _report(path: Path, *extra: str) -> dict:
    done = _in_process("report", str(path), "--format", "json", "--top", "1000", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- counts ---------------------------------------------------------------------------------------------------------

def test_one_kernel_launched_100_times_is_one_kernel_with_100_launches(corpus: Path) -> None:
    raw = _ncu_launches(corpus / KMEANS)
    assert len(raw) == 100 and len({r["name"] for r in raw}) == 1
    counts = load_corpus(corpus / KMEANS).counts()
    assert (counts["kernels"], counts["kernel_rows"], counts["launches"], counts["measured_launches"]) == (
        1, 100, 100, 100)
    info = _info(corpus / KMEANS)
    assert info["counts"] == counts
    assert info["top_kernels"][0]["launches"] == 100
    text = _in_process("info", str(corpus / KMEANS)).stdout
    assert "1 kernel (100 launches)" in text and "100 kernels" not in text
    report = _in_process("report", str(corpus / KMEANS), "--top", "100").stdout
    assert "1 kernel (100 launches)" in report and "100 kernels" not in report
    assert "Kernels (1 launch group: 100 profiled launches of 1 kernel, identical launches grouped)" in report


@pytest.mark.parametrize("name", [ALEXNET, TRACE_DIFF])
def test_kineto_memcpy_and_memset_are_counted_apart(corpus: Path, name: str) -> None:
    events = _kineto(corpus / name)
    memcpy = sum(1 for e in events if e.get("cat") == "gpu_memcpy")
    memset = sum(1 for e in events if e.get("cat") == "gpu_memset")
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    assert memcpy and memset
    counts = load_corpus(corpus / name).counts()
    assert (counts["memcpy"], counts["memset"], counts["transfers"]) == (memcpy, memset, memcpy + memset)
    assert (counts["kernels"], counts["launches"]) == (len(set(kernels)), len(kernels))
    assert f"{memcpy} memcpy, {memset} memset" in _in_process("info", str(corpus / name)).stdout


def test_gpu_mirrors_of_annotations_are_counted_apart_and_not_twice_in_the_timeline(corpus: Path) -> None:
    events = _kineto(corpus / NCCL)
    cpu = Counter(e["name"] for e in events if e.get("cat") == "user_annotation")
    gpu = Counter(e["name"] for e in events if e.get("cat") == "gpu_user_annotation")
    assert gpu and set(gpu) <= set(cpu)  # each GPU annotation mirrors a CPU one of the same name
    tables = load_corpus(corpus / NCCL)
    counts = tables.counts()
    assert (counts["ranges"], counts["gpu_ranges"]) == (sum(cpu.values()), sum(gpu.values()))
    line = build_report(tables).timeline
    assert line is not None
    for row in line.ranges.to_dict("records"):
        assert row["count"] == cpu[row["name"]], row["name"]
    assert f"{sum(cpu.values())} ranges (+{sum(gpu.values())} GPU mirrors)" in render_info(summarise(tables))


def test_range_profiler_launches_without_a_duration_are_not_measured(corpus: Path) -> None:
    events = _kineto(corpus / RANGE_PROFILER)
    # One cuda_profiler_range event per profiled kernel; its span is the replay, so no kernel duration.
    kernels = [e for e in events if e.get("cat") == "cuda_profiler_range"]
    assert not any(e.get("cat") == "kernel" for e in events)
    tables = load_corpus(corpus / RANGE_PROFILER)
    counts = tables.counts()
    assert counts["launches"] == len(kernels) == 77 and counts["kernels"] == len({e["name"] for e in kernels})
    assert counts["measured_launches"] == 0 < counts["launches"]
    info = summarise(tables)
    assert sum(k["launches"] for k in info["top_kernels"]) == counts["measured_launches"]
    assert "77 launches, 0 with a duration" in render_info(info)


def test_top_kernels_add_up_to_the_measured_launches(corpus: Path) -> None:
    info = _info(corpus / TRACE_DIFF, run=run_cli)  # `info` through a real process
    assert sum(k["launches"] for k in info["top_kernels"]) == info["counts"]["measured_launches"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [KMEANS, H200, NCCL])
def test_info_and_report_state_the_same_counts(corpus: Path, name: str) -> None:
    info, report = _info(corpus / name), _report(corpus / name)
    assert info["counts"] == report["counts"]
    if name == H200:
        with sqlite3.connect(corpus / name) as db:
            launches, = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
            distinct, = db.execute("SELECT COUNT(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
            memcpy, = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
            memset, = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchone()
        assert (report["counts"]["launches"], report["counts"]["kernels"]) == (launches, distinct)
        assert (report["counts"]["memcpy"], report["counts"]["memset"]) == (memcpy, memset)
    text_info = _in_process("info", str(corpus / name)).stdout
    text_report = _in_process("report", str(corpus / name)).stdout
    line = next(ln for ln in text_info.splitlines() if ln.startswith("  counts")).split("counts", 1)[1].strip()
    assert f"counts: {line}" in text_report


def test_markdown_and_html_headers_carry_the_counts(corpus: Path, tmp_path: Path) -> None:
    from iotrace.trace.info import counts_text

    md, page = tmp_path / "r.md", tmp_path / "r.html"
    for target in (md, page):
        done = _in_process("report", str(corpus / JULIA), "--format", target.suffix[1:], "--output", str(target))
        assert done.returncode == 0, done.stderr
    words = counts_text(load_corpus(corpus / JULIA).counts())
    assert words.startswith("3 kernels (5 launches)")
    assert words in md.read_text(encoding="utf-8") and words in page.read_text(encoding="utf-8")
    assert "Kernels (5 profiled launches of 3 kernels)" in page.read_text(encoding="utf-8")


# --- shared memory ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [CUTLASS, JULIA])
def test_ncu_shared_memory_per_launch_in_report_and_per_name_in_info(corpus: Path, name: str) -> None:
    raw = _ncu_launches(corpus / name)
    report = _report(corpus / name)  # an ncu report: one record per profiled launch, in the file's order
    assert [(k["static_smem_bytes"], k["dynamic_smem_bytes"], k["smem_bytes"]) for k in report["kernels"]] == [
        (r["static"], r["dynamic"], r["static"] + r["dynamic"]) for r in raw]
    by_name: dict[str, list[dict]] = defaultdict(list)
    for k, r in zip(report["kernels"], raw, strict=True):
        assert str(r["name"]) in k["name"]  # ncu_report's name() is the short one
        by_name[k["name"]].append(r)
    info = _info(corpus / name)
    assert {k["name"] for k in info["top_kernels"]} == set(by_name)
    for k in info["top_kernels"]:
        launches = by_name[k["name"]]
        for key, value in (("static_smem_bytes", lambda r: r["static"]), ("dynamic_smem_bytes", lambda r: r["dynamic"]),
                           ("smem_bytes", lambda r: r["static"] + r["dynamic"])):
            assert k[key] == {"min": min(map(value, launches)), "max": max(map(value, launches))}, (k["name"], key)


def test_the_dynamic_shared_memory_of_the_files_is_what_is_shown(corpus: Path) -> None:
    """The values stated for these files (PROVENANCE.md): 148,992 B on the CUTLASS GEMM, 76,896 B on julia_frb."""
    assert [r["dynamic"] for r in _ncu_launches(corpus / CUTLASS)] == [148_992]
    assert max(r["dynamic"] for r in _ncu_launches(corpus / JULIA)) == 76_896
    done = run_cli("report", str(corpus / CUTLASS), "--wide")  # `report` through a real process
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "shared memory/block 148,992 B (0 static + 148,992 dynamic)" in text
    assert "smem 76,896 B" in _in_process("info", str(corpus / JULIA), "--wide").stdout


@pytest.mark.slow
def test_nsys_shared_memory_ranges_per_name_match_sqlite(corpus: Path) -> None:
    with sqlite3.connect(corpus / RTX3090) as db:
        rows = db.execute("SELECT s.value, k.staticSharedMemory, k.dynamicSharedMemory FROM "
                          "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName").fetchall()
    per: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for name, static, dynamic in rows:
        per[name].append((static, dynamic))
    info = _info(corpus / RTX3090)
    assert len(info["top_kernels"]) == len(per)
    for k in info["top_kernels"]:
        launches = per[k["name"]]
        assert k["static_smem_bytes"] == {"min": min(s for s, _ in launches), "max": max(s for s, _ in launches)}
        assert k["dynamic_smem_bytes"] == {"min": min(d for _, d in launches), "max": max(d for _, d in launches)}
        assert k["smem_bytes"] == {"min": min(s + d for s, d in launches), "max": max(s + d for s, d in launches)}
    report = _report(corpus / RTX3090)
    seen: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for k in report["kernels"]:  # a timeline: one record per name and launch configuration
        assert (k["static_smem_bytes"], k["dynamic_smem_bytes"]) in per[k["name"]]
        assert k["smem_bytes"] == k["static_smem_bytes"] + k["dynamic_smem_bytes"]
        seen[k["name"]].add((k["static_smem_bytes"], k["dynamic_smem_bytes"]))
    assert seen == {name: set(launches) for name, launches in per.items()}


def test_kineto_total_shared_memory_only(corpus: Path) -> None:
    events = [e for e in _kineto(corpus / ALEXNET) if e.get("cat") == "kernel"]
    per: dict[str, list[int]] = defaultdict(list)
    for e in events:
        per[e["name"]].append(e["args"]["shared memory"])
    info = summarise(load_corpus(corpus / ALEXNET), top=1000)
    assert {k["name"] for k in info["top_kernels"]} == set(per)
    for k in info["top_kernels"]:
        assert k["static_smem_bytes"] is None and k["dynamic_smem_bytes"] is None  # Kineto records only the total
        assert k["smem_bytes"] == {"min": min(per[k["name"]]), "max": max(per[k["name"]])}
    report = build_report(load_corpus(corpus / ALEXNET), top=1000).to_dict()
    seen: dict[str, set[int]] = defaultdict(set)
    for k in report["kernels"]:  # one record per launch configuration, shared memory part of it
        assert k["static_smem_bytes"] is None and k["dynamic_smem_bytes"] is None
        seen[k["name"]].add(k["smem_bytes"])
    assert seen == {name: set(values) for name, values in per.items()}


def test_a_range_profiler_trace_has_no_shared_memory_and_says_none(corpus: Path) -> None:
    report = build_report(load_corpus(corpus / RANGE_PROFILER)).to_dict()
    assert report["kernels"] and all(k["smem_bytes"] is None for k in report["kernels"])


def test_info_with_shared_memory_still_never_imports_pandas(corpus: Path) -> None:
    script = ("import sys, json, iotrace.trace\nfrom iotrace.trace.info import summarise\n"
              "info = summarise(iotrace.trace.load(sys.argv[1]))\n"
              "print('pandas' in sys.modules, json.dumps(info['top_kernels'][0]['smem_bytes']))\n")
    done = subprocess.run([sys.executable, "-c", script, str(corpus / NCCL)], capture_output=True, text=True,
                          check=True)
    imported, smem = done.stdout.split(maxsplit=1)
    assert imported == "False" and json.loads(smem)["min"] >= 0
