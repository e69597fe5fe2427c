"""Every registered strategy, replayed on recorded sweeps with no GPU (as Kernel Tuner tests its strategies).

The sweeps in bench/sweeps/ are, for now, SYNTHESISED (real cross-compiled resources, times from the cost model
with noise, the fastest row marked wrong on purpose; each file's provenance says so): they test the machinery and
that the search honours verification, not the cost model's accuracy. Real sweeps recorded on a GPU
(`iotrace tune ... --record`, bench/gpu_validate.sh) drop into the same folder and are picked up here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from iotrace.autotune.replay import curve, replay_once
from iotrace.autotune.strategies import STRATEGIES
from iotrace.autotune.sweep import load_sweep
from iotrace.autotune.tuner import TuneOptions, tune, tune_from_sweep
from iotrace.cards import lookup
from iotrace.errors import DataFileError, InvalidValueError
from iotrace.kernel_call import KernelCall
from iotrace.plugins import kernel
from tests.conftest import run_cli

SWEEPS = sorted((Path(__file__).resolve().parents[1] / "bench" / "sweeps").glob("*.json"))
pytestmark = pytest.mark.skipif(not SWEEPS, reason="no recorded sweeps in bench/sweeps (bench/synth_sweeps.py)")


def _launchable(sweep) -> int:
    return sum(1 for row in sweep.rows if row.measured_us is not None or row.verified is False)


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_the_sweeps_say_how_they_were_made(path: Path) -> None:
    sweep = load_sweep(path)
    how = sweep.provenance["how"]
    assert how.startswith(("SYNTHESISED, not measured", "measured on ")), how
    assert sweep.provenance["command"] and sweep.provenance["triton"]
    wrong = [row for row in sweep.rows if row.verified is False]
    if how.startswith("SYNTHESISED"):
        assert len(wrong) == 1 and wrong[0].measured_us < sweep.best_us, "the planted wrong row is the fastest"


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_every_strategy_reaches_the_known_best_with_the_whole_space(strategy: str, path: Path) -> None:
    sweep = load_sweep(path)
    spec = kernel(sweep.kernel)
    result = tune_from_sweep(spec, TuneOptions(strategy=strategy, budget=_launchable(sweep), replay=sweep,
                                                  use_cache=False, seed=3))
    assert result.mode == "replay" and result.best is not None
    assert result.best.measured_us == sweep.best_us
    assert result.best.verified is not False, "a config the sweep marks wrong was chosen"
    if any(row.verified is False for row in sweep.rows):  # a synthesised sweep plants one; a measured one may have none
        assert "rejected for wrong output" in result.why


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_model_guided_search_on_a_fifth_of_the_budget(path: Path) -> None:
    sweep = load_sweep(path)
    spec = kernel(sweep.kernel)
    budget = math.floor(0.2 * _launchable(sweep))
    (model,) = curve(spec, sweep, "model", [budget], seeds=1)  # deterministic: no draw
    (rand,) = curve(spec, sweep, "random", [budget], seeds=10)
    assert model.evaluations_mean <= budget
    # The goal figure, on synthesised data (the model's own times plus noise), so it checks the search,
    # not the model: >= 95% of the best within 20% of the evaluations.
    assert model.fraction_mean >= 0.95, (model, rand)
    assert model.fraction_mean >= rand.fraction_mean


def test_model_guided_stops_on_its_own_without_a_budget() -> None:
    sweep = load_sweep(SWEEPS[0])
    spent, fraction = replay_once(kernel(sweep.kernel), sweep, "model", None, seed=0)
    assert 3 <= spent < _launchable(sweep) and 0 < fraction <= 1


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_replay_from_the_command_line() -> None:
    sweep = load_sweep(SWEEPS[0])
    out = run_cli("tune", sweep.kernel, "--replay", str(SWEEPS[0]), "--strategy", "random", "--budget", "12",
                  "--seed", "5", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"card", "kernel", "shape", "configs", "best"} and data["shape"] == sweep.shape
    measured = [row for row in data["configs"] if row["measured_us"] is not None]
    assert len(measured) == 12 and data["best"]["basis"] == "replayed" and data["best"]["verified"] is not False
    table = run_cli("tune", sweep.kernel, "--replay", str(SWEEPS[0]), "--budget", "12")
    assert table.returncode == 0 and "replay mode" in table.stdout and "SYNTHESISED" in table.stdout


def test_replay_refuses_a_mismatch(tmp_path: Path) -> None:
    sweep = load_sweep(SWEEPS[0])
    spec = kernel(sweep.kernel)
    with pytest.raises(InvalidValueError, match="differs from the sweep's"):
        tune_from_sweep(spec, TuneOptions(replay=SWEEPS[0]), card=lookup("t4"))
    other = "rmsnorm" if sweep.kernel != "rmsnorm" else "gemm"
    with pytest.raises(InvalidValueError, match=f"is of {sweep.kernel}, not {other}"):
        tune_from_sweep(kernel(other), TuneOptions(replay=SWEEPS[0]))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "iotrace-sweep", "version": 1, "rows": []}))
    with pytest.raises(DataFileError, match=r"malformed|holds no rows"):
        load_sweep(bad)


@pytest.mark.gpu
def test_a_sweep_recorded_on_the_gpu_replays_to_the_same_best(tmp_path: Path) -> None:
    from iotrace.cards import detect

    spec = kernel("gemm")
    shape = spec.check_shape({"M": 1024, "N": 1024, "K": 1024})
    record = tmp_path / "sweep.json"
    fix = {"BLOCK_K": 64, "num_stages": 3, "GROUP_M": 8}
    measured = tune(KernelCall(spec, shape, "fp16", detect()),
                    TuneOptions(strategy="exhaustive", fix=fix, record=record, use_cache=False))
    assert measured.mode == "gpu" and measured.best is not None and measured.best.verified
    sweep = load_sweep(record)
    assert sweep.provenance["how"].startswith("measured on ")
    replayed = tune_from_sweep(spec, TuneOptions(strategy="exhaustive", replay=sweep, use_cache=False))
    assert replayed.best.config == measured.best.config and replayed.best.measured_us == measured.best.measured_us
