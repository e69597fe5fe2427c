"""``iotrace bench serve`` end to end through a real server process (the ``fake`` engine plugin: tests/fake_engine.py
starting tests/fake_openai_server.py), then the real engines' servers (slow): every figure recomputed from the saved
per-request arrays, every wall by hand, each fault one line with nothing lost and no server process left behind."""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from iotrace.engines.serve_sweep import flag_effects
from iotrace.engines.serve_walls import ServedWeights, batch_of, point_walls

from .conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
FAKE = {"PYTHONPATH": str(ROOT), "IOTRACE_ENGINE_PLUGINS": "tests.fake_engine"}


def _tagged(tag: str) -> list[int]:
    """Processes whose command line carries ``tag`` (the fake server and its child repeat the flags they got)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in cmdline and (b"fake_openai_server" in cmdline or b"time.sleep(600)" in cmdline):
            found.append(int(entry.name))
    return found


def _serve(*args: str, tag: str, server_args: str = "") -> subprocess.CompletedProcess[str]:
    return run_cli("bench", "serve", "--engine", "fake", "--server-args", f"{server_args} --tag {tag}".strip(),
                   *args, env=FAKE)


def _gguf_config() -> dict:
    """The pinned GGUF's shape and stored bytes, read with the gguf package (not iotrace's reader)."""
    import gguf

    from tests.conftest import pinned_model

    reader = gguf.GGUFReader(pinned_model())

    def field(name: str) -> int:
        part = reader.fields[name]
        return int(part.parts[part.data[0]][0])

    heads, kv_heads = field("llama.attention.head_count"), field("llama.attention.head_count_kv")
    return {"layers": field("llama.block_count"), "kv_heads": kv_heads,
            "head_dim": field("llama.embedding_length") // heads,
            "stored": sum(int(t.n_bytes) for t in reader.tensors)}


@pytest.mark.slow  # a real server process and a whole sweep: 5-15 s on two busy cores
def test_a_sweep_of_a_real_server_recomputes_from_its_arrays_and_leaves_no_process(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    page = tmp_path / "pareto.html"
    # 50 ms a token: slower than the CPU's wall for the pinned model's bytes, as a real server's stream is
    done = _serve("--concurrency", "1,3", "--rate", "inf", "--requests", "6", "--output-tokens", "8", "--json",
                  "-o", str(page), tag=tag, server_args="--gap 0.05")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert _tagged(tag) == []  # the server and its child were stopped
    (curve,) = data["curves"]
    assert curve["error"] is None and curve["server"]["model"] == "fake-model"
    assert [p["label"] for p in curve["points"]] == ["c=1", "c=3", "rate=inf/s"]
    shape = _gguf_config()
    bandwidth = data["bandwidth_gbs"] * 1e9
    context = 32 + 8 // 2
    for p in curve["points"]:
        assert (p["completed"], p["failed"], p["output_lens"]) == (6, 0, [8] * 6)
        ok = [i for i, e in enumerate(p["errors"]) if not e]
        assert p["output_throughput"] == pytest.approx(sum(p["output_lens"]) / p["duration"])
        assert p["request_throughput"] == pytest.approx(len(ok) / p["duration"])
        assert p["median_ttft_ms"] == pytest.approx(1e3 * statistics.median(p["ttfts"][i] for i in ok))
        itls = [g for i in ok for g in p["itls"][i]]
        assert len(itls) == 6 * 7 and p["mean_itl_ms"] == pytest.approx(1e3 * statistics.fmean(itls))
        # The wall by hand: identity 1 with identity 3's KV bytes per stream at the mean context (f16 cache).
        batch = p["max_concurrency"] if p["label"].startswith("c=") else sum(p["latencies"]) / p["duration"]
        kv = 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * context * 2
        wall = p["walls"]["decode"]
        assert p["walls"]["batch"] == pytest.approx(batch)
        assert wall["tok_s"] == pytest.approx(batch * bandwidth / (shape["stored"] + batch * kv))
        assert wall["per_user_tok_s"] == pytest.approx(bandwidth / (shape["stored"] + batch * kv))
    html = page.read_text(encoding="utf-8")
    assert "plotly" in html and "fake" in html and "wall: " in html
    # Read back: `bench import` gives one serving row per point, `recipes add` one recipe per point.
    from iotrace.model.imported import load_bench_file
    from iotrace.recipes.store import ImportOptions, recipes_of

    saved = tmp_path / "serve.json"
    saved.write_text(done.stdout, encoding="utf-8")
    rows = load_bench_file(saved)
    flags = f"--gap 0.05 --tag {tag}"
    assert [r.test for r in rows] == [f"serve 6 req, {load}, {flags}, rep 1"
                                      for load in ("1 stream", "3 streams", "all at once")]
    for row, p in zip(rows, curve["points"], strict=True):
        assert (row.phase, row.engine, row.tokens_per_s) == ("serving", "fake", p["output_token_throughput_per_user"])
        assert row.output_tokens_per_s == p["output_throughput"] and row.requests == 6
        assert row.decode_wall_tok_s == p["walls"]["decode"]["per_user_tok_s"]
    recipes = recipes_of(saved, ImportOptions())
    assert [(r.engine, r.placement, r.output_tok_s) for r in recipes] == [
        ("fake", "cpu", p["output_throughput"]) for p in curve["points"]]


@pytest.mark.slow  # a real server process and a whole sweep: 5-15 s on two busy cores
def test_a_server_killed_mid_sweep_keeps_the_finished_points(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    out = tmp_path / "run.json"
    # c=1 runs 1 warm-up and 4 requests: the server dies as it answers the fifth; c=2 never runs.
    done = _serve("--concurrency", "1,2", "--requests", "4", "--output-tokens", "4", "-o", str(out), tag=tag,
                  server_args="--die-after 5")
    assert done.returncode == 2 and _tagged(tag) == []
    data = json.loads(out.read_text())
    first, second = data["curves"][0]["points"]
    assert (first["label"], first["completed"], first["failed"]) == ("c=1", 4, 0)
    assert second["label"] == "c=2" and second["completed"] == 0 and "dying after 5 requests" in second["error"]
    assert "c=2 (rep 1)" in done.stderr and "dying after 5 requests" in done.stderr
    assert "c=1    1    4/0" in done.stdout


@pytest.mark.slow  # a real server process and a whole sweep: 5-15 s on two busy cores
def test_a_server_that_fails_to_start_is_one_line_with_its_last_words() -> None:
    tag = uuid.uuid4().hex
    done = _serve("--concurrency", "1", tag=tag, server_args="--exit-at-start 7")
    assert done.returncode == 2 and _tagged(tag) == []
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert "status 7" in line and "no memory for the KV cache" in line and "log" in line


@pytest.mark.slow  # a real server process and a whole sweep: 5-15 s on two busy cores
def test_a_request_timeout_fails_every_request_with_its_reason() -> None:
    tag = uuid.uuid4().hex
    done = _serve("--concurrency", "1", "--requests", "2", "--warmup", "0", "--timeout", "0.3", "--json", tag=tag,
                  server_args="--first 2")
    assert done.returncode == 2 and _tagged(tag) == []
    point = json.loads(done.stdout)["curves"][0]["points"][0]
    assert (point["completed"], point["failed"]) == (0, 2)
    assert all("timeout after 0.3 s" in e for e in point["errors"]), point["errors"]
    assert "no request completed" in done.stderr


@pytest.mark.slow  # a real server process and a whole sweep: 5-15 s on two busy cores
@pytest.mark.parametrize(("sent", "code", "cause"), [("SIGINT", 130, "Ctrl-C"), ("SIGTERM", 143, "SIGTERM")])
def test_ctrl_c_or_sigterm_writes_what_finished_and_stops_the_server(sent: str, code: int, cause: str) -> None:
    """SIGTERM (a scheduler, `timeout`) unwinds as Ctrl-C does: a server in its own session would outlive a plain
    SIGTERM death, and the finished requests would be lost."""
    tag = uuid.uuid4().hex
    argv = [sys.executable, "-m", "iotrace", "bench", "serve", "--engine", "fake", "--concurrency", "1,2",
            "--requests", "40", "--output-tokens", "8", "--server-args", f"--gap 0.05 --tag {tag}", "--json"]
    # SIGINT at its default in the child: a shell's background job starts with it ignored (docs/contributing).
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, **FAKE}, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                                          signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_tagged(tag)) < 2:
        time.sleep(0.2)
    time.sleep(3)  # some requests of c=1 finish
    proc.send_signal(getattr(signal, sent))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    data = json.loads(out)
    assert data["interrupted"] is True and data["interrupted_by"] == cause and _tagged(tag) == []
    first = data["curves"][0]["points"][0]
    assert first["label"] == "c=1" and first["completed"] >= 1 and first["interrupted"] is True
    assert f"interrupted ({cause})" in err.strip().splitlines()[-1] and "Traceback" not in err


@pytest.mark.parametrize(("args", "said"), [
    (("--engine", "fake", "--slo", "ttft=fast"), "--slo ttft='fast' is not a number"),
    (("--engine", "fake", "--rate", "0"), "--rate"),
    (("--engine", "fake", "--concurrency", "two"), "--concurrency"),
    (("--engine", "iotrace",), "iotrace has no server to start"),
    ((), "needs --engine NAME"),
    (("--engine", "fake", "--input-tokens", "500", "--output-tokens", "100"), "exceed --context 512"),
    (("--engine", "fake", "-o", "x.xlsx"), "cannot write a .xlsx file"),
    (("--url", "http://127.0.0.1:9"), "http://127.0.0.1:9"),
])
def test_usage_errors_are_one_line(args: tuple[str, ...], said: str) -> None:
    done = run_cli("bench", "serve", *args, env=FAKE)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_the_walls_of_a_point_by_hand() -> None:
    weights = ServedWeights("fp32", 5.4e8, 4.0, layers=30, kv_heads=3, head_dim=64, params=1.35e8, basis="test")
    kv = 2 * 30 * 3 * 64 * 100 * 4.0
    closed = {"request_rate": "inf", "max_concurrency": 4, "output_throughput": 30.0,
              "output_token_throughput_per_user": 8.0}
    walls = point_walls(closed, weights, 100, 1e10, "copy", None, 32)
    assert walls["decode"]["tok_s"] == pytest.approx(4 * 1e10 / (5.4e8 + 4 * kv))
    assert walls["decode"]["fraction"] == pytest.approx(30.0 / walls["decode"]["tok_s"])
    assert walls["decode"]["per_user_fraction"] == pytest.approx(8.0 / (1e10 / (5.4e8 + 4 * kv)))
    assert "no peak FLOP/s" in walls["prefill"]["none"]
    # An open loop's batch is Little's law: 3 s of latency over a 2 s run is 1.5 requests in flight.
    assert batch_of({"request_rate": 2.0, "latencies": [1.0, 2.0, 9.0], "errors": ["", "", "timeout"],
                     "duration": 2.0}) == 1.5
    above = point_walls({**closed, "output_throughput": 1e6}, weights, 100, 1e10, "copy", None, 32)
    assert above["decode"]["fraction"] is None and "above the wall" in above["decode"]["no_fraction"]


def test_a_flags_effect_is_welchs_interval_by_hand() -> None:
    def curve(flags: list[str], values: list[float]) -> dict:
        return {"engine": "x", "server_args": flags,
                "points": [{"label": "c=1", "output_throughput": v} for v in values]}

    a, b = [10.0, 11.0, 12.0], [14.0, 15.5, 16.0]
    (effect,) = flag_effects([curve([], a), curve(["--flash"], b)])
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 3
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    assert 3 < df < 4  # t(0.975, 3) = 3.182 (NIST/SEMATECH table)
    assert effect["change_tok_s"] == pytest.approx(statistics.fmean(b) - statistics.fmean(a))
    assert effect["ci95_tok_s"] == pytest.approx(3.182 * math.sqrt(va + vb))
    assert effect["verdict"] == "faster"
    (same,) = flag_effects([curve([], a), curve(["--flash"], [10.5, 11.5, 12.2])])
    assert same["verdict"] == "within noise"
    (one,) = flag_effects([curve([], [10.0]), curve(["--flash"], [12.0])])
    assert one["ci95_tok_s"] is None and one["verdict"] == "one repetition: no interval"


def test_the_notes_bend_is_where_doubling_the_streams_stops_paying() -> None:
    """The concurrent-streams note's conclusion on its committed sweep, by hand: llama.cpp's curve bends at once
    (its server queues the streams), vLLM's has not bent by 8 streams (it batches them)."""
    from iotrace.notes.concurrent_streams import BEND_GAIN, SWEEP, bend

    data = json.loads(SWEEP.read_text(encoding="utf-8"))
    found = {}
    for curve in data["curves"]:
        rates: dict[int, list[float]] = {}
        for p in curve["points"]:
            rates.setdefault(p["max_concurrency"], []).append(p["output_throughput"])
        means = [(c, statistics.fmean(v)) for c, v in sorted(rates.items())]
        by_hand = next((f"c={c}" for (c, r), (_, after) in itertools.pairwise(means)
                        if after < r * (1 + BEND_GAIN)), None)
        assert bend(curve) == by_hand
        found[curve["engine"]] = by_hand
    assert found == {"llama.cpp": "c=1", "vllm": None}
