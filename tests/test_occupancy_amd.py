"""AMD occupancy (identity 6 on CDNA and RDNA): the per-gfx CU limits and the waves per SIMD/CU they allow.

Expected values are worked by hand from public rules: LLVM's AMDGPU backend (``AMDGPUBaseInfo.cpp``, IsaInfo:
getMaxWavesPerEU, getVGPRAllocGranule, getTotalNumVGPRs, getOccupancyWithNumSGPRs, getMaxWorkGroupsPerCU), its
occupancy table in https://reviews.llvm.org/D138443, LLVM's AMDGPUUsage (LDS_SIZE granularity, ACCUM_OFFSET), and
rocprofiler-compute's own "Wavefront Occupancy" metric. The real dispatches are read with the csv/sqlite3 modules from
../shared/corpus/rocprof/.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from iotrace.cu_limits import cu_limits, known_gfx, parse_gfx
from iotrace.errors import InvalidValueError
from iotrace.occupancy_amd import amd_occupancy
from tests.conftest import run_cli

MI300X = "rocprof/mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1"
MI210 = "rocprof/mi210_multikernel_omniperf2.1_rocm6.2"
MI100 = "rocprof/mi100_vcopy_omniperf2.0_rocm6.0"


def _rows(folder: Path, name: str) -> list[dict[str, str]]:
    with (folder / name).open(newline="") as fh:
        return list(csv.DictReader(fh))


def _dispatch(row: dict[str, str]) -> dict[str, int]:
    """The occupancy inputs of one pmc_perf.csv row, as rocprof-compute writes them."""
    return {"workgroup_size": int(row["Workgroup_Size"]), "arch_vgpr": int(row["Arch_VGPR"]),
            "accum_vgpr": int(row["Accum_VGPR"]), "sgpr": int(row["SGPR"]),
            "lds_per_workgroup": int(row["LDS_Per_Workgroup"])}


# --- the table ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", [MI300X, MI210, MI100])
def test_table_matches_rocprof_compute_sysinfo(corpus: Path, folder: str) -> None:
    """rocprof-compute/Omniperf record the device's SIMDs, wave size, workgroup maximum and waves per CU in
    sysinfo.csv: gfx908 40 (10 per SIMD), gfx90a 32 and gfx942 32 (8 per SIMD, LLVM getMaxWavesPerEU)."""
    (info,) = _rows(corpus / folder, "sysinfo.csv")
    limits = cu_limits(info["gpu_arch"])
    assert limits.max_waves_per_cu == int(info["max_waves_per_cu"])
    assert limits.simds_per_cu == int(info["simd_per_cu"])
    assert limits.default_wave_size == int(info["wave_size"])
    assert limits.max_workgroup_size == int(info["workgroup_max_size"])


def test_known_targets_and_names() -> None:
    assert known_gfx() == ["gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"]
    assert parse_gfx("GFX942") == parse_gfx("942") == parse_gfx("gfx942:sramecc+:xnack-") == "gfx942"
    assert parse_gfx("90a") == "gfx90a"
    # The rules the brief asked to confirm, each from LLVM's IsaInfo: waves per SIMD and the VGPR file and granule.
    assert [(g, cu_limits(g).max_waves_per_simd) for g in known_gfx()] == [
        ("gfx908", 10), ("gfx90a", 8), ("gfx942", 8), ("gfx950", 8), ("gfx1100", 16), ("gfx1201", 16)]
    assert (cu_limits("gfx1100").vgpr_file_for(32), cu_limits("gfx1100").vgpr_granule_for(32)) == (1536, 24)
    assert (cu_limits("gfx1100").vgpr_file_for(64), cu_limits("gfx1100").vgpr_granule_for(64)) == (768, 12)
    assert (cu_limits("gfx950").lds_per_cu, cu_limits("gfx950").lds_granule) == (160 * 1024, 1280)


# --- VGPR granularity: worked examples -----------------------------------------------------------------------------

# https://reviews.llvm.org/D138443, unit-test output for "gfx90a gfx940": occupancy 8 up to 64 VGPRs, 7 up to 72,
# 6 up to 80, 5 up to 96, 4 up to 128, 3 up to 168, 2 up to 256, 1 up to 512 (512 / round8(v), capped at 8).
GFX90A_STEPS = [(64, 8), (65, 7), (72, 7), (73, 6), (80, 6), (81, 5), (96, 5), (97, 4), (128, 4), (129, 3),
                (168, 3), (169, 2), (256, 2), (257, 1), (512, 1)]


@pytest.mark.parametrize("gfx", ["gfx90a", "gfx942"])
@pytest.mark.parametrize(("vgprs", "waves"), GFX90A_STEPS)
def test_unified_vgpr_steps_match_llvm_table(gfx: str, vgprs: int, waves: int) -> None:
    # Above 256 the registers past v255 are AGPRs: arch 256 + accum (vgprs - 256), one 512-entry file.
    arch, accum = min(vgprs, 256), max(vgprs - 256, 0)
    r = amd_occupancy(gfx, 256, arch, accum)  # 4 waves, one per SIMD: waves per SIMD = the VGPR limit
    assert r.waves_per_simd == waves


# gfx908 (256-entry file, granule 4 at wave64, at most 10 waves): 256 // round4(v) -> <=24: 10, 28: 9, 32: 8, 36: 7,
# 40: 6, 48: 5, 64: 4, 84: 3, 128: 2, 256: 1 (worked by hand from getTotalNumVGPRs and getVGPRAllocGranule).
@pytest.mark.parametrize(("vgprs", "waves"), [(24, 10), (25, 9), (28, 9), (29, 8), (32, 8), (36, 7), (40, 6),
                                              (41, 5), (48, 5), (49, 4), (64, 4), (84, 3), (85, 2), (128, 2),
                                              (129, 1), (256, 1)])
def test_gfx908_vgpr_steps(vgprs: int, waves: int) -> None:
    assert amd_occupancy("gfx908", 256, vgprs).waves_per_simd == waves


def test_agprs_unified_from_gfx90a_separate_on_gfx908() -> None:
    """gfx90a+: the AGPRs start at ACCUM_OFFSET, a multiple of 4 after the arch VGPRs (AMDGPUUsage), in the same file;
    gfx908: separate 256-entry files, the larger of the two counts (LLVM getTotalNumVGPRs)."""
    r = amd_occupancy("gfx90a", 256, 13, 4)  # 13 -> 16, + 4 = 20 -> granule 8 -> 24; 512 // 24 = 21 -> capped at 8
    assert r.vgprs_per_lane == 24
    assert "arch 13 (aligned to 16) + accum 4 → 20 rounded to granule 8 = 24" in r.steps[1]
    r = amd_occupancy("gfx942", 256, 64, 64)  # 128 -> 512 // 128 = 4 waves per SIMD
    assert (r.vgprs_per_lane, r.waves_per_simd, r.limiters) == (128, 4, ("vgprs",))
    r = amd_occupancy("gfx908", 256, 64, 64)  # max(64, 64) = 64 -> 256 // 64 = 4 waves: the AGPRs come free
    assert (r.vgprs_per_lane, r.waves_per_simd) == (64, 4)


def test_rdna_wave32_granule_24() -> None:
    """RDNA3/RDNA4 wave32: 1536 VGPRs per lane, granule 24 (LLVM getVGPRAllocGranule with Feature1_5xVGPRs):
    96 -> 1536 // 96 = 16 waves; 97 -> 120 -> 12; 121 -> 144 -> 10. Wave64 halves both: 48 -> 16, 49 -> 60 -> 12."""
    for gfx in ("gfx1100", "gfx1201"):
        assert [amd_occupancy(gfx, 128, v).waves_per_simd for v in (96, 97, 121)] == [16, 12, 10]
        assert [amd_occupancy(gfx, 256, v, wave_size=64).waves_per_simd for v in (48, 49)] == [16, 12]
    r = amd_occupancy("gfx1100", 256, 200)  # 8 waves; 200 -> 216; 1536 // 216 = 7 waves per SIMD x 4 // 8 = 3
    assert (r.unit, r.waves_per_workgroup, r.workgroups_per_cu, r.waves_per_cu) == ("WGP", 8, 3, 24)
    assert "sgprs" in r.unlimited  # gfx10+: SGPRs never limit (a fixed 128 per wave)


# --- each limiter fires where it must and not elsewhere --------------------------------------------------------------

def test_lds_limits_per_cu_not_per_simd() -> None:
    """256 work-items at wave64 = 4 waves, one per SIMD. LDS is shared by the whole CU: 32 KiB per workgroup leaves
    room for 65536 // 32768 = 2 workgroups = 8 waves per CU = 2 waves per SIMD (25 %), whatever the SIMDs could hold."""
    r = amd_occupancy("gfx942", 256, 32, 0, 32, 32 * 1024)
    assert (r.workgroups_per_cu, r.waves_per_cu, r.waves_per_simd, r.limiters) == (2, 8, 2.0, ("lds",))
    # The same LDS on gfx950's 160 KiB: 32768 B is 25.6 blocks of 1280 B, so 26 blocks = 33280 B are granted;
    # 163840 // 33280 = 4 workgroups (not 163840 // 32768 = 5): 16 waves per CU = 4 per SIMD.
    r = amd_occupancy("gfx950", 256, 32, 0, 32, 32 * 1024)
    assert (r.lds_allocated, r.workgroups_per_cu, r.waves_per_cu) == (33280, 4, 16)
    # 2 KiB does not bind: 65536 // 2048 = 32 workgroups > 8.
    assert "lds" not in amd_occupancy("gfx942", 256, 32, 0, 32, 2048).limiters


def test_lds_granule_rounds_up() -> None:
    # 4097 B -> 9 blocks of 512 = 4608 B; 65536 // 4608 = 14 single-wave workgroups (4096 B would give 16).
    r = amd_occupancy("gfx942", 64, 16, 0, 16, 4097)
    assert (r.lds_allocated, r.limits["lds"], r.waves_per_cu) == (4608, 14, 14)
    assert amd_occupancy("gfx942", 64, 16, 0, 16, 4096).limits["lds"] == 16
    # gfx950 grants 1280 B blocks (320 dwords): 1 B -> 1280 B; gfx1100 1 KiB blocks: 1 B -> 1024 B.
    assert amd_occupancy("gfx950", 64, 16, 0, 16, 1).lds_allocated == 1280
    assert amd_occupancy("gfx1100", 64, 16, 0, 16, 1).lds_allocated == 1024


def test_sgpr_limit_only_above_100_on_cdna() -> None:
    """LLVM's gfx9 table: <=80 SGPRs 10 waves, <=88 9, <=100 8, else 7; gfx942 has 8 slots, so only >100 binds alone."""
    r = amd_occupancy("gfx942", 256, 32, 0, 112)
    assert (r.workgroups_per_cu, r.waves_per_cu, r.limiters) == (7, 28, ("sgprs",))
    # 96 -> 8 waves: exactly the 8 slots, so both bind; 80 -> 10 waves does not.
    assert amd_occupancy("gfx942", 256, 32, 0, 96).limiters == ("waves", "sgprs")
    assert amd_occupancy("gfx942", 256, 32, 0, 80).limiters == ("waves",)
    # gfx908 (10 wave slots): 96 SGPRs -> 8 waves binds there.
    r = amd_occupancy("gfx908", 256, 16, 0, 96)
    assert (r.waves_per_cu, r.limiters) == (32, ("sgprs",))


def test_workgroup_slots_bind_for_small_multiwave_workgroups() -> None:
    """16 barriers per CU (LLVM getMaxWorkGroupsPerCU): on gfx908 a 2-wave workgroup could fill 10 x 4 // 2 = 20
    workgroups by wave slots, but only 16 get a barrier -> 32 of 40 waves. A single-wave workgroup takes none."""
    r = amd_occupancy("gfx908", 128, 16)
    assert (r.workgroups_per_cu, r.waves_per_cu, r.limiters) == (16, 32, ("workgroups",))
    r = amd_occupancy("gfx908", 64, 16)
    assert (r.workgroups_per_cu, r.waves_per_cu, r.limiters, r.unlimited) == (40, 40, ("waves",),
                                                                              ("lds", "workgroups"))


def test_wave_slots_bind_for_a_light_kernel() -> None:
    r = amd_occupancy("gfx942", 256, 48, 0, 32, 2048)
    assert "VGPRs: arch 48 + accum 0 → 48 rounded to granule 8 = 48 per lane; 512 / 48 = 10 → capped at 8" in r.steps[1]
    assert (r.waves_per_simd, r.waves_per_cu, r.occupancy_pct) == (8.0, 32, 100.0)
    assert r.limits == {"waves": 8, "vgprs": 10, "sgprs": 25, "lds": 32, "workgroups": 16}  # 800 // 32 = 25
    assert r.limiters == ("waves",)


# --- real dispatches -----------------------------------------------------------------------------------------------

def test_mi300x_bmm_theoretical_vs_rocprof_compute_wavefront_occupancy(corpus: Path) -> None:
    """gfx942, Workgroup_Size 256, Arch_VGPR 48, Accum_VGPR 0, SGPR 32, LDS 2048. By hand: 4 waves per workgroup;
    VGPRs 48 -> 512 // 48 = 10 -> 8; SGPRs 32 -> 10 -> 8; LDS 65536 // 2048 = 32; 16 barriers: 8 workgroups x 4 =
    32 waves per CU (100 %).

    Achieved: rocprofiler-compute's "Wavefront Occupancy" (analysis_configs/gfx942/0200_system-speed-of-light.yaml)
    is AVG(SQ_ACCUM_PREV_HIRES / $GRBM_GUI_ACTIVE_PER_XCD) accumulating SQ_LEVEL_WAVES, with GRBM_GUI_ACTIVE_PER_XCD =
    GRBM_GUI_ACTIVE / $num_xcd (utils/parser.py), peak $max_waves_per_cu x $cu_per_gpu; per CU divide by cu_per_gpu.
    The 150 dispatches average 14.6 waves per CU (at most 15.5): under half the theoretical 32."""
    folder = corpus / MI300X
    (info,) = _rows(folder, "sysinfo.csv")
    xcds, cus = int(info["num_xcd"]), int(info["cu_per_gpu"])
    rows = [r for r in _rows(folder, "pmc_perf.csv") if r["Kernel_Name"].startswith("void batched_matrix")]
    assert len(rows) == 150
    (dispatch,) = {tuple(_dispatch(r).items()) for r in rows}
    theory = amd_occupancy(info["gpu_arch"], **dict(dispatch))
    assert (theory.waves_per_cu, theory.limiters[0]) == (32, "waves")
    # rocprofv3 writes the accumulated level under SQ_LEVEL_WAVES, equal to its pass's SQ_ACCUM_PREV_HIRES_8 column.
    assert all(r["SQ_LEVEL_WAVES"] == r["SQ_ACCUM_PREV_HIRES_8"] for r in rows)
    achieved = [float(r["SQ_LEVEL_WAVES"]) / (float(r["GRBM_GUI_ACTIVE"]) / xcds) / cus for r in rows]
    mean = sum(achieved) / len(achieved)
    assert max(achieved) <= theory.waves_per_cu
    assert mean == pytest.approx(14.61, abs=0.01)
    assert max(achieved) == pytest.approx(15.47, abs=0.01)
    assert mean / theory.waves_per_cu == pytest.approx(0.4565, abs=0.001)
    # rocprof-compute's Wave Cycles (4 x SQ_WAVE_CYCLES, counted in quad-cycles) gives nearly the same level: 14.78.
    proxy = [4 * float(r["SQ_WAVE_CYCLES"]) / (float(r["GRBM_GUI_ACTIVE"]) / xcds) / cus for r in rows]
    assert sum(proxy) / len(proxy) == pytest.approx(mean, rel=0.02)


def test_mi100_vcopy_theoretical_vs_wave_cycles(corpus: Path) -> None:
    """gfx908, vecCopy: Workgroup_Size 256, Arch_VGPR 8, Accum_VGPR 8, SGPR 16, no LDS. By hand: 4 waves; VGPRs
    max(8, 8) = 8 -> 256 // 8 = 32 -> 10; SGPRs 16 -> 10; 16 barriers: 10 workgroups x 4 = 40 waves per CU (100 %).
    This Omniperf 2.0 folder has no SQ_LEVEL_WAVES, so the achieved level comes from 4 x SQ_WAVE_CYCLES /
    GRBM_GUI_ACTIVE (one XCD) / 120 CUs: 17.2-18.8 waves per CU, under half the 40 the CU could hold."""
    folder = corpus / MI100
    (info,) = _rows(folder, "sysinfo.csv")
    rows = _rows(folder, "pmc_perf.csv")
    for row in rows:
        theory = amd_occupancy(info["gpu_arch"], **_dispatch(row))
        assert (theory.waves_per_cu, theory.waves_per_simd, theory.unlimited) == (40, 10.0, ("lds",))
        achieved = 4 * float(row["SQ_WAVE_CYCLES"]) / float(row["GRBM_GUI_ACTIVE"]) / int(info["cu_per_gpu"])
        assert 17.0 < achieved < 19.0 < theory.waves_per_cu


def test_mi210_dispatches_theoretical(corpus: Path) -> None:
    """gfx90a. fillBufferAligned: 256 work-items, arch 12 + accum 4 -> 12 + 4 = 16 -> 512 // 16 = 32 -> 8 per SIMD,
    32 waves per CU. The 1-work-item kernels are single-wave workgroups (no barrier): 32 by wave slots, except the two
    with 4096 B of LDS: 65536 // 4096 = 16 workgroups = 16 waves per CU, LDS-bound. The folder's SQ counters are 0
    for these test kernels, so there is no achieved figure to compare."""
    folder = corpus / MI210
    (info,) = _rows(folder, "sysinfo.csv")
    got = {row["Kernel_Name"].split("(")[0]: amd_occupancy(info["gpu_arch"], **_dispatch(row))
           for row in _rows(folder, "pmc_perf.csv")}
    assert got["__amd_rocclr_fillBufferAligned.kd"].waves_per_cu == 32
    assert (got["generic_write"].waves_per_cu, got["generic_write"].limiters) == (16, ("lds",))
    assert (got["global_write"].waves_per_cu, got["global_write"].unlimited) == (32, ("lds", "workgroups"))


def test_mi300x_ck_tile_rocpd_dispatch(corpus: Path) -> None:
    """gfx942 ck_tile batched GEMM from rocprofv3's rocpd database: 256 work-items, vgpr 128 + accum 384 = 512
    (the whole unified file) -> 1 wave per SIMD; LDS 65536 -> 1 workgroup per CU; SGPR 112 -> 7. Both the VGPRs
    and the LDS allow exactly 1 workgroup: 4 waves per CU, 12.5 %."""
    uri = f"file:{corpus / 'rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db'}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        rows = set(db.execute("select workgroup_x * workgroup_y * workgroup_z, vgpr_count, accum_vgpr_count, "
                              "sgpr_count, lds_size from kernels where name like '%BatchedGemm%'"))
    assert rows == {(256, 128, 384, 112, 65536)}
    r = amd_occupancy("gfx942", *rows.pop())
    assert (r.workgroups_per_cu, r.waves_per_cu, r.occupancy_pct, r.limiters) == (1, 4, 12.5, ("vgprs", "lds"))


# --- bad input -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "kwargs", "message"), [
    (("gfx942", 256, 600), {}, "arch_vgpr=600"),
    (("gfx942", 256, 256, 300), {}, "exceed the 512-entry file"),
    (("gfx908", 256, 8, 300), {}, "accum_vgpr=300"),
    (("gfx1100", 256, 8, 4), {}, "RDNA has no accumulation VGPRs"),
    (("gfx942", 1025, 8), {}, "workgroup_size=1025"),
    (("gfx942", 256, 8, 0, 0, 65537), {}, "at most 65536 bytes of LDS"),
    (("gfx942", 256, 8), {"wave_size": 32}, "not supported on gfx942"),
    (("gfx942", 256, 8, 0, 120), {}, "sgpr=120"),
    (("gfx999", 256, 8), {}, "no CU limits for gfx target gfx999"),
    (("sm_90", 256, 8), {}, "not of the form gfx942"),
])
def test_bad_input(args: tuple, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        amd_occupancy(*args, **kwargs)


def test_unlaunchable_workgroup_says_why() -> None:
    # 1024 work-items = 16 waves = 4 per SIMD; 256 VGPRs allow 512 // 256 = 2: no workgroup fits.
    r = amd_occupancy("gfx942", 1024, 256)
    assert (r.launchable, r.waves_per_cu) == (False, 0)
    assert "need 4 waves on a SIMD; the VGPRs allow 2" in r.reason


# --- CLI -----------------------------------------------------------------------------------------------------------

def test_cli_gfx_json_and_text() -> None:
    out = run_cli("occupancy", "--gfx", "gfx942", "--threads", "256", "--regs", "48", "--sgpr", "32",
                  "--lds", "2048", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["waves_per_cu"], data["waves_per_simd"], data["limiters"][0]) == (32, 8.0, "waves")
    text = run_cli("occupancy", "--gfx", "gfx90a", "--threads", "1", "--regs", "4", "--accum-vgpr", "4",
                   "--lds", "4096")
    assert text.returncode == 0, text.stderr
    assert "65536 B per CU // 4096 = 16 workgroups" in text.stdout and "limited by lds" in text.stdout


@pytest.mark.parametrize("args", [("--gfx", "gfx1234"), ("--gfx", "gfx942", "--accum-vgpr", "600")])
def test_cli_gfx_errors_exit_2(args: tuple[str, ...]) -> None:
    out = run_cli("occupancy", *args, "--threads", "256", "--regs", "48")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
