"""The walls beside `iotrace bench`'s figures: a GPU card's at the dtype it would run, the CPU's own from a copy loop
measured in the run, and never a CPU run as a fraction of a GPU's wall. Every wall is recomputed here by hand from
identity 1 (bytes per step = weights + KV) and the CardBook's bandwidth."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from iotrace.cards import lookup
from iotrace.model import copy_bandwidth, measure
from iotrace.model.walls import CPU_NOT_A_FRACTION, card_dtype, decode_wall, weight_bytes_at
from tests.conftest import run_cli_in_process

#: SmolLM2-135M's KV per token and layer-head: 2 (K and V) · 30 layers · 3 KV heads · 64 head dims (its GGUF).
SMOLLM2_KV_VALUES_PER_TOKEN = 2 * 30 * 3 * 64


@pytest.mark.parametrize(("run", "on_gpu", "requested", "expected"), [
    ("fp32", False, None, "bf16"),     # a CPU's default fp32 is not what a GPU runs: the bench's GPU default
    ("fp32", False, "fp32", "bf16"),   # asked for fp32: still the GPU's dtype, not the CPU's
    ("fp16", False, "fp16", "fp16"),   # a half dtype asked for: the card runs that
    ("bf16", False, "bf16", "bf16"),
    ("fp32", True, "fp32", "fp32"),    # on a GPU the card ran the run's dtype
    ("fp16", True, "fp16", "fp16"),
])
def test_a_cards_wall_is_for_the_dtype_it_would_run(run: str, on_gpu: bool, requested: str | None,
                                                    expected: str) -> None:
    assert card_dtype(run, on_gpu, requested) == expected


def test_weights_are_rescaled_by_element_size() -> None:
    assert weight_bytes_at(538_000_000, "fp32", "bf16") == 269_000_000
    assert weight_bytes_at(269_000_000, "fp16", "fp32") == 538_000_000
    assert weight_bytes_at(1234, "bf16", "fp16") == 1234


def test_a_wall_with_a_reason_has_no_fraction() -> None:
    wall = decode_wall(2e9, 1, 1e12, "CardBook h100-sxm", dtype="bf16", weight_bytes=2e9,
                       no_fraction=CPU_NOT_A_FRACTION)
    assert wall.tokens_per_s == 500.0 and wall.fraction(50.0) is None
    assert wall.to_dict(50.0) == {"tok_s": 500.0, "bandwidth_gbs": 1000.0, "bandwidth_source": "CardBook h100-sxm",
                                  "dtype": "bf16", "weight_bytes": 2e9, "bytes_per_step": 2e9, "fraction": None,
                                  "no_fraction": CPU_NOT_A_FRACTION}
    assert decode_wall(2e9, 4, 1e12, "measured").fraction(1000.0) == 0.5  # 4 · 1e12 / 2e9 = 2000 tok/s


def test_decode_walls_of_a_cpu_run_at_fp16_for_the_card() -> None:
    """--dtype fp16 on a CPU: the run's own wall at fp16 from its copy bandwidth, the card's at fp16 too."""
    config = SimpleNamespace(layers=30, kv_heads=3, head_dim=64)
    card = lookup("rtx4090")
    step, (own, theirs) = measure._decode_walls(100e6, "fp16", 2, 40, config, 20e9, False, card, "fp16")
    kv = SMOLLM2_KV_VALUES_PER_TOKEN * 2 * 40 * 2  # 2 bytes a value, 40 tokens, batch 2
    assert step == own.step_bytes == 100e6 + kv and own.dtype == "fp16" and own.no_fraction is None
    assert own.tokens_per_s == pytest.approx(2 * 20e9 / (100e6 + kv), rel=1e-12)
    assert own.bandwidth_source == "measured copy (this run, CPU)"
    assert theirs.step_bytes == 100e6 + kv and theirs.tokens_per_s == pytest.approx(2 * 1008e9 / (100e6 + kv))
    assert theirs.fraction(1.0) is None and theirs.no_fraction == CPU_NOT_A_FRACTION


def test_copy_bandwidth_is_read_plus_write_over_the_median_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The figure is 2 · nbytes / median(copy times): a clock that makes the copies take 0.3, 0.1 and 0.2 s gives
    2 · nbytes / 0.2 s. The untimed first copy is not read off the clock."""
    ticks = iter([0.0, 0.3, 1.0, 1.1, 2.0, 2.2])
    monkeypatch.setattr(copy_bandwidth.time, "perf_counter", lambda: next(ticks))
    bandwidth = copy_bandwidth.copy_bandwidth_bytes_per_s("cpu", nbytes=1 << 20, reps=3)
    assert bandwidth == pytest.approx(2 * (1 << 20) / 0.2, rel=1e-12)


def test_copy_bandwidth_of_this_cpu_is_measured() -> None:
    # 64 MiB: twice this machine's 32 MiB L3 (sysfs), cheap enough for a unit test. The bounds only catch a unit
    # slip: 0.1 GB/s is below any DRAM since DDR (PC-1600: 1.6 GB/s), 10 TB/s above any CPU's memory.
    bandwidth = copy_bandwidth.copy_bandwidth_bytes_per_s("cpu", nbytes=64 << 20, reps=3)
    assert 1e8 < bandwidth < 1e13


def test_the_cpu_copy_is_well_above_the_last_level_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_bandwidth, "_llc_bytes", lambda: 0)  # sysfs unreadable
    assert copy_bandwidth._cpu_copy_bytes() == 256 << 20
    monkeypatch.setattr(copy_bandwidth, "_llc_bytes", lambda: 384 << 20)  # an EPYC 9654's twelve 32 MiB L3s
    assert copy_bandwidth._cpu_copy_bytes() == 768 << 20


def test_bad_copy_sizes_are_refused() -> None:
    from iotrace.errors import InvalidValueError

    with pytest.raises(InvalidValueError):
        copy_bandwidth.copy_bandwidth_bytes_per_s("cpu", nbytes=1 << 20, reps=0)


def test_progress_lines_go_to_stderr_one_per_phase(capsys: pytest.CaptureFixture[str]) -> None:
    from iotrace.cli.output import progress_lines

    with progress_lines("bench") as say:
        say("loading")
        say("warm-up")
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["loading", "warm-up", "done"]
    assert all(line.startswith("iotrace bench [") and line.split("] ")[0].endswith(" s") for line in lines)


@pytest.mark.slow
def test_cpu_run_walls_against_a_named_card() -> None:
    """The user's case: --card rtx4090 from a CPU run. The card's wall is at bf16 (weights and KV at 2 bytes), its
    fraction null with the reason; the CPU's own wall is from the copy bandwidth measured in the run, and the
    run's fraction of it is decode tok/s over wall tok/s."""
    pytest.importorskip("gguf", reason="the bench needs iotrace[model] (make setup installs it)")
    result = run_cli_in_process("bench", "--gen-tokens", "4", "--reps", "1", "--card", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (d,) = data["decode"]
    own, card = d["walls"]
    rate = d["decode_tok_s"]["mean"]
    weights = data["model"]["weight_bytes"]  # fp32 on the CPU
    context = d["context_start"] + 2  # the mean context of the 4 timed steps
    assert data["dtype"] == "fp32" and weights == 4 * data["model"]["params"]  # the tied head is the embedding

    assert own["bandwidth_source"] == "measured copy (this run, CPU)" and own["bandwidth_gbs"] > 0
    fp32_step = weights + SMOLLM2_KV_VALUES_PER_TOKEN * 4 * context
    assert own["dtype"] == "fp32" and own["bytes_per_step"] == pytest.approx(fp32_step, rel=1e-12)
    assert own["tok_s"] == pytest.approx(own["bandwidth_gbs"] * 1e9 / fp32_step, rel=1e-9)
    assert own["fraction"] == pytest.approx(rate / own["tok_s"], rel=1e-9) and d["decode_wall"] == own

    rtx4090 = lookup("rtx4090")
    bf16_step = weights / 2 + SMOLLM2_KV_VALUES_PER_TOKEN * 2 * context
    assert rtx4090.memory_bandwidth_gbs == 1008  # GDDR6X 21 Gbps on 384 bits (CardBook, Ada whitepaper)
    assert card["bandwidth_source"] == "CardBook rtx4090" and card["dtype"] == "bf16"
    assert card["weight_bytes"] == weights / 2 and card["bytes_per_step"] == pytest.approx(bf16_step, rel=1e-12)
    assert card["tok_s"] == pytest.approx(1008e9 / bf16_step, rel=1e-9)
    assert card["fraction"] is None and card["no_fraction"] == "a CPU run is not a fraction of a GPU's wall"

    pre = data["prefill"]["prefill_wall"]
    assert pre["precision"] == "bf16_tensor" and pre["dtype"] == "bf16" and pre["fraction"] is None
    assert pre["tok_s"] == pytest.approx(rtx4090.peak_tflops["bf16_tensor"] * 1e12 / (2 * data["model"]["params"]))
    assert data["breakdown"]["floor_dtype"] == "bf16" and data["breakdown"]["gap_us"] is None
    assert "rtx4090" not in data["labels"][0] or "not a fraction" in data["labels"][0]

    # The table says the same: the card's dtype, the n/a and its reason.
    from iotrace.cli.output import text_of
    from iotrace.render.bench import print_bench

    text = text_of(lambda console: print_bench(console, data))
    assert "card rtx4090 (its walls at bf16)" in text
    assert "of wall n/a for CardBook rtx4090: a CPU run is not a fraction of a GPU's wall" in text
    assert "prefill wall: rtx4090 at bf16_tensor; of wall n/a: a CPU run is not a fraction" in text
    assert f"{own['fraction']:.1%}" in text and "measured copy (this run, CPU)" in text
