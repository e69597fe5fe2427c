"""The autotuner's static phase, verification, errors, JSON and export, with real cross-compiles on the CPU.

Spaces are kept to a few configs: every compile is real (Triton's ptxas, in worker processes) and shares the
session's compile cache (tests/conftest.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from iotrace.autotune.export import ENV_TUNED, export_best, tuned_config
from iotrace.autotune.space import EmptySpaceError, kernel_space, neighbours
from iotrace.autotune.static import static_phase
from iotrace.autotune.tuner import TuneOptions, UnsupportedDtypeError, tune
from iotrace.cards import lookup
from iotrace.cli import main as cli_main
from iotrace.errors import InvalidValueError, IotraceError
from iotrace.kernel_call import KernelCall
from iotrace.kernels.gemm import GemmSpec
from iotrace.occupancy import occupancy
from iotrace.runner import resolve_config
from tests.conftest import PLUGINS, run_cli

GEMM = GemmSpec()
SHAPE = GEMM.check_shape(GEMM.presets["square-4096"])
PLUGIN_ENV = {"PYTHONPATH": str(PLUGINS), "IOTRACE_PLUGINS": "iotrace_tune_kernel"}
JSON_KEYS = {"card", "kernel", "shape", "configs", "best"}
CONFIG_KEYS = {"config", "registers", "shared_mem_bytes", "spills", "occupancy_pct", "limiters", "pruned",
               "predicted_us", "measured_us", "verified"}


def _gemm(bm: int, bn: int, bk: int, warps: int, stages: int) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps, "num_stages": stages,
            "USE_TMA": False}


# Operand tiles of (BM·BK + BK·BN)·2 B per buffer; Triton keeps num_stages buffers on sm_90 but num_stages - 1 on
# sm_80 (its cp.async pipeline), which is why the compiled figure, not a formula, decides. 8-16 KB fits every card;
# 144 KB (sm_80) or 192 KB (sm_90) fits both; 192 KB (sm_80) or 240 KB (sm_90) is over sm_80's 163 KB and sm_90's
# 227 KB. Few and shared configs: each big tile takes seconds to compile on a 2-core machine.
STRADDLE = [_gemm(64, 64, 32, 4, 2), _gemm(128, 256, 64, 8, 4), _gemm(128, 256, 64, 8, 5)]


@pytest.mark.slow
@pytest.mark.parametrize("card_name", ["a100", "h100"])
def test_static_pruning_drops_exactly_the_configs_over_the_cards_limits(card_name: str) -> None:
    card = lookup(card_name)
    configs = [GEMM.check_config(c, SHAPE, "fp16", card) for c in STRADDLE]
    phase = static_phase(KernelCall(GEMM, SHAPE, "fp16", card), configs)
    limits = card.sm_limits
    over = []
    for i, entry in enumerate(phase.entries):
        res = entry.main
        assert res is not None and res.target == f"sm_{card.cc.replace('.', '')}", entry.pruned
        # Independently: the occupancy calculator on the compiled resources, and the card's per-block limits.
        occ = occupancy(limits, res.threads_per_block, res.registers, res.static_smem, res.dynamic_smem,
                        barriers=res.barriers)
        exceeds = (res.shared_mem_bytes > limits.smem_per_block_optin
                   or res.registers * res.threads_per_block > limits.regs_per_block)
        assert exceeds == (not occ.launchable), (i, res)
        if exceeds:
            over.append(i)
        assert (entry.pruned is not None) == exceeds, (i, entry.pruned, res)
        assert entry.prediction is None if exceeds else entry.prediction.time_us >= entry.prediction.roofline_us
    assert over == [2]
    assert "shared memory per block exceed" in phase.entries[2].pruned
    stages = STRADDLE[1]["num_stages"]
    buffers = stages if card.cc == "9.0" else stages - 1
    assert phase.entries[1].main.shared_mem_bytes == buffers * (128 * 64 + 64 * 256) * 2


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_compile_cache_hit_on_a_second_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOTRACE_CACHE_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(PLUGINS))
    from iotrace_tune_kernel import DoubleSpec  # type: ignore[import-not-found]

    spec, card = DoubleSpec(), lookup("rtx3090")
    configs = spec.space({"n": 4099}, "fp32", card)[:4]
    cold = static_phase(KernelCall(spec, {"n": 4099}, "fp32", card), configs, jobs=2)
    start = time.perf_counter()
    warm = static_phase(KernelCall(spec, {"n": 4099}, "fp32", card), configs, jobs=2)
    warm_s = time.perf_counter() - start
    assert cold.compiled_units == 4 and cold.workers_started >= 1
    assert (warm.compiled_units, warm.cached_units, warm.workers_started) == (0, 4, 0)
    assert [e.main for e in warm.entries] == [e.main for e in cold.entries]
    assert warm_s * 8 <= cold.seconds, f"warm {warm_s:.3f} s against cold {cold.seconds:.3f} s"


@pytest.mark.slow
def test_a_budget_bounds_measurements_not_the_interpreter_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """--budget 1 on a CPU: no GPU measurement to bound, so the interpreter still checks its top three (no
    BudgetSpent escaping as a traceback) and the note says the budget was not used."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    from iotrace_tune_kernel import DoubleSpec  # type: ignore[import-not-found]

    result = tune(KernelCall(DoubleSpec(), {"n": 20_011}, "fp32", lookup("h100")),
                  TuneOptions(budget=1, use_cache=False))
    assert result.mode == "interpreter" and sum(1 for r in result.results if r.verified is not None) >= 3
    assert any("--budget and --time steer measurements" in note for note in result.notes)


def test_a_wrong_config_is_rejected_by_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))  # compile workers import the plugin's module by name from sys.path
    from iotrace_tune_kernel import WRONG, DoubleSpec  # type: ignore[import-not-found]

    result = tune(KernelCall(DoubleSpec(), {"n": 20_011}, "fp32", lookup("h100")),
                  TuneOptions(verify_top=13, use_cache=False, seed=7))
    assert result.mode == "interpreter"
    by_key = {json.dumps(r.config, sort_keys=True): r for r in result.results}
    wrong = by_key[json.dumps(WRONG, sort_keys=True)]
    assert wrong.verified is False and wrong.measurement.status == "wrong"
    assert "wrong result" in wrong.measurement.note and "seed 7" in wrong.measurement.note
    assert all(r.verified for r in result.results if r.config != WRONG)
    assert result.best is not None and result.best.config != WRONG and result.best.verified
    assert "1 config(s) rejected for wrong output" in result.why
    assert all(r.measured_us is None for r in result.results), "interpreter timings are never reported"


@pytest.mark.slow
def test_tune_cli_json_has_exactly_the_issue_keys(tmp_path: Path) -> None:
    out = run_cli("tune", "tune-double", "--card", "h100", "--shape", "n=20011", "--verify", "2", "--json",
                  "--cache", str(tmp_path / "c.sqlite"), "-o", str(tmp_path / "chart.html"), env=PLUGIN_ENV)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == JSON_KEYS and data["card"] == "h100-sxm" and data["kernel"] == "tune-double"
    assert data["shape"] == {"n": 20011} and len(data["configs"]) == 13
    for row in data["configs"]:
        assert set(row) == CONFIG_KEYS
        assert row["measured_us"] is None and row["pruned"] is None and row["registers"] > 0
    assert sum(1 for r in data["configs"] if r["verified"] is not None) >= 2
    assert data["best"]["basis"] == "predicted" and data["best"]["verified"] is True
    assert "plotly" in (tmp_path / "chart.html").read_text()[:100_000].lower()


@pytest.mark.slow
def test_static_tune_of_a_gemm_slice_ranks_and_prunes() -> None:
    out = run_cli("tune", "gemm", "--card", "a100", "--preset", "square-4096", "--fix",
                  "BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,num_warps=8", "--static", "--json", "--no-cache")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["configs"]
    assert [r["config"]["num_stages"] for r in rows][-1] == 5 and len(rows) == 4  # stages 2..5, pruned last
    assert rows[-1]["pruned"].startswith("_gemm_kernel: 197632 bytes of shared memory per block exceed")
    kept = [r["predicted_us"] for r in rows if not r["pruned"]]
    assert len(kept) == 3 and kept == sorted(kept, key=lambda t: float(f"{t:.3g}"))
    assert all(r["verified"] is None for r in rows), "--static launches nothing"
    assert json.loads(out.stdout)["best"]["config"] == rows[0]["config"]


@pytest.mark.parametrize(("args", "message"), [
    (["gemm", "--card", "h100", "--fix", "BLOCK_M=48"], "--fix BLOCK_M=48 leaves no gemm config"),
    (["gemm", "--card", "h100", "--budget", "0"], "a budget of 0 evaluations tunes nothing"),
    (["gemm", "--card", "h100", "--strategy", "annealing"], "unknown strategy 'annealing'"),
    (["gemm", "--card", "t4", "--dtype", "bf16"], "Tesla T4 (CC 7.5) has no bf16_tensor peak"),
    (["gemm", "--card", "h100", "--replay", "/nonexistent/sweep.json"], "no sweep file /nonexistent/sweep.json"),
    (["gemm", "--card", "mi300x"], "has no CUDA compute capability"),
    (["gemm", "--card", "h100", "--strategy", "exhaustive", "--record", "x.json"],
     "only GPU measurements are recorded"),
    (["gemm", "--card", "h100", "--record", "x.json"], "--record x.json needs every config measured"),
    (["gemm", "--card", "h100", "--fix", "BLOCK_Q=1"], "gemm has no tuning parameter BLOCK_Q"),
    # .png is a figure now (tests/test_output_files.py); .md is what tune cannot write, refused before compiling.
    (["gemm", "--card", "h100", "-o", "x.md"], "cannot write a .md file"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    # The CLI's own entry point in-process (the subprocess path is exercised by the JSON tests above).
    assert cli_main(["tune", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and " — " in lines[0], lines


def test_bad_input_raises_iotrace_errors_from_the_api() -> None:
    card = lookup("h100")
    with pytest.raises(InvalidValueError, match="unknown strategy"):
        tune(KernelCall(GEMM, SHAPE, "fp16", card), TuneOptions(strategy="annealing"))
    with pytest.raises(InvalidValueError, match="budget of 0"):
        tune(KernelCall(GEMM, SHAPE, "fp16", card), TuneOptions(budget=0))
    with pytest.raises(InvalidValueError, match="time budget of 0 s"):
        tune(KernelCall(GEMM, SHAPE, "fp16", card), TuneOptions(time_s=0))
    with pytest.raises(UnsupportedDtypeError, match="bf16"):
        tune(KernelCall(GEMM, SHAPE, "bf16", lookup("v100-sxm2-32gb")), TuneOptions())

    class Empty(GemmSpec):
        def space(self, shape, dtype, card, backend="triton"):
            return []

    with pytest.raises(EmptySpaceError, match="offers no config"):
        tune(KernelCall(Empty(), SHAPE, "fp16", card), TuneOptions(mode="static"))
    assert issubclass(EmptySpaceError, IotraceError)


def test_neighbours_move_one_parameter_one_step() -> None:
    configs = kernel_space(GEMM, SHAPE, "fp16", lookup("a100"), fix={"BLOCK_K": 64, "num_stages": 3})
    here = configs.index(_gemm(64, 64, 64, 4, 3))
    moved = [{k: v for k, v in configs[i].items() if configs[here][k] != v} for i in neighbours(configs, here)]
    assert sorted(moved, key=str) == sorted([{"BLOCK_M": 32}, {"BLOCK_M": 128}, {"BLOCK_N": 32}, {"BLOCK_N": 128},
                                             {"num_warps": 8}], key=str)


def test_exported_best_config_is_loaded_at_run_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = lookup("a100")
    fix = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}  # STRADDLE[0]: compiled
    result = tune(KernelCall(GEMM, SHAPE, "fp16", card), TuneOptions(mode="static", fix=fix))
    best = tmp_path / "best.json"
    entry = export_best(result, best)
    assert entry["basis"] == "predicted" and entry["shape_bucket"] == SHAPE
    export_best(result, best)  # the same key again replaces, not duplicates
    assert len(json.loads(best.read_text())["entries"]) == 1
    assert resolve_config(KernelCall(GEMM, SHAPE, "fp16", card)) == GEMM.default_config(SHAPE, "fp16", card)
    monkeypatch.setenv(ENV_TUNED, str(best))
    # A shape in the same bucket (every size rounded up to a power of two) gets the tuned config.
    near = {**SHAPE, "M": 4000}
    assert resolve_config(KernelCall(GEMM, near, "fp16", card)) == result.best.config
    assert tuned_config(GEMM, near, "fp16", lookup("h100"), "triton") is None  # another card: the default
    assert tuned_config(GEMM, {**SHAPE, "M": 8192}, "fp16", card, "triton") is None  # another bucket


@pytest.mark.gpu
def test_on_a_gpu_the_wrong_config_is_never_timed_and_a_warm_retune_is_8x_faster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from iotrace.cards import detect

    monkeypatch.syspath_prepend(str(PLUGINS))
    from iotrace_tune_kernel import WRONG, DoubleSpec  # type: ignore[import-not-found]

    options = TuneOptions(strategy="exhaustive", cache=tmp_path / "tune.sqlite3")
    start = time.perf_counter()
    cold = tune(KernelCall(DoubleSpec(), {"n": 1 << 22}, "fp32", detect()), options)
    cold_s = time.perf_counter() - start
    assert cold.mode == "gpu" and cold.measured == 13
    for row in cold.results:
        if row.config == WRONG:
            assert row.verified is False and row.measured_us is None
        else:
            assert row.verified is True and row.measured_us > 0
    assert cold.best is not None and cold.best.config != WRONG
    start = time.perf_counter()
    warm = tune(KernelCall(DoubleSpec(), {"n": 1 << 22}, "fp32", detect()), options)
    warm_s = time.perf_counter() - start
    assert warm.measured == 0 and warm.best.config == cold.best.config
    assert warm_s * 8 <= cold_s, f"warm {warm_s:.2f} s against cold {cold_s:.2f} s"


def test_cost_model_terms_by_hand() -> None:
    from iotrace.autotune.cost_model import DRAM_LATENCY_S, operand_traffic, predict, tile_efficiency
    from iotrace.compiler import Resources

    ragged = GEMM.check_shape({"M": 97, "N": 83, "K": 71, "bias": 1})
    tile = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}
    assert tile_efficiency(GEMM, ragged, tile) == pytest.approx((97 / 128) * (83 / 96) * (71 / 96))
    card = lookup("h100")  # 132 SMs
    cost = GEMM.cost(SHAPE, "fp16")

    def resources(blocks: int, smem: int = 0) -> list[Resources]:
        return [Resources("sm_90", "k", 128, 0, smem, 0, 0, 0, 1, 256, (blocks, 1, 1), "by hand")]

    def run(blocks: int, smem: int = 0, tile_eff: float = 1.0):
        res = resources(blocks, smem)
        occ = occupancy(card.sm_limits, 256, 128, 0, smem)
        return predict(cost, card, res, occ, tile_eff, (128, 128), 2)

    full, tail = run(132), run(133)
    assert full.sm_balance == 1.0 and tail.sm_balance == pytest.approx((133 / 132) / 2)
    assert tail.compute_us == pytest.approx(full.compute_us * 2 * 132 / 133)  # the busiest SM runs two blocks
    assert run(1320, tile_eff=0.5).compute_us == pytest.approx(2 * run(1320).compute_us)
    # Little's law: 8 blocks of 256 threads x 128 registers x 4 B in flight against the achievable bandwidth x
    # latency (87% of the datasheet's on Hopper: iotrace/ceilings.py).
    reachable = card.bandwidth_bytes_per_s * 0.87
    assert run(8).latency_hiding == pytest.approx(8 * 256 * 128 * 4 / (reachable * DRAM_LATENCY_S))
    # Operand reuse: a 128 x 128 tile over 8 warps reads sqrt(128·128/8)/2 FLOP per shared-memory byte.
    assert full.operand_intensity == pytest.approx((128 * 128 / 8) ** 0.5 / 2)
    for prediction in (full, tail, run(8)):
        assert prediction.time_us >= prediction.roofline_us
        assert (prediction.compute_ceiling, prediction.memory_ceiling) == (0.80, 0.87)
    # Compute divides by the achievable 80% of the dense fp16 tensor peak: at best 2·4096³ FLOPs take 1/0.8 of the
    # datasheet time; the roofline floor stays the datasheet's.
    assert full.compute_us >= 2 * 4096**3 / (0.80 * card.peak_flop_per_s("fp16_tensor")) * 1e6 * (1 - 1e-9)
    assert full.roofline_us == pytest.approx(2 * 4096**3 / card.peak_flop_per_s("fp16_tensor") * 1e6)
    # L2 operand traffic of a GEMM: 32 x 32 tiles of 128 x 128, each streaming (128 + 128) x 4096 fp16 operands.
    config = {**tile, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}
    assert operand_traffic(GEMM, SHAPE, config, 2) == 32 * 32 * (128 + 128) * 4096 * 2
    assert operand_traffic(GEMM, ragged, tile, 2) == 2 * 3 * (64 + 32) * 96 * 2  # padded K: ceil(71 / 32) x 32
