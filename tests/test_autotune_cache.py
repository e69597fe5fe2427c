"""The tuning cache under real concurrency and a real kill: SQLite in WAL mode, one transaction per result.

Every process here is a real ``iotrace tune`` (or a real writer loop) in a subprocess; the cache file is then read
back with plain sqlite3, not through iotrace, so the checks do not trust the code they check.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PLUGINS

ENV = {**os.environ, "PYTHONPATH": str(PLUGINS), "IOTRACE_PLUGINS": "iotrace_tune_kernel", "NO_COLOR": "1"}
# Checking each config under the interpreter takes a noticeable fraction of a second at this size, so a kill can
# land half way through the 13 configs (12 right, 1 deliberately wrong).
SLOW, QUICK = 200_003, 20_011
CONFIGS = 13


def _sigint_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT back to its default, as a shell's foreground job has it.

    A non-interactive shell starts a background job (``make test &``, a CI step sent to the background) with SIGINT
    ignored (POSIX, Shell Command Language 2.11 "Signals and Error Handling"), exec keeps an ignored signal ignored,
    and CPython turns SIGINT into KeyboardInterrupt only "if the parent process has not changed it" (Python docs,
    signal module, "General rules"). The tune child then ignored the test's SIGINT and ran to exit 0: the flaky
    failure of the ctrl-c test in some full runs. The test means Ctrl-C at a terminal, so it sets that up.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(cache: Path, n: int = SLOW) -> subprocess.Popen[str]:
    args = ["tune", "tune-double", "--card", "h100", "--shape", f"n={n}", "--verify", str(CONFIGS), "--json"]
    return subprocess.Popen([sys.executable, "-m", "iotrace", *args, "--cache", str(cache)], env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_sigint_as_in_a_terminal)


def _rows(cache: Path) -> list[tuple[str, str, str, int | None]]:
    if not cache.exists():
        return []
    # A plain connection, not ?mode=ro: a read-only one cannot create the WAL index (-shm) of a database in WAL mode,
    # so when it opened first it failed on every poll and the sweep finished unseen (the ctrl-c test then saw exit 0).
    db = sqlite3.connect(cache, timeout=30)
    try:
        return db.execute("SELECT config, status, run_id, verified FROM results").fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return []
    finally:
        db.close()


def _integrity(cache: Path) -> str:
    with sqlite3.connect(cache, timeout=30) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def _finish(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    return json.loads(out)


def _verified(data: dict) -> list[bool | None]:
    return sorted((row["verified"] for row in data["configs"]), key=str)


@pytest.mark.slow
def test_a_kill_mid_sweep_leaves_a_consistent_cache_and_the_rerun_measures_only_the_rest(tmp_path: Path) -> None:
    cache = tmp_path / "tune.sqlite3"
    proc = _start(cache)
    deadline = time.monotonic() + 180
    while len(_rows(cache)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = _rows(cache)
    assert 3 <= len(before) < CONFIGS, f"{len(before)} rows when killed: the kill did not land mid-sweep"
    assert _integrity(cache) == "ok"
    (first_run,) = {run for _, _, run, _ in before}

    data = _finish(_start(cache))
    after = _rows(cache)
    assert len(after) == CONFIGS and _integrity(cache) == "ok"
    runs = {config: run for config, _, run, _ in after}
    kept = [c for c, _, _, _ in before]
    assert all(runs[c] == first_run for c in kept), "rows committed before the kill were measured again"
    assert sum(1 for run in runs.values() if run != first_run) == CONFIGS - len(before)
    assert _verified(data) == sorted([False] + [True] * (CONFIGS - 1), key=str)
    assert data["best"]["verified"] is True and data["best"]["config"]["OFF_BY_ONE"] is False


@pytest.mark.slow
def test_ctrl_c_mid_sweep_is_one_line_exit_130_and_keeps_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "tune.sqlite3"
    proc = _start(cache)
    deadline = time.monotonic() + 180
    while len(_rows(cache)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = len(_rows(cache))
    assert proc.poll() is None, f"the sweep ended (exit {proc.returncode}) with {seen} rows seen, before the interrupt"
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (f"exit {proc.returncode} {time.monotonic() - sent:.2f} s after SIGINT; rows "
                                    f"{seen} when sent, {len(_rows(cache))} at exit of {CONFIGS}; stderr {err!r}; "
                                    f"stdout ends {out[-300:]!r}")
    assert err.strip().splitlines() == [f"iotrace: error: interrupted: every result measured so far is saved in "
                                        f"{cache} — run the same command again to resume where it stopped"]
    assert 2 <= len(_rows(cache)) < CONFIGS and _integrity(cache) == "ok"


def test_a_wider_space_measures_only_the_new_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    from iotrace_tune_kernel import DoubleSpec  # type: ignore[import-not-found]

    from iotrace.autotune.tuner import TuneOptions, tune
    from iotrace.cards import lookup
    from iotrace.kernel_call import KernelCall

    options = TuneOptions(verify_top=CONFIGS, cache=tmp_path / "tune.sqlite3", fix={"BLOCK": 128})
    narrow = tune(KernelCall(DoubleSpec(), {"n": QUICK}, "fp32", lookup("h100")), options)
    wide = tune(KernelCall(DoubleSpec(), {"n": QUICK}, "fp32", lookup("h100")), dataclasses.replace(options, fix={}))
    assert (narrow.evaluations, narrow.measured) == (3, 3)
    assert (wide.evaluations, wide.measured) == (CONFIGS, CONFIGS - 3)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_two_tuners_writing_one_cache_at_once(tmp_path: Path) -> None:
    cache = tmp_path / "tune.sqlite3"
    first, second = _start(cache, QUICK), _start(cache, QUICK)
    results = [_finish(first), _finish(second)]
    rows = _rows(cache)
    assert _integrity(cache) == "ok"
    assert len(rows) == CONFIGS and len({c for c, _, _, _ in rows}) == CONFIGS
    assert sorted(status for _, status, _, _ in rows) == sorted(["wrong"] + ["ok"] * (CONFIGS - 1))
    for data in results:
        assert _verified(data) == sorted([False] + [True] * (CONFIGS - 1), key=str)


WRITER = """
import sys
from pathlib import Path
from iotrace.autotune.backends import Measurement
from iotrace.autotune.cache import CacheKey, TuneCache
key = CacheKey("card", "triton", "hash", "k", "triton", "gpu", "n=1", "fp16")
with TuneCache(Path(sys.argv[1])) as cache:
    for i in range(int(sys.argv[3])):
        cache.put(key, {"writer": sys.argv[2], "i": i}, {"n": 1}, Measurement("ok", float(i), None, None, True, "t"))
"""


def test_two_processes_hammering_the_cache_lose_no_row(tmp_path: Path) -> None:
    cache, count = tmp_path / "tune.sqlite3", 300
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(cache), name, str(count)], env=ENV, text=True,
                              stderr=subprocess.PIPE) for name in ("a", "b")]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    rows = _rows(cache)
    assert _integrity(cache) == "ok" and len(rows) == 2 * count
    assert len({run for _, _, run, _ in rows}) == 2


def test_a_cache_of_another_schema_is_refused(tmp_path: Path) -> None:
    from iotrace.autotune.cache import TuneCache
    from iotrace.errors import DataFileError

    cache = tmp_path / "tune.sqlite3"
    TuneCache(cache).close()
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
    with pytest.raises(DataFileError, match="has schema 0"):
        TuneCache(cache)


def test_a_row_serves_only_the_shape_it_was_measured_at(tmp_path: Path) -> None:
    """Rows are keyed by the shape's bucket, but M=4000's time is not M=4096's, and M=4096's check never saw
    M=4000's ragged edges: another shape of the bucket is a miss, and measuring it replaces the row."""
    from iotrace.autotune.backends import Measurement
    from iotrace.autotune.cache import CacheKey, TuneCache

    key = CacheKey("card", "triton", "hash", "gemm", "triton", "gpu", "M=4096", "fp16")
    config = {"BLOCK_M": 64}
    with TuneCache(tmp_path / "tune.sqlite3") as cache:
        cache.put(key, config, {"M": 4096}, Measurement("ok", 10.0, None, None, True, "t"))
        assert cache.get(key, config, {"M": 4096}).time_us == 10.0
        assert cache.get(key, config, {"M": 4000}) is None
        cache.put(key, config, {"M": 4000}, Measurement("ok", 9.5, None, None, True, "t"))
        assert cache.get(key, config, {"M": 4000}).time_us == 9.5 and cache.get(key, config, {"M": 4096}) is None
