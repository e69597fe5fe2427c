"""The CardBook: lookup, sources, internal consistency, and agreement with devices named in real traces."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from iotrace.cards import PRECISIONS, SEGMENTS, card_book, detect, lookup
from iotrace.errors import NoGpuError, UnknownCardError
from iotrace.sm_limits import known_ccs
from iotrace.trace.devices import card_key

REQUIRED = {
    "rtx 3090": "rtx3090", "RTX 4090": "rtx4090", "rtx5090": "rtx5090", "A100 SXM 80GB": "a100-sxm4-80gb",
    "A10G": "a10g", "L4": "l4", "T4": "t4", "V100": "v100-sxm2-32gb", "H100 SXM": "h100-sxm", "h200": "h200-sxm",
    "B200": "b200", "DGX Spark": "gb10", "MI300X": "mi300x", "Strix Halo": "strix-halo",
    "GTX 1660 SUPER": "gtx1660super", "RTX 2060 SUPER": "rtx2060super", "RTX 2070": "rtx2070",
    "RTX 4050 Laptop GPU": "rtx4050-laptop", "A40": "a40", "A10": "a10",
    "NVIDIA GeForce RTX 4070 Laptop GPU": "rtx4070-laptop", "rtx 4070 laptop": "rtx4070-laptop", "rtx 4070": "rtx4070",
}


@pytest.mark.parametrize(("query", "key"), sorted(REQUIRED.items()))
def test_required_cards_resolve(query: str, key: str) -> None:
    assert lookup(query).key == key


@pytest.mark.parametrize("spelling", ["3090", "rtx3090", "RTX-3090", "NVIDIA GeForce RTX 3090", "GeForce RTX 3090",
                                      "  geforce rtx 3090  "])
def test_lookup_forgives_spelling(spelling: str) -> None:
    assert lookup(spelling).key == "rtx3090"


def test_a10_and_a10g_are_different_cards() -> None:
    assert lookup("a10").key == "a10" and lookup("a10g").key == "a10g"


def test_unknown_card_lists_close_matches() -> None:
    with pytest.raises(UnknownCardError) as info:
        lookup("rtx 3070")
    message = str(info.value)
    assert "rtx 3070" in message and "did you mean" in message and "rtx30" in message and "iotrace cards" in message


def test_every_value_has_a_citation() -> None:
    for card in card_book():
        assert card.source("default") in card.citations, card.key
        for name in ("sm_count", "memory_bandwidth_gbs", "memory_gb", "boost_clock_mhz", *card.peak_tflops):
            assert len(card.citation(name)) > 40, f"{card.key}.{name}: {card.citation(name)!r} is not a citation"
        assert set(card.peak_tflops) <= set(PRECISIONS)
        assert card.peak_tflops, f"{card.key} states no peak"


def test_every_card_names_its_segment_as_its_vendor_files_it() -> None:
    """The segment (datacenter, workstation, consumer) is what `recipes predict` groups cards by: every card has one,
    cited to its vendor's product families; the brand names in the card's name agree with it."""
    for card in card_book():
        assert card.segment in SEGMENTS and card.source("segment") == f"{card.vendor}-segments", card.key
        assert card.to_dict()["segment"] == card.segment
        name = card.name.lower()
        if "geforce" in name or "radeon rx" in name:
            assert card.segment == "consumer", card.key
        if "instinct" in name or name.startswith(("nvidia a1", "nvidia h", "nvidia b2", "tesla v100-sxm2")):
            assert card.segment == "datacenter", card.key
    segments = {key: lookup(key).segment for key in ("h100-pcie", "h800-pcie", "l40s", "mi300x", "rtx4090",
                                                     "strix-halo", "r9700", "w7900", "gb10", "v100-dgxs-32gb")}
    assert segments == {"h100-pcie": "datacenter", "h800-pcie": "datacenter", "l40s": "datacenter",
                        "mi300x": "datacenter", "rtx4090": "consumer", "strix-halo": "consumer",
                        "r9700": "workstation", "w7900": "workstation", "gb10": "workstation",
                        "v100-dgxs-32gb": "workstation"}


def test_nvidia_cards_have_sm_limits() -> None:
    for card in card_book():
        if card.vendor == "nvidia":
            assert card.cc in known_ccs(), f"{card.key}: CC {card.cc} has no SM limits"
            assert card.sm_limits.max_threads_per_sm >= 1024
        else:
            assert card.cc is None


# FP32 lanes per SM, from each architecture's whitepaper (SM diagram): Volta, Turing and GA100 have 64 FP32 units
# per SM; GA10x, Ada, Hopper and Blackwell 128. AMD CDNA3 CUs: 128 FP32 lanes (dual-issue 64 x 2, MI300X datasheet
# 163.4 TF = 304 CUs x 128 x 2 x 2.1 GHz); RDNA 3.5 CUs: 128 with dual issue.
FP32_LANES = {"GV100": 64, "TU": 64, "GA100": 64, "GA10": 128, "AD": 128, "GH100": 128, "GB": 128, "": 128}


def _lanes(chip: str) -> int:
    return next(lanes for prefix, lanes in FP32_LANES.items() if chip.upper().startswith(prefix))


def test_fp32_peak_is_sms_times_lanes_times_clock() -> None:
    """A pencil check of every card: FP32 peak = SMs x FP32 lanes x 2 (FMA) x boost clock, within 5%."""
    for card in card_book():
        if card.vendor != "nvidia" or card.boost_clock_mhz is None:
            continue
        expected = card.sm_count * _lanes(card.chip) * 2 * card.boost_clock_mhz * 1e6 / 1e12
        assert card.peak_tflops["fp32"] == pytest.approx(expected, rel=0.05), f"{card.key} ({card.chip})"


def _ratio(card, a: str, b: str) -> float | None:
    peaks = card.peak_tflops
    return peaks[a] / peaks[b] if a in peaks and b in peaks else None


def test_tensor_peaks_keep_their_architectural_ratios() -> None:
    """Dense figures with FP32 accumulation keep fixed ratios on every card since Ampere: a sparse figure, or a
    GeForce FP16-accumulate figure, breaks them (whitepapers' tensor throughput tables). 3% covers vendors' rounding
    (HGX B200: TF32 "2.2" against FP16 "4.5" PFLOPS)."""
    checked = 0
    for card in card_book():
        if card.vendor != "nvidia":  # AMD ratios differ by generation (CDNA 2: INT8 = FP16); test_amd_cards.py
            continue
        # BF16 runs at the FP16 rate; TF32 at half of it; FP8 at twice it.
        for other, expected in (("bf16_tensor", 1.0), ("tf32_tensor", 0.5), ("fp8_tensor", 2.0)):
            ratio = _ratio(card, other, "fp16_tensor")
            if ratio is not None:
                assert ratio == pytest.approx(expected, rel=0.03), f"{card.key}: {other}/fp16_tensor = {ratio}"
                checked += 1
        # INT8 is twice FP16 with FP32 accumulate, or four times where FP32 accumulate runs at half rate (GeForce).
        ratio = _ratio(card, "int8_tensor", "fp16_tensor")
        if ratio is not None:
            assert min(abs(ratio - 2), abs(ratio - 4)) < 0.05, f"{card.key}: int8/fp16 = {ratio}"
            checked += 1
    assert checked >= 50


def _corpus_devices(corpus: Path) -> list[tuple[str, str, int, str]]:
    """(file, device name, SM count, CC) for every device a real trace in the corpus describes."""
    devices = []
    for path in sorted((corpus / "nsys").glob("*.sqlite")):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            query = "SELECT name, smCount, computeMajor, computeMinor FROM TARGET_INFO_GPU"
            for name, sms, major, minor in db.execute(query):
                devices.append((path.name, name, sms, f"{major}.{minor}"))
    for path in sorted((corpus / "kineto").glob("*.json*")):
        with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
            trace = json.load(f)
        for props in trace.get("deviceProperties") or trace.get("computeProperties") or []:
            sms = props.get("numSms", props.get("multiProcessorCount"))
            cc = f"{props.get('computeMajor', props.get('major'))}.{props.get('computeMinor', props.get('minor'))}"
            devices.append((path.name, props["name"], sms, cc))
    ncu_report = pytest.importorskip("ncu_report", reason="ncu-report is not installed: pip install 'iotrace[nsight]'")
    for path in sorted((corpus / "ncu-rep").iterdir()):
        action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)
        value = {n: action.metric_by_name(f"device__attribute_{n}") for n in
                 ("display_name", "multiprocessor_count", "compute_capability_major", "compute_capability_minor")}
        devices.append((path.name, value["display_name"].as_string(), int(value["multiprocessor_count"].as_double()),
                        f"{int(value['compute_capability_major'].as_double())}."
                        f"{int(value['compute_capability_minor'].as_double())}"))
    return devices


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_every_nvidia_device_in_the_corpus_is_a_card(corpus: Path) -> None:
    devices = _corpus_devices(corpus)
    checked = 0
    for file, name, sms, cc in devices:
        if name.startswith("AMD") or not sms:  # a Windows capture also lists "Microsoft Basic Render Driver", 0 SMs
            continue
        card = lookup(card_key(name, sms) or name)
        assert (card.sm_count, card.cc) == (sms, cc), \
            f"{file}: {name} is {sms} SMs CC {cc}; CardBook {card.key} says {card.sm_count} SMs CC {card.cc}"
        checked += 1
    assert checked >= 20 and len({d[1] for d in devices}) >= 12


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_non_nvidia_device_is_a_clear_error(corpus: Path) -> None:
    names = {name for _, name, _, _ in _corpus_devices(corpus) if name.startswith("AMD")}
    assert names == {"AMD Radeon Graphics"}  # MI250 under ROCm 6.2 reports only this
    with pytest.raises(UnknownCardError, match="AMD Radeon Graphics"):
        lookup("AMD Radeon Graphics")


def test_detect_prefers_the_named_card_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOTRACE_CARD", "h100")
    assert detect("a10g").key == "a10g"
    assert detect().key == "h100-sxm"


def test_detect_without_gpu_or_name_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so detect() finds it")
    monkeypatch.delenv("IOTRACE_CARD", raising=False)
    with pytest.raises(NoGpuError, match=r"no GPU found .* pass --card NAME or set IOTRACE_CARD"):
        detect()


@pytest.mark.gpu
def test_detect_reads_the_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU: torch.cuda sees none")
    monkeypatch.delenv("IOTRACE_CARD", raising=False)
    card = detect()
    props = torch.cuda.get_device_properties(0)
    assert card.sm_count == props.multi_processor_count
    assert card.cc == f"{props.major}.{props.minor}"


def test_a_cuda_core_peak_never_cites_a_tensor_source() -> None:
    """The A10G's FP32 peak once cited `unverified-a10g-tensor`: a CUDA-core rate must rest on a CUDA-core source."""
    wrong = [f"{card.key}.{key} cites {card.source(key)}" for card in card_book() for key in card.peak_tflops
             if "tensor" not in key and "tensor" in card.source(key)]
    assert wrong == []
    a10g = lookup("a10g")
    assert a10g.source("fp32") == "derived-ga10x-fp32" and "80 x 128 x 2 x 1.71 GHz = 35.0" in a10g.citation("fp32")
    assert a10g.peak_tflops["fp32"] == 35.0


# --- cards added for unseen profiler traces: driver names (ncu/nsys/Kineto/nvidia-smi) and SM counts ------------------

ADDED = {
    "rtx3080": (68, ["NVIDIA GeForce RTX 3080", "GeForce RTX 3080", "rtx 3080", "3080 10gb"]),
    "rtx3080-12gb": (70, ["NVIDIA GeForce RTX 3080 12GB", "rtx 3080 12gb"]),
    "rtx4060": (24, ["NVIDIA GeForce RTX 4060", "GeForce RTX 4060", "rtx 4060"]),
    "rtx4060ti": (34, ["NVIDIA GeForce RTX 4060 Ti", "GeForce RTX 4060 Ti", "rtx 4060 ti 16gb"]),
    "rtx4070": (46, ["NVIDIA GeForce RTX 4070", "GeForce RTX 4070", "rtx 4070"]),
    "rtx4080": (76, ["NVIDIA GeForce RTX 4080", "GeForce RTX 4080", "rtx 4080"]),
    "rtx5070": (48, ["NVIDIA GeForce RTX 5070", "GeForce RTX 5070", "rtx 5070"]),
    "rtx5080": (84, ["NVIDIA GeForce RTX 5080", "GeForce RTX 5080", "rtx 5080"]),
    "l40s": (142, ["NVIDIA L40S", "L40S"]),
    "a30": (56, ["NVIDIA A30", "A30"]),
    "h800-sxm": (132, ["NVIDIA H800", "H800", "h800 sxm"]),
    "rtx3080ti": (80, ["NVIDIA GeForce RTX 3080 Ti", "GeForce RTX 3080 Ti", "rtx 3080 ti", "3080ti"]),
    "h800-pcie": (114, ["NVIDIA H800 PCIe", "h800 pcie"]),
    "gh200-96gb": (132, ["NVIDIA GH200 480GB", "NVIDIA GH200 120GB", "gh200", "gh200 96gb"]),
    "gh200-144gb": (132, ["NVIDIA GH200 144G HBM3e", "gh200 144gb"]),
}


@pytest.mark.parametrize(("key", "sms", "alias"), [(k, s, a) for k, (s, names) in ADDED.items() for a in names])
def test_added_cards_resolve_by_every_driver_name(key: str, sms: int, alias: str) -> None:
    from iotrace.trace.devices import card_key

    assert lookup(alias).key == key
    assert lookup(alias).sm_count == sms
    assert card_key(lookup(alias).name, sms) == key


def test_rtx3080_10_and_12_gb_split_by_sm_count() -> None:
    from iotrace.trace.devices import card_key

    name = "NVIDIA GeForce RTX 3080"  # what the driver reports for both
    assert card_key(name, 68) == "rtx3080" and card_key(name, 70) == "rtx3080-12gb"
    assert card_key(name, None) == "rtx3080" and card_key(name, 64) is None
    ten, twelve = lookup("rtx3080"), lookup("rtx3080-12gb")
    assert (ten.memory_bandwidth_gbs, twelve.memory_bandwidth_gbs) == (760, 912)
    assert (ten.memory_gb, twelve.memory_gb) == (10, 12)


def test_added_cards_carry_their_cited_figures() -> None:
    h800, l40s, a30 = lookup("NVIDIA H800"), lookup("NVIDIA L40S"), lookup("NVIDIA A30")
    assert h800.sm_count == 132 and h800.peak_tflops["fp64"] == 1 and h800.source("sm_count") == "unverified-h800"
    assert l40s.memory_bandwidth_gbs == 864 and l40s.peak_tflops["fp8_tensor"] == 733  # 1,466 sparse, halved
    assert "864 GB/s" in l40s.citation("memory_bandwidth_gbs")
    assert a30.cc == "8.0" and a30.memory_bandwidth_gbs == 933 and "933.1 GB/s" in a30.citation("default")
    assert lookup("rtx 4060 ti").memory_bandwidth_gbs == 288 and lookup("rtx 5080").memory_bandwidth_gbs == 960


# --- RTX 3080 Ti, H800 PCIe and GH200 (issue 20): figures as their sources state them ---------------------------------

def test_rtx3080ti_carries_its_launch_figures() -> None:
    card = lookup("NVIDIA GeForce RTX 3080 Ti")
    assert (card.sm_count, card.cc, card.boost_clock_mhz) == (80, "8.6", 1665)
    assert (card.memory_gb, card.memory_bandwidth_gbs, card.l2_cache_mb) == (12, 912, 6)
    assert card.peak_tflops["fp32"] == 34.1 and card.peak_tflops["int8_tensor"] == 272.8  # table: "34.1 | 273"
    cited = card.citation("default")
    assert "10,240 CUDA cores (= 80 SMs x 128" in cited and "1665 MHz boost" in cited and "912 GB/s" in cited
    # GeForce tensor rates come from the RTX 3090's per-SM rates, not a 3080 Ti document
    assert card.source("fp16_tensor") == "derived-ga10x-geforce"
    assert card.peak_tflops["fp16_tensor"] == pytest.approx(80 * 512 * 1.665e-3, abs=0.05)


def test_h800_pcie_is_the_h100_pcie_with_fp64_cut() -> None:
    h800, h100 = lookup("NVIDIA H800 PCIe"), lookup("h100 pcie")
    same = ("sm_count", "cc", "memory_gb", "memory_type", "memory_bandwidth_gbs", "l2_cache_mb", "tdp_w")
    assert {f: getattr(h800, f) for f in same} == {f: getattr(h100, f) for f in same}
    assert (h800.sm_count, h800.memory_bandwidth_gbs) == (114, 2000)
    assert {k: v for k, v in h800.peak_tflops.items() if "fp64" not in k} == \
        {k: v for k, v in h100.peak_tflops.items() if "fp64" not in k}
    assert h800.peak_tflops["fp64"] == h800.peak_tflops["fp64_tensor"] == 0.8
    assert "114 SM, 50 MiB L2" in h800.citation("sm_count") and "OEM1513 rating includes structural sparsity" \
        in h800.citation("fp16_tensor")
    # no H800 PCIe datasheet was found: what rests on recall or on the H100 PCIe says so
    for name in ("fp64", "fp64_tensor", "fp32", "tf32_tensor", "int8_tensor", "boost_clock_mhz"):
        assert h800.source(name) == "unverified-h800-pcie", name


def test_gh200_memory_variants_share_compute_and_differ_in_memory() -> None:
    hbm3, hbm3e = lookup("NVIDIA GH200 480GB"), lookup("NVIDIA GH200 144G HBM3e")
    assert lookup("NVIDIA GH200 120GB") is hbm3  # the driver names the 96 GB GPU after the Grace side's LPDDR5X
    assert (hbm3.memory_gb, hbm3.memory_type, hbm3.memory_bandwidth_gbs) == (96, "HBM3", 4000)
    assert (hbm3e.memory_gb, hbm3e.memory_type, hbm3e.memory_bandwidth_gbs) == (144, "HBM3e", 4900)
    assert hbm3.peak_tflops == hbm3e.peak_tflops
    assert (hbm3.sm_count, hbm3.boost_clock_mhz, hbm3.cc) == (hbm3e.sm_count, hbm3e.boost_clock_mhz, hbm3e.cc) \
        == (132, 1980, "9.0")
    sheet = hbm3.citation("memory_bandwidth_gbs")
    assert "96GB HBM3 | 144GB HBM3e" in sheet and "up to 4TB/s | up to 4.9TB/s" in sheet
    # the datasheet states dense beside sparse; the dense one is carried
    assert "FP8 Tensor Core 3,958* | 1,979" in sheet and hbm3.peak_tflops["fp8_tensor"] == 1979
    assert "TF32 Tensor Core 989* | 494" in sheet and hbm3.peak_tflops["tf32_tensor"] == 494
    assert hbm3.tdp_w is None and hbm3e.tdp_w is None  # NVIDIA gives power only for CPU + GPU + memory
    assert hbm3e.source("sm_count") == "unverified-gh200-144g" and hbm3.source("sm_count") == "gh200-96gb-devices"


def _nsys_export_with_devices(corpus: Path, out: Path, devices: list[tuple[str, int, str]]) -> Path:
    """The real H200 Nsight Systems export reduced to its metadata and TARGET_INFO_GPU, with that table's one real
    row copied once per (name, SM count, CC): an export in the real schema from GPUs the corpus has no trace of."""
    source = corpus / "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"
    with sqlite3.connect(f"file:{source}?mode=ro&immutable=1", uri=True) as db:
        db.execute(f"VACUUM INTO '{out}'")
    with sqlite3.connect(out) as db:
        keep = {"TARGET_INFO_GPU", "StringIds"} | {n for (n,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE '%META%'")}
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            if name not in keep:
                db.execute(f'DROP TABLE "{name}"')
        given = ("id", "name", "smCount", "computeMajor", "computeMinor")
        cols = ", ".join(f'"{r[1]}"' for r in db.execute("PRAGMA table_info(TARGET_INFO_GPU)") if r[1] not in given)
        for device, (name, sms, cc) in enumerate(devices, start=1):
            major, minor = (int(part) for part in cc.split("."))
            db.execute(f"INSERT INTO TARGET_INFO_GPU ({', '.join(given)}, {cols}) SELECT ?, ?, ?, ?, ?, {cols} "
                       "FROM TARGET_INFO_GPU WHERE id = 0", (device, name, sms, major, minor))
        db.execute("DELETE FROM TARGET_INFO_GPU WHERE id = 0")
    return out


def test_an_export_naming_the_new_gpus_matches_their_cards(corpus: Path, tmp_path: Path) -> None:
    from iotrace.trace import load

    rows = [("NVIDIA GeForce RTX 3080 Ti", 80, "8.6", "rtx3080ti"), ("NVIDIA H800 PCIe", 114, "9.0", "h800-pcie"),
            ("NVIDIA GH200 480GB", 132, "9.0", "gh200-96gb"), ("NVIDIA GH200 120GB", 132, "9.0", "gh200-96gb"),
            ("NVIDIA GH200 144G HBM3e", 132, "9.0", "gh200-144gb"),
            ("NVIDIA H800 PCIe", 132, "9.0", None)]  # a name match whose SM count disagrees is refused
    trace = load(_nsys_export_with_devices(corpus, tmp_path / "new_gpus.sqlite", [r[:3] for r in rows]))
    devices = trace.devices
    assert list(zip(devices["name"], devices["sm_count"], devices["cc"], devices["card"], strict=True)) == rows
    for name, sms, cc, key in rows[:-1]:
        assert (lookup(key).sm_count, lookup(key).cc) == (sms, cc), name
    assert [note for note in trace.meta["notes"] if "not in the CardBook" in note] == [
        "device 6 'NVIDIA H800 PCIe' (CC 9.0, 132 SMs) is not in the CardBook: its rooflines use the file's own "
        "properties; add a card for it to iotrace/data/cards.toml (see docs/commands/cards.md: the CardBook)"]


def test_gh200_l2_is_what_a_six_stack_gh100_reports(corpus: Path) -> None:
    """The GH200 cards' 60 MB L2 is the full GH100's: the real H200 export (GH100, all six HBM stacks, like GH200)
    reports it; the H100 SXM card's 50 MB is the five-stack part's."""
    source = corpus / "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"
    with sqlite3.connect(f"file:{source}?mode=ro&immutable=1", uri=True) as db:
        (chip, l2_bytes, sms), = db.execute("SELECT chipName, l2CacheSize, smCount FROM TARGET_INFO_GPU").fetchall()
    assert chip == "GH100"
    for key in ("gh200-96gb", "gh200-144gb"):
        card = lookup(key)
        assert card.l2_cache_mb * 2**20 == l2_bytes and card.sm_count == sms and card.chip == chip
    assert "62914560" in lookup("gh200-96gb").citation("l2_cache_mb")


def test_rtx4070_laptop_is_what_its_ncu_report_states(corpus: Path) -> None:
    """Issue 45: the RTX 4070 Laptop card against the real Nsight Compute 2024.3 report that names it, read with
    NVIDIA's ncu_report: 36 SMs, CC 8.9, 32 MiB L2, 128-bit at 8001 MHz (= 256 GB/s); the file's 1980 MHz max clock
    sits under the 2175 MHz top boost (115 W) the peaks use. The desktop RTX 4070 (46 SMs) stays its own card."""
    ncu_report = pytest.importorskip("ncu_report", reason="ncu-report is not installed: pip install 'iotrace[nsight]'")
    path = corpus / "ncu-rep/rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep"
    action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)

    def attr(name: str) -> float:
        return action.metric_by_name(f"device__attribute_{name}").as_double()

    name = action.metric_by_name("device__attribute_display_name").as_string()
    assert name == "NVIDIA GeForce RTX 4070 Laptop GPU"
    card = lookup(card_key(name, int(attr("multiprocessor_count"))) or name)
    assert (card.key, card.sm_count, card.cc, card.chip) == ("rtx4070-laptop", 36, "8.9", "AD106")
    assert card.l2_cache_mb * 2**20 == attr("l2_cache_size") == 33554432
    # DDR: bus bytes x memory clock x 2 transfers per clock
    file_gbs = attr("global_memory_bus_width") / 8 * attr("max_mem_frequency_khz") * 1e3 * 2 / 1e9
    assert file_gbs == pytest.approx(card.memory_bandwidth_gbs, rel=0.001) and card.memory_bandwidth_gbs == 256
    assert attr("max_gpu_frequency_khz") / 1e3 == 1980 < card.boost_clock_mhz == 2175
    assert (card.memory_gb, card.tdp_w) == (8, 115)
    # Derived like the other Ada GeForce cards: SMs x 256 / 512 / 1024 / 2048 per clock x 2.175 GHz
    peaks = card.peak_tflops
    assert (peaks["fp32"], peaks["fp16_tensor"], peaks["fp8_tensor"], peaks["int8_tensor"]) == (20.0, 40.1, 80.2, 160.4)
    assert peaks["fp64"] == pytest.approx(36 * 4 * 2.175e-3, abs=5e-4)
    assert card.source("fp16_tensor") == "derived-ada-geforce" and card.source("l2_cache_mb") == "corpus-devattrs"
    cited = card.citation("default")
    assert "4,608" in cited and "2175 MHz" in cited and "35-115 W" in cited and "128-bit" in cited
    assert "RTX 4070 Laptop GPU 36/1980 MHz/32 MiB/128-bit@8001" in card.citation("l2_cache_mb")
    assert lookup("NVIDIA GeForce RTX 4070").sm_count == 46 and card_key("NVIDIA GeForce RTX 4070", 46) == "rtx4070"
