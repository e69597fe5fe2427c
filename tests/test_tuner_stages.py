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
    assert f"{rows[3].entry.predicted_us:.4g}" == f"{rows[4].entry.predicted_us:.4g}" == "143.2"
    assert "ranked #1" not in stages.why
    assert stages.why.startswith("tied #1 with 1 other at 143.2 µs predicted"), stages.why
    assert "the model cannot tell them apart" in stages.why
    assert stages.tie(rows[3]) == stages.tie(rows[4]) == (1, 2) and stages.tie(rows[2]) is None
    out = io.StringIO()
    print_tune(Console(file=out, width=200, color_system=None), stages)
    lines = out.getvalue().splitlines()
    assert sum(1 for line in lines if line.lstrip().startswith("1=")) == 2, out.getvalue()
    assert any(line.lstrip().startswith("3 ") for line in lines)
    assert "the model cannot tell them apart" in out.getvalue()


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
    for column in ("regs", "smem KB", "spill B", "occ % limiter", "pred µs", "replay µs", "TFLOP/s", "% roof", "ok"):
        assert column in header, header
    assert "narrow terminal" not in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) > 80  # natural width, not cut to 80


def test_a_narrow_terminal_still_drops_columns(replay) -> None:
    out = io.StringIO()
    print_tune(Console(file=out, width=80, force_terminal=True, color_system=None), replay)
    assert "narrow terminal" in out.getvalue()
