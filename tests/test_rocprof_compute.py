"""rocprof-compute (Omniperf) workload folders, read against the folders' own CSVs (read here with csv)."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import pytest

from iotrace.trace import load
from iotrace.trace.errors import TraceFormatError
from tests.conftest import load_corpus, run_cli

MI300X = "rocprof/mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1"
MI210 = "rocprof/mi210_multikernel_omniperf2.1_rocm6.2"
MI100 = "rocprof/mi100_vcopy_omniperf2.0_rocm6.0"
FOLDERS = [MI300X, MI210, MI100]
BMM = "void batched_matrix_multiplication_matrix_core_64x64x4<64u, 64u, 8u>"

def loaded(corpus: Path, folder: str):
    return load_corpus(corpus / folder)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def stripped(name: str) -> str:
    return name.removesuffix(" [clone .kd]").removesuffix(".kd")


@pytest.mark.parametrize("folder", FOLDERS)
def test_dispatches_names_and_durations_match_pmc_perf(corpus: Path, folder: str) -> None:
    tables = loaded(corpus, folder)
    perf = rows(corpus / folder / "pmc_perf.csv")
    kernels = tables.kernels.set_index("id")
    assert tables.meta["format"] == "rocprof-compute"
    assert len(kernels) == len(perf)
    for row in perf:
        k = kernels.loc[int(row["Dispatch_ID"])]
        assert k["name"] == stripped(row["Kernel_Name"])
        assert k["duration_ns"] == pytest.approx(float(row["End_Timestamp"]) - float(row["Start_Timestamp"]),
                                                 abs=1e-3)
        assert k["start_ns"] == round(float(row["Start_Timestamp"]))
        assert k["device"] == int(row["GPU_ID"])


@pytest.mark.parametrize("folder", [MI210, MI100])
def test_durations_match_timestamps_csv(corpus: Path, folder: str) -> None:
    kernels = loaded(corpus, folder).kernels.set_index("id")
    stamps = rows(corpus / folder / "timestamps.csv")
    assert len(stamps) == len(kernels)
    for row in stamps:
        assert kernels.loc[int(row["Dispatch_ID"]), "duration_ns"] == \
            int(row["End_Timestamp"]) - int(row["Start_Timestamp"])


def test_mi300x_kernel_counts_and_means_match_pmc_kernel_top(corpus: Path) -> None:
    tables = loaded(corpus, MI300X)
    top = rows(corpus / MI300X / "pmc_kernel_top.csv")
    breakdown = {row.name: row for row in tables.kernel_breakdown()}
    assert len(breakdown) == len(top) == 2
    for row in top:
        mine = breakdown[row["Kernel_Name"]]
        assert mine.launches == int(row["Count"])
        # upstream sums in lower precision: 0.07 ns apart over 4.36 ms
        assert mine.total_ns == pytest.approx(float(row["Sum(ns)"]), rel=1e-7)
        assert mine.total_ns / mine.launches == pytest.approx(float(row["Mean(ns)"]), rel=1e-7)
    assert breakdown[f"{BMM}(unsigned int, unsigned int, unsigned int, unsigned int, std::bfloat16_t const*, "
                     "std::bfloat16_t const*, std::bfloat16_t*, dim3, dim3, dim3, int)"].launches == 150


@pytest.mark.parametrize(("folder", "dispatch"), [(MI300X, 2), (MI210, 2), (MI100, 0)])
def test_dispatch_resources_match_the_file(corpus: Path, folder: str, dispatch: int) -> None:
    row = next(r for r in rows(corpus / folder / "pmc_perf.csv") if int(r["Dispatch_ID"]) == dispatch)
    k = loaded(corpus, folder).kernels.set_index("id").loc[dispatch]
    # Grid_Size counts work-items; the table counts workgroups, as CUDA's grid counts blocks.
    assert k["grid_x"] == math.ceil(int(row["Grid_Size"]) / int(row["Workgroup_Size"]))
    assert k["grid_x"] * k["block_x"] >= int(row["Grid_Size"])
    assert (k["grid_y"], k["grid_z"], k["block_y"], k["block_z"]) == (1, 1, 1, 1)
    assert k["block_x"] == int(row["Workgroup_Size"])
    assert k["smem_bytes"] == int(row["LDS_Per_Workgroup"])
    assert k["local_mem_bytes_per_thread"] == int(row["Scratch_Per_Workitem"])
    assert k["arch_vgpr"] == int(row["Arch_VGPR"])
    assert k["accum_vgpr"] == int(row["Accum_VGPR"])
    assert k["sgpr"] == int(row["SGPR"])
    assert k["wave_size"] == int(row.get("Wave_Size") or row["wave_size"])


def test_mi300x_bmm_dispatch_values(corpus: Path) -> None:
    """The values PROVENANCE.md states for the bf16 batched GEMM dispatches."""
    k = loaded(corpus, MI300X).kernels.set_index("id").loc[2]
    assert k["name"].startswith(BMM)
    assert (k["grid_x"], k["block_x"], k["smem_bytes"], k["arch_vgpr"], k["sgpr"], k["wave_size"]) == \
        (524288 // 256, 256, 2048, 48, 32, 64)


@pytest.mark.parametrize(("folder", "dispatch", "counter"), [
    (MI300X, 2, "SQ_WAVES"), (MI300X, 2, "TCC_WRITE[5]"), (MI210, 0, "SQ_WAVES"), (MI100, 1, "SQ_INSTS_VMEM_RD")])
def test_counter_values_match_the_file(corpus: Path, folder: str, dispatch: int, counter: str) -> None:
    row = next(r for r in rows(corpus / folder / "pmc_perf.csv") if int(r["Dispatch_ID"]) == dispatch)
    metrics = loaded(corpus, folder).metrics
    hit = metrics[(metrics["kernel_id"] == dispatch) & (metrics["metric"] == counter)]
    assert hit["value"].tolist() == [float(row[counter])]


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_counter_of_every_dispatch_is_a_metric(corpus: Path, folder: str) -> None:
    perf = rows(corpus / folder / "pmc_perf.csv")
    header = list(perf[0])
    counters = [c for c in header if c.startswith(("SQ", "TCC", "TCP", "TA_", "TD_", "SPI", "CPC", "CPF", "GRBM"))]
    metrics = loaded(corpus, folder).metrics
    assert len(metrics) == len(perf) * len(counters)
    assert set(metrics["metric"]) == set(counters)
    assert not {"obj", "wave_size_3", "Kernel_ID_1", "Grid_Size", "Start_Timestamp"} & set(metrics["metric"])


def test_devices_from_sysinfo(corpus: Path) -> None:
    for folder in FOLDERS:
        info = rows(corpus / folder / "sysinfo.csv")[0]
        devices = loaded(corpus, folder).devices
        assert len(devices) == 1
        d = devices.iloc[0]
        assert (d["name"], d["arch"], d["vendor"]) == (info["gpu_model"], info["gpu_arch"], "amd")
        assert d["sm_count"] == int(info["cu_per_gpu"])
        assert d["clock_mhz"] == float(info["max_sclk"])
        assert d["max_warps_per_sm"] == int(info["max_waves_per_cu"])
        if info.get("hbm_bw"):
            assert d["memory_bandwidth_bytes_per_s"] == pytest.approx(float(info["hbm_bw"]) * 1e9)


@pytest.mark.parametrize(("folder", "device", "ceiling", "value", "unit"), [
    (MI300X, 0, "HBMBw", 4244.3501, "GB/s"), (MI300X, 0, "MFMABF16Flops", 516455.44, "GFLOP/s"),
    (MI300X, 0, "FP32Flops", 127359.52, "GFLOP/s"), (MI210, 0, "HBMBw", 1392.4641, "GB/s"),
    (MI210, 0, "MFMAI8Ops", 166839.7, "GOP/s")])
def test_roofline_ceilings(corpus: Path, folder: str, device: int, ceiling: str, value: float, unit: str) -> None:
    ceilings = loaded(corpus, folder).meta["roofline_ceilings"]
    row = next(c for c in ceilings if c["device"] == device and c["ceiling"] == ceiling)
    assert (row["value"], row["unit"]) == (value, unit)
    raw = rows(corpus / folder / "roofline.csv")[device]
    assert row["value"] == float(raw[ceiling])
    assert row["low"] <= row["value"] <= row["high"]  # hbmBwHigh / MFMAFI8OpsLow spellings are read too
    assert len({c["device"] for c in ceilings}) == len(rows(corpus / folder / "roofline.csv"))


def test_mi100_has_no_roofline_and_says_so(corpus: Path) -> None:
    tables = loaded(corpus, MI100)
    assert tables.meta["roofline_ceilings"] == []
    assert any("no roofline ceilings" in note and "roofline.csv" in note for note in tables.meta["notes"])


@pytest.mark.parametrize("entry", ["pmc_perf.csv", "sysinfo.csv", "timestamps.csv", "pmc_dispatch_info.csv"])
def test_any_file_of_the_workload_reads_the_workload(corpus: Path, entry: str) -> None:
    tables = load_corpus(corpus / MI210 / entry)
    assert tables.meta["source"] == str(corpus / MI210)
    assert tables.rows("kernels") == 7


@pytest.mark.parametrize("missing", ["sysinfo.csv", "pmc_perf.csv"])
def test_a_workload_missing_a_required_file_is_refused_in_one_line(corpus: Path, tmp_path: Path,
                                                                   missing: str) -> None:
    copy = tmp_path / "workload"
    shutil.copytree(corpus / MI210, copy)
    (copy / missing).unlink()
    for path in (copy, copy / ("pmc_perf.csv" if missing == "sysinfo.csv" else "sysinfo.csv")):
        with pytest.raises(TraceFormatError) as refused:
            load(path)
        message = str(refused.value)
        assert message.startswith(f"{copy}: is a rocprof-compute workload folder without {missing}"), message
        assert "\n" not in message


def test_a_folder_that_is_no_workload_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(TraceFormatError) as refused:
        load(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path}: is a folder, not a profiler export")


def test_a_truncated_pmc_perf_is_refused_naming_the_file(corpus: Path, tmp_path: Path) -> None:
    """Decision: a pmc_perf.csv cut mid-row is refused whole (half a dispatch's counters would mislead), in one line
    naming the file; one cut at a row's end reads its complete rows and says pmc_dispatch_info.csv lists more."""
    copy = tmp_path / "workload"
    shutil.copytree(corpus / MI210, copy)
    text = (corpus / MI210 / "pmc_perf.csv").read_text()
    (copy / "pmc_perf.csv").write_text(text[: len(text) * 2 // 3])
    with pytest.raises(TraceFormatError) as refused:
        load(copy)
    message = str(refused.value)
    assert message.startswith(f"{copy / 'pmc_perf.csv'}: row ") and "cut short" in message and "\n" not in message
    lines = text.splitlines(keepends=True)
    (copy / "pmc_perf.csv").write_text("".join(lines[:5]))
    tables = load(copy)
    assert tables.rows("kernels") == 4
    assert any("pmc_dispatch_info.csv lists 7 dispatches, pmc_perf.csv holds 4" in n for n in tables.meta["notes"])
    result = run_cli("info", str(copy / "pmc_perf.csv"))
    assert result.returncode == 0


def test_cli_info_on_the_folder_and_on_pmc_perf(corpus: Path, tmp_path: Path) -> None:
    for path in (corpus / MI300X, corpus / MI300X / "pmc_perf.csv"):
        result = run_cli("info", str(path))
        assert result.returncode == 0, result.stderr
        assert "2 kernels (301 launches)" in result.stdout
        assert "format   rocprof-compute" in result.stdout
    copy = tmp_path / "workload"
    shutil.copytree(corpus / MI100, copy)
    (copy / "sysinfo.csv").unlink()
    result = run_cli("info", str(copy))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "sysinfo.csv" in result.stderr
    assert "Traceback" not in result.stderr
