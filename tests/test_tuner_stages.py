"""The tuner on a num_stages slice (the model states what pipelining changes; ties are shown as ties), a replay's
wording (a replayed time is never called measured) and the table in a pipe (every column kept).

The slice is the README's: four GEMM configs cross-compiled for sm_90 (one pruned for shared memory).
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from iotrace.autotune.render import print_tune
from iotrace.autotune.tuner import TuneOptions, tune, tune_from_sweep
from iotrace.cards import lookup
from iotrace.kernel_call import KernelCall
from iotrace.kernels.gemm import GemmSpec
from iotrace.plugins import kernel
from tests.conftest import run_cli

GEMM = GemmSpec()
FIX = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "USE_TMA": False}
SWEEP = "bench/sweeps/gemm-h100-sxm-square-4096-BLOCK_K64-synth.json"


@pytest.fixture(scope="module")
def stages():
    call = KernelCall(GEMM, GEMM.check_shape(GEMM.presets["square-4096"]), "fp16", lookup("h100-sxm"))
    return tune(call, TuneOptions(mode="static", fix=FIX))


@pytest.fixture(scope="module")
def replay():
    return tune_from_sweep(kernel("gemm"), TuneOptions(replay=SWEEP, budget=12, use_cache=False))


def _by_stages(result) -> dict[int, object]:
    return {r.config["num_stages"]: r for r in result.results}


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_the_model_states_what_pipelining_changes(stages) -> None:
    rows = _by_stages(stages)
    assert rows[5].entry.pruned is not None  # 240 KB of staged tiles: over sm_90's 227 KB
    two, three, four = (rows[s].entry.prediction for s in (2, 3, 4))
    # Two stages cannot cover the load latency with one block per SM: compute runs below its rate.
    assert two.pipelining is not None and two.pipelining < 1.0
    assert three.pipelining == four.pipelining == 1.0
    assert two.time_us > three.time_us
    assert rows[2].rank == 3


def test_a_tie_is_shown_as_a_tie(stages) -> None:
    rows = _by_stages(stages)
    assert f"{rows[3].entry.predicted_us:.4g}" == f"{rows[4].entry.predicted_us:.4g}" == "179"
    assert "ranked #1" not in stages.why
    assert stages.why.startswith("tied #1 with 1 other at 179 µs predicted"), stages.why
    assert "the model cannot tell them apart" in stages.why
    # What separates the two: nothing the model sees (three and four stages, same tile, warps and occupancy).
    assert "ahead of BM=128 BN=256 BK=64 G=8 w=8 s=4 by nothing the model sees" in stages.why, stages.why
    assert stages.tie(rows[3]) == stages.tie(rows[4]) == (1, 2) and stages.tie(rows[2]) is None
    out = io.StringIO()
    print_tune(Console(file=out, width=200, color_system=None), stages)
    lines = out.getvalue().splitlines()
    assert sum(1 for line in lines if line.lstrip().startswith("1=")) == 2, out.getvalue()
    assert any(line.lstrip().startswith("3 ") for line in lines)
    assert "the model cannot tell them apart" in out.getvalue()


def test_predictions_stay_under_the_achievable_ceiling_they_cite(stages) -> None:
    """The 4096³ GEMM on an H100 SXM was once predicted at 143 µs, 960 TFLOP/s: 97% of the dense peak, where cuBLAS
    reaches ~80% (iotrace/ceilings.py). The best prediction now divides by that 80% and says so."""
    card = lookup("h100-sxm")
    ceiling_us = 2 * 4096**3 / (0.80 * card.peak_flop_per_s("fp16_tensor")) * 1e6
    assert min(r.entry.predicted_us for r in stages.results if r.rank is not None) >= ceiling_us
    [note] = [n for n in stages.notes if "achievable ceilings" in n]
    assert "80% of the dense tensor-core peak" in note and "cuBLAS bf16 8192³ at 790 TFLOP/s" in note
    assert "stand-in" not in note  # Hopper is measured
    assert stages.to_dict()["best"]["ceilings"]["tensor"] == 0.80
    a100 = lookup("a100")
    from iotrace.ceilings import achievable

    assert achievable(a100).stand_in and "a stand-in" in achievable(a100).words()


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_tiny_kernel_is_predicted_at_the_launch_floor() -> None:
    """A 5,000-element RMSNorm was once predicted at 0.6 µs: no launch finishes under the floor measured on an H200
    (1.17 µs, a CUDA-graph replay of the smallest kernel)."""
    from iotrace.kernels.rmsnorm import RMSNormSpec

    spec = RMSNormSpec()
    shape = spec.check_shape({"rows": 1, "hidden": 5000, "residual": 0})
    call = KernelCall(spec, shape, "bf16", lookup("h100-sxm"))
    result = tune(call, TuneOptions(mode="static", fix=spec.default_config(shape, "bf16", call.card)))
    [prediction] = [r.entry.prediction for r in result.results if r.entry.prediction is not None]
    assert prediction.time_us == 1.17 and prediction.launch_floor
    assert prediction.roofline_us < 0.01  # 20 kB at 3.35 TB/s: the floor, not the bytes, sets the time


def test_a_replay_is_never_called_measured(replay) -> None:
    assert replay.mode == "replay" and replay.synthesised
    assert replay.label == "replayed, synthesised" and replay.times == "synthesised"
    assert "measured time" not in replay.why and "replayed (synthesised, not measured) time" in replay.why
    out = io.StringIO()
    print_tune(Console(file=out, width=200, color_system=None), replay)
    text = out.getvalue()
    assert "best (replayed, synthesised):" in text and "best (measured)" not in text
    assert "meas µs" not in text and "replay µs" in text
    data = replay.to_dict()  # --json: basis says replayed times (not the model, not a measurement) chose the best
    assert data["best"]["basis"] == "replayed" and data["best"]["times"] == "synthesised"


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_replay_wording_from_the_command_line() -> None:
    out = run_cli("tune", "gemm", "--replay", SWEEP, "--budget", "12")
    assert out.returncode == 0, out.stderr
    assert "best (replayed, synthesised)" in out.stdout and "best (measured)" not in out.stdout
    assert "fastest verified measured time" not in out.stdout
    data = json.loads(run_cli("tune", "gemm", "--replay", SWEEP, "--budget", "12", "--json").stdout)
    assert data["best"]["times"] == "synthesised"


def test_a_pipe_keeps_every_column(replay, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    piped = Console(file=out, color_system=None)  # not a terminal, no COLUMNS: rich would draw at 80 columns
    assert not piped.is_terminal and piped.width == 80
    print_tune(piped, replay)
    text = out.getvalue()
    header = next(line for line in text.splitlines() if "config" in line and "pred µs" in line)
    for column in ("regs", "smem KB", "occ % limiter", "pred µs", "replay µs", "TFLOP/s", "% roof", "ok"):
        assert column in header, header
    spills = any(r.entry.spills for r in replay.ranked()[:15])  # the spill column only where a shown config spills
    assert ("spill B" in header) == spills, header
    assert "narrow terminal" not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) > 80  # natural width, not cut to 80


def test_a_narrow_terminal_still_drops_columns(replay) -> None:
    out = io.StringIO()
    print_tune(Console(file=out, width=80, force_terminal=True, color_system=None), replay)
    assert "narrow terminal" in out.getvalue()
