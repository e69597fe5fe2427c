"""The rocpd SQLite and legacy rocprof v1 readers against the corpus files' own values, read here independently with
csv, sqlite3 and json; damaged input is refused in one line."""

from __future__ import annotations

import csv
import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest

from iotrace.trace import TraceFormatError, load
from tests.conftest import load_corpus, run_cli

ROCPD = "rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db"
RESULTS = "rocprof/mi250_laplacian_rocprof-v1_results.csv"
STATS = "rocprof/mi250_laplacian_rocprof-v1_results.stats.csv"
COUNTERS = "rocprof/mi250_laplacian_rocprof-v1_pmc_counters.csv"
JSON = "rocprof/mi300x_naive_bmm_rocprof-v1_results.json"
HIP_STATS = "rocprof/mi300x_naive_bmm_rocprof-v1_results.hip_stats.csv"
COPY_STATS = "rocprof/mi300x_naive_bmm_rocprof-v1_results.copy_stats.csv"
R9700_STATS = "rocprof/r9700_gfx1201_llamacpp_q4_0_rocprof-v1_results.stats.csv"


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _strip_kd(name: str) -> str:
    return name.removesuffix(" [clone .kd]").removesuffix(".kd")


def test_rocpd_kernels_match_the_database(corpus: Path) -> None:
    path = corpus / ROCPD
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT name, start, end, grid_x, grid_y, grid_z, workgroup_x, workgroup_y, workgroup_z, "
                          "lds_size, scratch_size, vgpr_count, accum_vgpr_count, sgpr_count, agent_type_index "
                          "FROM kernels ORDER BY start, id").fetchall()
        regions = db.execute("SELECT name FROM regions ORDER BY start, id").fetchall()
    tables = load(path)
    assert tables.meta["format"] == "rocpd-sqlite" and tables.meta["schema"] == "rocpd 3"
    kernels = tables.kernels
    assert len(kernels) == len(rows) == 151
    assert list(kernels["name"]) == [r[0] for r in rows]
    assert list(kernels["duration_ns"]) == [float(r[2] - r[1]) for r in rows]
    assert kernels["duration_ns"].sum() == sum(r[2] - r[1] for r in rows)
    for (_, _, _, gx, gy, gz, wx, wy, wz, lds, scratch, vgpr, accum, sgpr, device), k in zip(
            rows, kernels.itertuples(), strict=True):
        # grids in work-items become workgroup counts per dimension
        assert (k.grid_x, k.grid_y, k.grid_z) == (math.ceil(gx / wx), math.ceil(gy / wy), math.ceil(gz / wz))
        assert (k.block_x, k.block_y, k.block_z) == (wx, wy, wz)
        assert (k.smem_bytes, k.local_mem_bytes_per_thread) == (lds, scratch)
        assert (k.arch_vgpr, k.accum_vgpr, k.sgpr, k.device, k.wave_size) == (vgpr, accum, sgpr, device, 64)
    gemm = kernels[kernels["name"].str.contains("BatchedGemmKernel")]
    assert len(gemm) == 150 and set(gemm["grid_x"]) == {2} and set(gemm["grid_y"]) == {128}
    assert len(tables.api_calls) == len(regions) == 629
    assert list(tables.api_calls["name"]) == [r[0] for r in regions]
    assert (tables.api_calls["name"] == "hipLaunchKernel").sum() == 150
    assert set(tables.api_calls.loc[tables.api_calls["name"] == "hipLaunchKernel", "kind"]) == {"launch"}
    devices = tables.devices
    assert len(devices) == 8 and set(devices["name"]) == {"AMD Instinct MI300X"}
    assert set(devices["arch"]) == {"gfx942"} and set(devices["sm_count"]) == {304}


def test_rocpd_of_an_unknown_schema_version_is_refused_in_one_line(corpus: Path, tmp_path: Path) -> None:
    copy = tmp_path / "future.db"
    shutil.copyfile(corpus / ROCPD, copy)
    with sqlite3.connect(copy) as db:
        # rocpd_metadata is a view over the uuid-suffixed table that holds the row
        table = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd_metadata_%'"
                           ).fetchone()[0]
        db.execute(f"UPDATE {table} SET value = '99' WHERE tag = 'schema_version'")
    with pytest.raises(TraceFormatError) as refused:
        load(copy)
    message = str(refused.value)
    assert message.startswith(f"{copy}: is a rocpd database of schema version 99") and "\n" not in message
    done = run_cli("info", str(copy))
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)
    assert "schema version 99" in done.stderr


def test_cli_info_on_a_rocpd_database_shows_its_kernels(corpus: Path) -> None:
    done = run_cli("info", str(corpus / ROCPD))
    assert done.returncode == 0, done.stderr
    assert "2 kernels (151 launches)" in done.stdout and "AMD Instinct MI300X" in done.stdout


def test_rocprof_v1_results_csv_matches_the_file_and_its_stats(corpus: Path) -> None:
    rows = _csv(corpus / RESULTS)
    tables = load_corpus(corpus / RESULTS)
    kernels = tables.kernels
    assert tables.meta["format"] == "rocprof-csv" and len(kernels) == len(rows) == 1004
    assert list(kernels["name"]) == [_strip_kd(r["KernelName"]) for r in rows]
    assert list(kernels["duration_ns"]) == [float(r["DurationNs"]) for r in rows]
    assert list(kernels["start_ns"]) == [int(r["BeginNs"]) for r in rows]
    for row, k in zip(rows, kernels.itertuples(), strict=True):
        assert k.grid_x == math.ceil(int(row["grd"]) / int(row["wgr"])) and k.block_x == int(row["wgr"])
        assert (k.arch_vgpr, k.accum_vgpr, k.sgpr, k.wave_size, k.smem_bytes, k.device) == (
            int(row["arch_vgpr"]), int(row["accum_vgpr"]), int(row["sgpr"]), int(row["wave_size"]),
            int(row["lds"]), int(row["gpu-id"]))
    stats = {_strip_kd(r["Name"]): r for r in _csv(corpus / STATS)}
    laplace = kernels[kernels["name"].str.startswith("void laplacian_kernel")]
    assert len(laplace) == 1001 == int(stats[laplace["name"].iloc[0]]["Calls"])
    assert laplace["duration_ns"].sum() == int(stats[laplace["name"].iloc[0]]["TotalDurationNs"]) == 2608618986


@pytest.mark.parametrize("name", [STATS, R9700_STATS])
def test_rocprof_v1_kernel_stats_are_kernel_totals(corpus: Path, name: str) -> None:
    rows = _csv(corpus / name)
    tables = load_corpus(corpus / name)
    kernels = tables.kernels
    assert tables.meta["schema"] == "kernel stats" and len(kernels) == len(rows)
    assert list(kernels["name"]) == [_strip_kd(r["Name"]) for r in rows]
    assert not any(n.endswith(".kd") for n in kernels["name"])
    assert list(kernels["launches"]) == [int(r["Calls"]) for r in rows]
    assert list(kernels["duration_ns"]) == [float(r["TotalDurationNs"]) for r in rows]
    assert tables.counts()["launches"] == sum(int(r["Calls"]) for r in rows)


def test_rocprof_v1_counter_csv_keeps_counters_per_dispatch(corpus: Path) -> None:
    rows = _csv(corpus / COUNTERS)
    tables = load_corpus(corpus / COUNTERS)
    assert len(tables.kernels) == len(rows) == 1004 and tables.kernels["duration_ns"].isna().all()
    counters = ["FETCH_SIZE", "WRITE_SIZE", "TCP_TOTAL_CACHE_ACCESSES_sum", "TCP_TCC_READ_REQ_sum",
                "TCP_TCC_WRITE_REQ_sum"]
    metrics = tables.metrics
    assert len(metrics) == len(rows) * len(counters) and set(metrics["metric"]) == set(counters)
    first = metrics[metrics["kernel_id"] == int(rows[1]["Index"])].set_index("metric")["value"]
    assert {c: first[c] for c in counters} == {c: float(rows[1][c]) for c in counters}
    assert metrics.loc[metrics["metric"] == "FETCH_SIZE", "unit"].eq("KB").all()


def test_rocprof_v1_json_reads_kernels_copies_calls_and_agents(corpus: Path) -> None:
    doc = json.loads((corpus / JSON).read_text())
    complete = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M"}
    tables = load_corpus(corpus / JSON)
    assert tables.meta["format"] == "rocprof-json"
    gpu = [e for e in complete if names[e["pid"]].startswith("GPU")]
    assert list(tables.kernels["name"]) == [e["args"]["Name"] for e in gpu]
    assert list(tables.kernels["duration_ns"]) == [float(e["args"]["DurationNs"]) for e in gpu] == [331634184678.0]
    copies = [e for e in complete if names[e["pid"]] == "COPY"]
    assert sorted(tables.transfers["duration_ns"]) == sorted(float(e["args"]["DurationNs"]) for e in copies)
    assert sorted(tables.transfers["copy_kind"]) == ["DtoH", "HtoD", "HtoD"]
    api = [e for e in complete if names[e["pid"]] == "CPU HIP API"]
    assert len(tables.api_calls) == len(api) == 12
    assert sorted(tables.api_calls["name"]) == sorted(e["args"]["Name"] for e in api)
    gpus = [k.split(".")[0] for k, v in doc["otherData"].items() if k.endswith(".DeviceType") and v == "GPU"]
    assert len(tables.devices) == len(gpus) == 8
    assert set(tables.devices["sm_count"]) == {int(doc["otherData"][f"{gpus[0]}.ComputeUnit"])}
    assert set(tables.devices["arch"]) == {doc["otherData"][f"{gpus[0]}.Name"]} == {"gfx942"}


def test_rocprof_v1_copy_and_hip_stats(corpus: Path) -> None:
    copies = _csv(corpus / COPY_STATS)
    tables = load_corpus(corpus / COPY_STATS)
    assert tables.counts()["memcpy"] == sum(int(r["Calls"]) for r in copies) == 3
    assert sorted(tables.transfers["duration_ns"]) == sorted(float(r["TotalDurationNs"]) for r in copies)
    hip = _csv(corpus / HIP_STATS)
    tables = load_corpus(corpus / HIP_STATS)
    summary = tables.meta["api_summary"]
    assert [(s["name"], s["calls"], s["total_ns"]) for s in summary] == [
        (r["Name"], int(r["Calls"]), float(r["TotalDurationNs"])) for r in hip]
    assert len(tables.api_calls) == 0 and any("HIP API totals" in n for n in tables.meta["notes"])


@pytest.mark.parametrize("name", [RESULTS, COUNTERS, STATS])
def test_a_truncated_rocprof_csv_is_refused_in_one_line(corpus: Path, name: str, tmp_path: Path) -> None:
    """A CSV cut mid-row is refused whole (never read short of its rows): whether the cut leaves the last row short of
    fields, or falls inside its last field (same field count, a shorter number), the file ends without a newline."""
    data = (corpus / name).read_bytes()
    cut = tmp_path / "cut.csv"
    for keep in (len(data) - 40, len(data) - 3):
        cut.write_bytes(data[:keep])
        with pytest.raises(TraceFormatError) as refused:
            load(cut)
        message = str(refused.value)
        assert message.startswith(f"{cut}: ends mid-row") and "\n" not in message
    cut.write_bytes(data[: len(data) - 40] + b"\n")  # cut, then a newline: the short row is named
    with pytest.raises(TraceFormatError) as refused:
        load(cut)
    assert str(refused.value).startswith(f"{cut}: row ") and "fields, the header" in str(refused.value)
