"""AMD cards in the CardBook (issue 35): figures as their sources state them, the per-CU fields an AMD occupancy
calculation reads, and matching the device names real rocprof / rocprof-compute / ROCm Kineto exports record."""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from iotrace.cards import PRECISIONS, card_book, lookup, match_amd
from iotrace.errors import UnknownCardError
from tests.conftest import run_cli

NEW = ("mi300a", "mi325x", "mi355x", "mi250x", "mi250", "mi210", "mi100", "r9700", "rx7900xtx", "w7900")
AMD_FIELDS = ("gfx", "wave_size", "simds_per_cu", "vgpr_per_simd_kb", "max_waves_per_simd", "lds_per_cu_kb")
CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


def _raw_sources() -> dict[str, str]:
    text = resources.files("iotrace.data").joinpath("cards.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["sources"]


# --- figures as the sources state them ---------------------------------------------------------------------------

# key: (CUs, boost MHz, memory GB, GB/s, L2 MB, Infinity Cache MB, W, gfx)
FIGURES = {
    "mi300a": (228, 2100, 128, 5300, 24, 256, 550, "gfx942"),
    "mi325x": (304, 2100, 256, 6000, 32, 256, 1000, "gfx942"),
    "mi355x": (256, 2400, 288, 8000, 32, 256, 1400, "gfx950"),
    "mi250x": (220, 1700, 128, 3276.8, 16, None, 500, "gfx90a"),
    "mi250": (208, 1700, 128, 3276.8, 16, None, 500, "gfx90a"),
    "mi210": (104, 1700, 64, 1638.4, 8, None, 300, "gfx90a"),
    "mi100": (120, 1502, 32, 1228.8, 8, None, 300, "gfx908"),
    "r9700": (64, 2920, 32, 640, 8, 64, 300, "gfx1201"),
    "rx7900xtx": (96, 2500, 24, 960, 6, 96, 355, "gfx1100"),
    "w7900": (96, 2495, 48, 864, 6, 96, 295, "gfx1100"),
}


@pytest.mark.parametrize("key", NEW)
def test_card_figures(key: str) -> None:
    card = lookup(key)
    got = (card.sm_count, card.boost_clock_mhz, card.memory_gb, card.memory_bandwidth_gbs, card.l2_cache_mb,
           card.infinity_cache_mb, card.tdp_w, card.gfx)
    assert got == FIGURES[key]
    assert card.vendor == "amd" and card.cc is None


def test_dense_peaks_as_the_datasheets_state_them() -> None:
    # MI250X launch table (amd-mi200-specs): 47.9 vector / 95.7 matrix FP64, 383.0 FP16/BF16, 383.0 INT8 TOPS.
    assert lookup("mi250x").peak_tflops == {"fp64": 47.9, "fp64_tensor": 95.7, "fp32": 47.9, "fp16_tensor": 383.0,
                                            "bf16_tensor": 383.0, "int8_tensor": 383.0}
    assert lookup("mi250").peak_tflops["fp16_tensor"] == 362.1 and lookup("mi210").peak_tflops["fp16_tensor"] == 181.0
    # MI100: no FP64 matrix path, BF16 at half the FP16 matrix rate (amd-mi100-specs).
    mi100 = lookup("mi100").peak_tflops
    assert mi100 == {"fp64": 11.5, "fp32": 23.1, "fp16_tensor": 184.6, "bf16_tensor": 92.3, "int8_tensor": 184.6}
    # MI325X: the MI300X's dense rates; AMD's sparse FP8 5,229.8 halved is 2,614.9 (amd-mi325x-specs).
    assert lookup("mi325x").peak_tflops == lookup("mi300x").peak_tflops
    assert lookup("mi325x").peak_tflops["fp8_tensor"] == pytest.approx(5229.8 / 2)
    # MI300A = the CDNA 3 per-CU rates on 228 CUs.
    assert lookup("mi300a").peak_tflops["fp16_tensor"] == 980.6 and lookup("mi300a").peak_tflops["tf32_tensor"] == 490.3
    # MI355X: no TF32 matrix; FP8 8,192 FLOP/CU/clk x 256 CUs x 2.4 GHz.
    mi355x = lookup("mi355x").peak_tflops
    assert "tf32_tensor" not in mi355x and mi355x["fp8_tensor"] == pytest.approx(256 * 8192 * 2.4e9 / 1e12, abs=0.1)
    # RDNA 3 (wikipedia-rdna3): 61.4 FP32 (dual issue), 122.8 FP16, 1.919 FP64; no FP8 before RDNA 4.
    xtx = lookup("rx7900xtx").peak_tflops
    assert (xtx["fp32"], xtx["fp16_tensor"], xtx["fp64"]) == (61.4, 122.8, 1.919) and "fp8_tensor" not in xtx
    assert lookup("r9700").peak_tflops["fp8_tensor"] == 382.7


def test_amd_peaks_follow_per_cu_rates() -> None:
    """Each peak = CUs x per-CU rate x clock, within 1% (vendor rounding). Per-CU FLOP/clk by generation:
    CDNA 2/3 FP16 matrix 1024/2048, CDNA 4 4096; RDNA 3 WMMA 512, RDNA 4 1024; FP32 vector 128 (CDNA 1/2, no dual
    issue) or 256 (CDNA 3+, RDNA dual issue)."""
    per_cu = {"CDNA": (128, 1024), "CDNA 2": (128, 1024), "CDNA 3": (256, 2048), "CDNA 4": (256, 4096),
              "RDNA 3": (256, 512), "RDNA 4": (256, 1024)}
    for key in ("mi300x", *NEW):
        card = lookup(key)
        fp32, fp16 = per_cu[card.architecture]
        clock = card.boost_clock_mhz * 1e6
        assert card.peak_tflops["fp32"] == pytest.approx(card.sm_count * fp32 * clock / 1e12, rel=0.01), key
        assert card.peak_tflops["fp16_tensor"] == pytest.approx(card.sm_count * fp16 * clock / 1e12, rel=0.01), key


def test_amd_ratios_by_generation() -> None:
    """INT8 runs at the FP16 rate on CDNA 1/2 and RDNA 3, at twice it on CDNA 3/4 and RDNA 4; BF16 = FP16 except on
    CDNA 1; FP8 = 2 x FP16 wherever it exists; TF32 = FP16 / 2 on CDNA 3."""
    int8_ratio = {"CDNA": 1, "CDNA 2": 1, "RDNA 3": 1, "CDNA 3": 2, "CDNA 4": 2, "RDNA 4": 2}
    for key in ("mi300x", *NEW):
        card = lookup(key)
        p = card.peak_tflops
        assert p["int8_tensor"] / p["fp16_tensor"] == pytest.approx(int8_ratio[card.architecture], rel=0.01), key
        assert p["bf16_tensor"] / p["fp16_tensor"] == (0.5 if card.architecture == "CDNA" else 1.0), key
        if "fp8_tensor" in p:
            assert card.architecture in {"CDNA 3", "CDNA 4", "RDNA 4"} and p["fp8_tensor"] / p["fp16_tensor"] == \
                pytest.approx(2, rel=0.01), key
        if "tf32_tensor" in p:
            assert card.architecture == "CDNA 3" and p["tf32_tensor"] / p["fp16_tensor"] == pytest.approx(0.5, 0.01)
        assert ("fp64_tensor" in p) == (card.architecture in {"CDNA 2", "CDNA 3", "CDNA 4"}), key


# --- per-CU resources for AMD occupancy ----------------------------------------------------------------------------

def test_per_cu_resources_by_target() -> None:
    """(wave size, SIMDs/CU, VGPR KiB/SIMD, waves/SIMD, LDS KiB/CU) per gfx target, as rocm-gpu-specs and the corpus
    exports state them (RDNA: 128 KiB LDS and 768 KiB VGPRs per WGP of 2 CUs / 4 SIMD32s)."""
    expected = {"gfx908": (64, 4, 128, 10, 64), "gfx90a": (64, 4, 128, 8, 64), "gfx942": (64, 4, 128, 8, 64),
                "gfx950": (64, 4, 128, 8, 160), "gfx1100": (32, 2, 192, 16, 64), "gfx1201": (32, 2, 192, 16, 64)}
    seen = set()
    for card in card_book():
        if card.vendor != "amd" or card.gfx not in expected:
            continue
        got = (card.wave_size, card.simds_per_cu, card.vgpr_per_simd_kb, card.max_waves_per_simd, card.lds_per_cu_kb)
        assert got == expected[card.gfx], card.key
        seen.add(card.gfx)
    assert seen == set(expected)
    assert lookup("strix-halo").gfx == "gfx1151"
    for card in card_book():
        if card.vendor == "nvidia":
            assert all(getattr(card, name) is None for name in AMD_FIELDS) and card.gcds == 1, card.key


def test_mi250_gcds() -> None:
    """A trace sees one GCD: half the CUs (rocm-gpu-specs '110 per GCD', '104 per GCD') and half the memory."""
    mi250x, mi250, mi210 = lookup("mi250x"), lookup("mi250"), lookup("mi210")
    assert (mi250x.gcds, mi250x.device_cus, mi250.gcds, mi250.device_cus) == (2, 110, 2, 104)
    assert (mi210.gcds, mi210.device_cus) == (1, 104)
    assert mi250.memory_gb / mi250.gcds == mi210.memory_gb == 64  # why an MI250 GCD and an MI210 look alike


# --- sources ---------------------------------------------------------------------------------------------------------

def test_every_new_value_has_a_listed_source() -> None:
    sources = _raw_sources()
    fields = ("sm_count", "boost_clock_mhz", "memory_gb", "memory_bandwidth_gbs", "l2_cache_mb", "infinity_cache_mb",
              "tdp_w", *AMD_FIELDS)
    for key in ("mi300x", *NEW):
        card = lookup(key)
        names = [f for f in fields if getattr(card, f) is not None] + list(card.peak_tflops)
        for name in names:
            source = card.source(name)
            assert source in sources and len(sources[source]) > 80, f"{key}.{name}: {source}"
            assert card.citation(name) == sources[source]
    # Values resting on recollection say so; AMD's sparse figures are not used.
    assert lookup("mi300a").source("tdp_w") == "unverified-mi300a"
    assert lookup("r9700").source("boost_clock_mhz").startswith("unverified-")
    assert lookup("mi355x").source("fp64").startswith("unverified-")
    assert "5,229.8 with sparsity" in lookup("mi325x").citation("default")
    assert "'256 VGPR and 256 AccVGPR'" in lookup("mi100").citation("gfx")


def test_unverified_and_derived_entries_follow_the_naming_rule() -> None:
    for source, text in _raw_sources().items():
        if source.startswith("unverified-"):
            assert text.startswith("unverified:"), source
        if source.startswith("derived-"):
            assert text.startswith("derived"), source


# --- matching the names real AMD exports record ------------------------------------------------------------------

def _corpus(path: str) -> Path:
    found = CORPUS / path
    if not found.exists():
        pytest.skip(f"corpus file {path} not present")
    return found


def _sysinfo(folder: str) -> dict[str, str]:
    with open(_corpus(f"rocprof/{folder}/sysinfo.csv"), newline="") as handle:
        return next(csv.DictReader(handle))


@pytest.mark.parametrize(("folder", "model", "arch", "cus", "key"), [
    ("mi100_vcopy_omniperf2.0_rocm6.0", "MI100", "gfx908", 120, "mi100"),
    ("mi300x_bf16_bmm_rocprof-compute3.3_rocm7.1", "MI300X_A1", "gfx942", 304, "mi300x"),
])
def test_rocprof_compute_sysinfo_matches(folder: str, model: str, arch: str, cus: int, key: str) -> None:
    row = _sysinfo(folder)
    assert (row["gpu_model"], row["gpu_arch"], int(row["cu_per_gpu"])) == (model, arch, cus)
    found = match_amd(row["gpu_model"], gfx=row["gpu_arch"], cus=int(row["cu_per_gpu"]))
    assert found.card is not None and found.card.key == key and found.gcd is False
    assert int(row["simd_per_cu"]) == found.card.simds_per_cu and int(row["wave_size"]) == found.card.wave_size
    assert int(row["max_waves_per_cu"]) == found.card.max_waves_per_simd * found.card.simds_per_cu
    assert float(row["max_sclk"]) == found.card.boost_clock_mhz


def test_mi210_sysinfo_is_ambiguous_with_an_mi250_gcd() -> None:
    row = _sysinfo("mi210_multikernel_omniperf2.1_rocm6.2")
    assert (row["gpu_model"], row["gpu_arch"], row["cu_per_gpu"]) == ("MI200", "gfx90a", "104")
    found = match_amd(row["gpu_model"], gfx=row["gpu_arch"], cus=int(row["cu_per_gpu"]))
    assert found.card is None and set(found.candidates) == {"mi210", "mi250"} and "ambiguous" in found.reason
    assert float(row["hbm_bw"]) == lookup("mi210").memory_bandwidth_gbs  # the MI210's own 1638.4 GB/s


def test_rocpd_and_rocprof_v1_agents_match_mi300x() -> None:
    db = sqlite3.connect(_corpus("rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db"))
    rows = db.execute("select name, product_name, extdata from rocpd_info_agent where type = 'GPU'").fetchall()
    assert len(rows) == 8
    for gfx, product, extdata in rows:
        info = json.loads(extdata)
        found = match_amd(product, gfx=gfx, cus=info["cu_count"])
        assert found.card is not None and found.card.key == "mi300x", found.reason
        assert (info["lds_size_in_kb"], info["wave_front_size"], info["max_waves_per_simd"]) == \
            (found.card.lds_per_cu_kb, found.card.wave_size, found.card.max_waves_per_simd)
    trace = json.loads(_corpus("rocprof/mi300x_naive_bmm_rocprof-v1_results.json").read_text())
    text = json.dumps(trace)
    names = set(re.findall(r'Agent\d+\.MarketingName": "([^"]+)"', text))
    assert "AMDInstinctMI300X" in names
    assert match_amd("AMDInstinctMI300X", gfx="gfx942").card.key == "mi300x"


def test_rocm_kineto_generic_name_matches_no_card() -> None:
    with gzip.open(_corpus("kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz")) as handle:
        props = json.load(handle)["deviceProperties"][0]
    assert props["name"] == "AMD Radeon Graphics"
    found = match_amd(props["name"], cus=props["numSms"], memory_gb=props["totalGlobalMem"] / 2**30)
    assert found.card is None and set(found.candidates) == {"mi210", "mi250"}
    assert match_amd("AMD Radeon Graphics").card is None
    with pytest.raises(UnknownCardError):
        lookup("AMD Radeon Graphics")


def test_rocminfo_mi250x_mi250_name_resolves_by_gcd_cus() -> None:
    mi250 = match_amd("AMD Instinct MI250X/MI250", gfx="gfx90a", cus=104)
    mi250x = match_amd("AMD Instinct MI250X/MI250", gfx="gfx90a", cus=110)
    assert (mi250.card.key, mi250.gcd, mi250x.card.key, mi250x.gcd) == ("mi250", True, "mi250x", True)
    assert match_amd("AMD Instinct MI250X/MI250", gfx="gfx90a").card is None  # no CU count: either card


def test_r9700_names() -> None:
    row = json.loads(_corpus("bench-outputs/r9700_gfx1201_llama-bench_rocm_b7981.jsonl").read_text().splitlines()[0])
    assert row["gpu_info"] == "AMD Radeon AI PRO R9700"
    assert match_amd(row["gpu_info"]).card.key == "r9700" and lookup(row["gpu_info"]).key == "r9700"
    # gfx1201 with 64 CUs is also an RX 9070 XT (16 GB): only memory, or the name, makes it an R9700.
    assert match_amd(gfx="gfx1201", cus=64).card is None
    assert match_amd(gfx="gfx1201", cus=64, memory_gb=31.86).card.key == "r9700"


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"gfx": "gfx942"}, {"mi300x", "mi300a", "mi325x"}),
    ({"gfx": "gfx942", "cus": 304}, {"mi300x", "mi325x"}),
    ({"gfx": "gfx90a", "cus": 104}, {"mi210", "mi250"}),
    ({"gfx": "gfx950", "cus": 256}, {"mi355x", "AMD Instinct MI350X"}),
    ({"gfx": "gfx1100", "cus": 96}, {"rx7900xtx", "w7900"}),
    ({"name": "MI300"}, {"mi300x", "mi300a", "mi325x"}),
])
def test_shared_targets_are_ambiguous(kwargs: dict, expected: set[str]) -> None:
    found = match_amd(**kwargs)
    assert found.card is None and set(found.candidates) == expected and "ambiguous" in found.reason


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"gfx": "gfx942", "cus": 228}, "mi300a"),
    ({"gfx": "gfx942", "cus": 304, "memory_gb": 191.98}, "mi300x"),
    ({"gfx": "gfx942:sramecc+:xnack-", "cus": 304, "memory_gb": 255.98}, "mi325x"),
    ({"gfx": "gfx90a", "cus": 110}, "mi250x"),
    ({"gfx": "gfx908"}, "mi100"),
    ({"gfx": "gfx1100", "cus": 96, "memory_gb": 47.98}, "w7900"),
    ({"name": "AMD Instinct MI355X"}, "mi355x"),
    ({"name": "Radeon RX 7900 XTX"}, "rx7900xtx"),
])
def test_cus_and_memory_decide(kwargs: dict, key: str) -> None:
    found = match_amd(**kwargs)
    assert found.card is not None and found.card.key == key, found.reason


def test_mismatches_match_nothing() -> None:
    assert match_amd("AMD Instinct MI300X", cus=38).card is None  # a CPX partition shows 38 of 304 CUs
    assert match_amd("MI300", gfx="gfx90a").card is None
    assert match_amd("AMD Instinct MI999").candidates == ()


# --- the CLI ------------------------------------------------------------------------------------------------------

def test_cli_lists_and_shows_amd_cards() -> None:
    listed = json.loads(run_cli("cards", "--json").stdout)
    assert set(NEW) <= {c["key"] for c in listed}
    shown = json.loads(run_cli("card", "mi250x", "--json").stdout)
    assert (shown["sm_count"], shown["gcds"], shown["gfx"], shown["lds_per_cu_kb"]) == (220, 2, "gfx90a", 64)
    assert shown["sources"]["default"] == "amd-mi200-specs" and "95.7" in shown["citations"]["amd-mi200-specs"]
    assert set(shown["peak_tflops"]) <= set(PRECISIONS)
    table = run_cli("cards").stdout
    for key in NEW:
        assert key in table
