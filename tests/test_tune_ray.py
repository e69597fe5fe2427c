"""Tuning on a real local Ray cluster (a head node of two CPUs, started once for the module; Ray's own
``ray.cluster_utils.Cluster`` adds nodes to it): the replay and interpreter backends stand in for GPUs; nothing of
Ray is mocked.

Checked: the same results as the single-process tuner on the same sweep; a worker killed mid-sweep (``ray.kill``)
has its config measured by another, the cache holds one row per config and a rerun measures nothing; a config that
kills its worker twice is recorded as failed; two nodes with one GPU each (logical GPUs, each node naming its card
through $IOTRACE_CARD) give one tune per card type, each filed under its card's fingerprint; no Ray, an address
that does not answer and a GPU sweep on a cluster without GPUs are one line each and exit 2.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from iotrace.autotune.backends import ReplayBackend
from iotrace.autotune.space import config_key
from iotrace.autotune.sweep import load_sweep
from iotrace.autotune.tuner import TuneOptions, tune, tune_from_sweep
from iotrace.cards import lookup
from iotrace.kernel_call import KernelCall
from iotrace.plugins import kernel
from tests.conftest import PLUGINS, run_cli, run_cli_in_process

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'iotrace[ray]'")

from ray.cluster_utils import Cluster  # noqa: E402  (after the skip)

from iotrace.autotune.ray_runner import RayRunner, gpu_workers, stop_workers, tune_each_card  # noqa: E402
from iotrace.autotune.sweep import Sweep, SweepRow  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "bench/sweeps/gemm-h100-sxm-square-4096-BLOCK_K64-synth.json"
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_IMPORT_WARNING": "1"}
#: Measuring workers per tune. Each is a fresh Ray worker process that imports torch and Triton (3-4 s of CPU) before
#: it measures; two are already concurrent, and one of them can be killed while the other measures. Three cost the
#: module five more of those starts, on a machine whose two cores the test workers share.
WORKERS = 2
WORKER_NICENESS = {"RAY_worker_niceness": "0"}


@pytest.fixture(scope="module")
def nodes() -> Cluster:
    """A local cluster of WORKERS CPUs; its workers import the test plugin and this module (the crashing backend)."""
    os.environ.update(QUIET)
    # Ray starts its workers at nice 15 (worker_niceness, src/ray/common/ray_config_def.h) to keep a head node's own
    # services responsive; here the workers are the work under test, and at nice 15 a worker gets 1/28 of the CPU of
    # a process at nice 0 (weights 36 and 1024, sched_prio_to_weight in the Linux kernel's kernel/sched/core.c):
    # beside the other test worker's processes the tests waited on starved workers. The raylet reads it from its env.
    os.environ.update(WORKER_NICENESS)
    path = os.pathsep.join([str(PLUGINS), str(ROOT), os.environ.get("PYTHONPATH", "")])
    head = Cluster(initialize_head=True, head_node_args={"num_cpus": WORKERS, "include_dashboard": False})
    ray.init(address=head.address, log_to_driver=False, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield head
    ray.shutdown()
    head.shutdown()


@pytest.fixture(scope="module")
def cluster(nodes: Cluster) -> str:
    return nodes.address


def _measured(result) -> dict[str, tuple]:
    return {config_key(r.config): (r.measurement.status, r.measured_us, r.verified) for r in result.results
            if r.measurement is not None}


@pytest.mark.parametrize(("strategy", "budget"), [("exhaustive", None), ("model", 12), ("random", 10)])
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_replay_on_the_cluster_is_the_single_process_tune(cluster: str, strategy: str, budget: int | None) -> None:
    options = TuneOptions(replay=SWEEP, strategy=strategy, budget=budget, use_cache=False, seed=5)
    here = tune_from_sweep(kernel("gemm"), options)
    there = tune_from_sweep(kernel("gemm"), options, runner=RayRunner(workers=WORKERS))
    assert there.best.config == here.best.config and there.best.measured_us == here.best.measured_us
    assert _measured(there) == _measured(here)
    assert there.evaluations == here.evaluations == (budget or there.evaluations)
    assert there.why == here.why
    if strategy == "exhaustive":  # the brute force finds the sweep's own best, read from the file
        rows = json.loads(SWEEP.read_text())["rows"]
        assert there.best.measured_us == min(r["measured_us"] for r in rows
                                             if r["measured_us"] is not None and r["verified"] is not False)


class _KillABusyWorker:
    """A progress display that, on the search's first result, kills a worker that is measuring (``ray.kill``)."""

    def __init__(self, runner: RayRunner) -> None:
        self.runner, self.armed, self.killed = runner, False, None

    def start(self, description: str, total: int) -> None:
        self.armed = not description.startswith("compile")

    def advance(self, steps: int = 1) -> None:
        if self.armed and self.killed is None and self.runner.busy:
            actor, config = next(iter(self.runner.busy.items()))
            ray.kill(actor)
            self.killed = config

    def stop(self) -> None:
        self.armed = False


@pytest.mark.slow
def test_a_killed_worker_is_requeued_and_the_cache_stays_consistent(cluster: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    from iotrace_tune_kernel import DoubleSpec  # type: ignore[import-not-found]

    call = KernelCall(DoubleSpec(), {"n": 20_011}, "fp32", lookup("h100"))
    cache = tmp_path / "tune.sqlite3"
    options = TuneOptions(mode="interpreter", verify_top=6, cache=cache, seed=7)
    runner = RayRunner(workers=WORKERS)
    progress = _KillABusyWorker(runner)
    swept = tune(call, options, progress, runner)
    assert progress.killed is not None and runner.workers_lost == 1 and sum(runner.deaths.values()) == 1
    killed = next(r for r in swept.results if r.config == progress.killed)
    assert killed.measurement is not None and killed.measurement.status == "ok"  # measured by another worker
    here = tune(call, replace_cache(options, None))
    assert _measured(swept) == _measured(here) and swept.best.config == here.best.config
    assert [e.resources for e in swept.static.entries] == [e.resources for e in here.static.entries]
    with sqlite3.connect(cache) as db:  # read apart from iotrace: one committed row per config, none twice
        rows = db.execute("SELECT config, status, COUNT(*) FROM results GROUP BY config").fetchall()
    assert all(count == 1 for _, _, count in rows)
    assert {config for config, _, _ in rows} >= set(_measured(swept))
    assert {c: s for c, s, _ in rows if c in _measured(swept)} == {c: v[0] for c, v in _measured(swept).items()}
    again = tune(call, options, None, RayRunner(workers=WORKERS))  # the resumed sweep: all from the cache
    assert again.measured == 0 and again.evaluations == swept.evaluations
    assert again.best.config == swept.best.config


def replace_cache(options: TuneOptions, cache: Path | None) -> TuneOptions:
    from dataclasses import replace

    return replace(options, cache=cache, use_cache=cache is not None)


class CrashingReplay(ReplayBackend):
    """A stand-in GPU whose driver takes the whole process down on one config, as a fatal CUDA fault can."""

    def __init__(self, sweep_path: Path, deadly: str) -> None:
        super().__init__(load_sweep(sweep_path))
        self.deadly = deadly

    def measure(self, config):
        if config_key(config) == self.deadly:
            os._exit(3)
        return super().measure(config)


@pytest.mark.slow
def test_a_config_that_kills_its_worker_twice_is_recorded_failed(cluster: str) -> None:
    options = TuneOptions(replay=SWEEP, strategy="exhaustive", budget=6, use_cache=False, seed=1)
    here = tune_from_sweep(kernel("gemm"), options)
    order = sorted((r for r in here.results if r.measurement is not None), key=lambda r: r.rank)
    deadly = config_key(order[1].config)  # the model's second choice, not the best
    assert deadly != config_key(here.best.config)
    runner = RayRunner(workers=2, backend=functools.partial(CrashingReplay, SWEEP, deadly))
    there = tune_from_sweep(kernel("gemm"), options, runner=runner)
    failed = next(r for r in there.results if config_key(r.config) == deadly)
    assert failed.measurement.status == "failed" and "died 2 times" in failed.measurement.note
    assert list(runner.deaths.values()) == [2] and runner.workers_lost == 0  # Ray restarted the worker each time
    others = {k: v for k, v in _measured(here).items() if k != deadly}
    assert {k: v for k, v in _measured(there).items() if k != deadly} == others
    assert there.best.config == here.best.config


def _one_line_exit_2(done: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("iotrace: error:"), done.stderr
    assert all(word in lines[0] for word in words), lines[0]


GEMM = ("tune", "gemm", "--card", "h100", "--preset", "square-4096", "--fix",
        "BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,num_warps=8,USE_TMA=0")


def test_without_ray_the_error_names_the_extra() -> None:
    """A real interpreter in which ``import ray`` fails (a meta-path finder refuses it), running the real CLI."""
    code = ("import sys\n"
            "class NoRay:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'ray' or name.startswith('ray.'):\n"
            "            raise ImportError('No module named ray')\n"
            "sys.meta_path.insert(0, NoRay())\n"
            "from iotrace.cli import main\n"
            f"sys.exit(main({[*GEMM, '--ray']!r}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **QUIET})
    _one_line_exit_2(done, "Ray", "pip install 'iotrace[ray]'")


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_an_address_that_does_not_answer_is_one_line() -> None:
    """A real process: this one may have joined the module's cluster, and a process that has joined one uses it."""
    with socket.socket() as free:  # a port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    _one_line_exit_2(run_cli(*GEMM, "--ray", f"127.0.0.1:{port}", env=QUIET), f"127.0.0.1:{port}", "does not answer")


@pytest.mark.slow
def test_the_command_line_replays_on_the_cluster(cluster: str) -> None:
    """``--replay ... --ray ADDRESS`` from another process joining the cluster: the single-process best."""
    done = run_cli("tune", "gemm", "--replay", str(SWEEP), "--strategy", "random", "--budget", "9", "--seed", "2",
                   "--json", "--ray", cluster, env=QUIET)
    assert done.returncode == 0, done.stderr
    best = json.loads(done.stdout)["best"]
    here = tune_from_sweep(kernel("gemm"), TuneOptions(replay=SWEEP, strategy="random", budget=9, seed=2,
                                                       use_cache=False))
    assert best["config"] == here.best.config and best["measured_us"] == here.best.measured_us


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_gpu_sweep_on_a_cluster_without_gpus_is_one_line(cluster: str) -> None:
    """In process, on this process's session with the cluster (a process joining it from outside is
    test_the_command_line_replays_on_the_cluster)."""
    done = run_cli_in_process(*GEMM, "--ray", cluster, env=QUIET)
    _one_line_exit_2(done, "has no GPU", f"{WORKERS} CPUs", "--static")


def test_ray_is_not_imported_until_asked_for() -> None:
    code = ("import sys, iotrace, iotrace.cli, iotrace.autotune.tuner; iotrace.cli.build_parser(); "
            "print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "False"


class _Shown:
    """A progress display that keeps what it was told."""

    def __init__(self) -> None:
        self.descriptions: list[str] = []
        self.steps = 0

    def start(self, description: str, total: int) -> None:
        self.descriptions.append(description)

    def advance(self, steps: int = 1) -> None:
        self.steps += steps

    def stop(self) -> None:
        pass


def _sweep(card: str, best_block: int) -> Sweep:
    """A recorded sweep of the test kernel on ``card`` (times written here, fastest at BLOCK=best_block; the wrong
    config is the fastest of all and marked wrong, as a real one would be)."""
    from iotrace_tune_kernel import DoubleSpec  # type: ignore[import-not-found]

    spec = DoubleSpec()
    rows = [SweepRow(c, [], 1.0 if c["OFF_BY_ONE"] else 10.0 + abs(c["BLOCK"] - best_block) / 64 + c["num_warps"],
                     not c["OFF_BY_ONE"]) for c in spec.space({"n": 20_011}, "fp32", lookup(card))]
    return Sweep(spec.name, "triton", "fp32", {"n": 20_011}, {"key": card}, {"how": "synthesised by hand in a test"},
                 rows)


@pytest.mark.slow
def test_each_card_type_gets_its_own_tune_and_cache_rows(nodes: Cluster, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    from iotrace_tune_kernel import DoubleSpec  # type: ignore[import-not-found]

    added = []
    for card in ("h100-sxm", "a100"):  # a node's workers inherit its environment: each names its own card
        monkeypatch.setenv("IOTRACE_CARD", card)
        added.append(nodes.add_node(num_cpus=0, num_gpus=1))
    monkeypatch.delenv("IOTRACE_CARD")
    nodes.wait_for_nodes()
    sweeps = {lookup("h100-sxm").key: _sweep("h100-sxm", 1024), lookup("a100").key: _sweep("a100", 128)}
    groups = gpu_workers()
    try:
        assert sorted(g.card.key for g in groups) == sorted(sweeps) and all(len(g.actors) == 1 for g in groups)
        cache = tmp_path / "tune.sqlite3"
        shown = _Shown()
        results = tune_each_card(groups, lambda card: KernelCall(DoubleSpec(), {"n": 20_011}, "fp32", card),
                                 TuneOptions(strategy="exhaustive", cache=cache, seed=3), shown,
                                 lambda card: functools.partial(ReplayBackend, sweeps[card.key]))
    finally:
        stop_workers([a for g in groups for a in g.actors])
        for node in added:
            nodes.remove_node(node)
    for group, result in zip(groups, results, strict=True):
        rows = sweeps[group.card.key].rows
        fastest = min((r for r in rows if r.verified), key=lambda r: r.measured_us)
        assert result.mode == "gpu" and result.fingerprint == group.fingerprint
        assert result.best.config == fastest.config and result.best.measured_us == fastest.measured_us
        assert result.static.entries[0].resources  # compiled for this card's CC on the cluster's CPUs
    assert results[0].best.config != results[1].best.config
    # The two tunes ran at once on one display: some bar named both cards; every step was counted.
    names = [g.card.name for g in groups]
    assert any(all(f"{name}: " in text for name in names) for text in shown.descriptions), shown.descriptions
    assert shown.steps >= sum(len(sweeps[g.card.key].rows) for g in groups)
    with sqlite3.connect(cache) as db:
        per_card = dict(db.execute("SELECT card, COUNT(*) FROM results GROUP BY card").fetchall())
    assert per_card == {g.fingerprint.text(): len(sweeps[g.card.key].rows) for g in groups}
