"""The load plan, the streaming client and the per-point figures of ``iotrace bench serve`` (issue 44), against a real
HTTP server: a stdlib ``ThreadingHTTPServer`` on loopback that streams ``/v1/completions`` Server-Sent Events the way
vLLM's and llama.cpp's servers do (chunked, ``data: {...}`` events, a usage chunk, ``data: [DONE]``), with delays
and faults each request asks for in its prompt. Nothing of httpx is mocked.

Timing assertions are lower bounds only (a server that sleeps D seconds cannot answer sooner), never upper bounds:
the machine running the suite is shared. Every figure of a point is recomputed from its saved per-request arrays with
the statistics module, not with the code under test.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from iotrace.engines.serve_client import PointRun, RequestRecord, RequestSpec, run_point, run_point_sync
from iotrace.engines.serve_load import (
    MLPERF_LLAMA31_8B_SLO,
    Slo,
    arrival_gaps,
    default_requests,
    default_warmup,
    parse_burstiness,
    parse_concurrency,
    parse_rates,
    parse_slo,
    random_prompt_ids,
    random_prompts,
)
from iotrace.engines.serve_metrics import PointMetrics
from iotrace.errors import InvalidValueError

# --- the server ----------------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    """A completions server whose every request says, in its prompt, how to answer: ``KIND key=value ...``.

    Kinds: ``ok`` (an empty first chunk at once, a ``: ping`` comment, then after ``first`` s the content chunks
    ``gap`` s apart, ``per`` tokens each, a usage chunk unless ``usage=0``, ``[DONE]``), ``http500``, ``no-done``
    (a clean end without ``[DONE]``), ``cut`` (the connection closed mid-stream), ``slow`` (silent for ``sleep`` s),
    ``short`` (``give`` tokens whatever was asked, finish_reason stop). It counts the requests open at once."""

    daemon_threads = True
    block_on_close = False  # a sleeping handler must not hold up the teardown (it wakes on `stop` anyway)

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.bodies: list[dict[str, Any]] = []
        self.stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streaming, as uvicorn serves vLLM
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _event(self, payload: Any) -> None:
        self._chunk(b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.active += 1
            srv.max_active = max(srv.max_active, srv.active)
            srv.bodies.append(body)
        try:
            self._answer(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with srv.lock:
                srv.active -= 1

    def _answer(self, body: dict[str, Any]) -> None:
        prompt = body["prompt"]
        words = prompt.split() if isinstance(prompt, str) else ["ok"]
        kind, opts = words[0], dict(w.split("=", 1) for w in words[1:] if "=" in w)
        stop = self.server.stop
        if kind == "http500":
            text = b'{"error": "model overloaded:\n KV cache full"}'
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._event({"choices": [{"index": 0, "text": ""}]})  # the empty first chunk, at once
        self._chunk(b": ping\n\n")
        stop.wait(float(opts.get("sleep" if kind == "slow" else "first", 0)))
        produced = int(opts["give"]) if kind == "short" else int(body["max_tokens"])
        per = int(opts.get("per", 1))
        chunks = math.ceil(produced / per)
        for i in range(chunks):
            if i:
                stop.wait(float(opts.get("gap", 0)))
            last = i == chunks - 1
            text = "".join(f"t{j} " for j in range(i * per, min((i + 1) * per, produced)))
            self._event({"choices": [{"index": 0, "text": text,
                                      "finish_reason": ("stop" if kind == "short" else "length") if last else None}]})
        if kind == "cut":
            self.close_connection = True  # no terminating chunk: the body ends mid-stream
            return
        if opts.get("usage", "1") == "1":
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(words)
            self._event({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": produced,
                                                  "total_tokens": prompt_tokens + produced}})
        if kind != "no-done":
            self._event(b"[DONE]")
        self._chunk(b"")


@pytest.fixture
def server():
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.stop.set()
    srv.shutdown()
    srv.server_close()


def spec(prompt: str, max_tokens: int = 4, **kw: Any) -> RequestSpec:
    return RequestSpec(prompt=prompt, max_tokens=max_tokens, model="test-model", **kw)


# --- one request ---------------------------------------------------------------------------------------------------


def test_ttft_is_timed_to_the_first_content_and_itls_follow_the_gaps(server: _Server) -> None:
    first, gap, n = 0.15, 0.04, 6
    point = run_point_sync(server.url, [spec(f"ok first={first} gap={gap}", n)], concurrency=1)
    (record,) = point.records
    assert record.ok and record.error == ""
    # The empty chunk came at once; the TTFT waits for the first token with text.
    assert record.ttft_s is not None and record.ttft_s >= first
    assert len(record.itl_s) == n - 1 and len(record.chunk_times_s) == n
    assert record.e2el_s is not None and record.e2el_s >= first + (n - 1) * gap
    assert statistics.median(record.itl_s) >= 0.5 * gap
    assert record.tpot_s == pytest.approx((record.e2el_s - record.ttft_s) / (n - 1))
    assert record.output_tokens == n and record.usage_reported and record.finish_reason == "length"
    assert record.text == "".join(f"t{j} " for j in range(n))
    # What was sent: vLLM's streaming completions request.
    body = server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["temperature"] == 0.0 and body["max_tokens"] == n
    assert body["model"] == "test-model"


def test_output_tokens_come_from_the_usage_chunk_else_from_the_chunks_counted(server: _Server) -> None:
    point = run_point_sync(server.url, [spec("ok per=2", 6), spec("ok usage=0", 4)], concurrency=1)
    packed, counted = point.ordered()
    assert packed.ok and packed.content_chunks == 3 and packed.output_tokens == 6 and packed.usage_reported
    assert len(packed.itl_s) == 2
    assert counted.ok and counted.output_tokens == 4 and not counted.usage_reported


def test_token_id_prompts_are_sent_as_ids_and_counted(server: _Server) -> None:
    ids = random_prompt_ids(1000, 7, seed=3, special_ids=[0, 1, 2])
    point = run_point_sync(server.url + "/v1", [RequestSpec(prompt=ids, max_tokens=2)], concurrency=1)
    (record,) = point.records
    assert record.ok and record.prompt_tokens == 7
    assert server.bodies[0]["prompt"] == ids and "model" not in server.bodies[0]


def test_every_failure_is_counted_with_its_reason(server: _Server) -> None:
    specs = [spec("ok", 3), spec("http500"), spec("no-done", 3), spec("cut gap=0.01", 5), spec("slow sleep=30"),
             spec("short give=3", 8)]
    point = run_point_sync(server.url, specs, concurrency=3, timeout_s=1.0)
    assert len(point.records) == len(specs) == point.planned
    by_kind = {specs[r.index].prompt.split()[0]: r for r in point.records}
    assert by_kind["ok"].ok and not any(r.ok for k, r in by_kind.items() if k != "ok")
    assert by_kind["http500"].error == 'HTTP 500 Internal Server Error: {"error": "model overloaded: KV cache full"}'
    assert by_kind["no-done"].error == "stream ended without [DONE] after 3 content chunks"
    assert by_kind["cut"].error.startswith("stream ended without [DONE] after 5 content chunks (the server closed")
    assert by_kind["slow"].error == "timeout after 1 s (0 content chunks by then)"
    assert by_kind["short"].error == "3 of 8 tokens although ignore_eos was set (finish_reason stop)"
    assert all("\n" not in r.error for r in point.records)
    metrics = PointMetrics.from_point(point).to_dict()
    assert metrics["completed"] == 1 and metrics["failed"] == 5
    assert metrics["errors"][specs.index(spec("http500"))].startswith("HTTP 500")
    assert metrics["output_lens"] == [3, 0, 0, 0, 0, 0]


def test_an_unreachable_server_is_a_counted_failure() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    point = run_point_sync(f"http://127.0.0.1:{port}", [spec("ok"), spec("ok")], concurrency=2, timeout_s=5)
    assert len(point.records) == 2 and not any(r.ok for r in point.records)
    assert all(r.error.startswith(f"cannot connect to http://127.0.0.1:{port}/v1/completions: ")
               for r in point.records)
    assert PointMetrics.from_point(point).failed == 2


# --- loops ---------------------------------------------------------------------------------------------------------


def test_the_closed_loop_never_exceeds_its_concurrency(server: _Server) -> None:
    seen: list[tuple[int, int]] = []
    specs = [spec("ok first=0.03 gap=0.01", 3) for _ in range(12)]
    point = run_point_sync(server.url, specs, concurrency=3, progress=lambda r, done, total: seen.append((done,
                                                                                                         total)))
    assert len(point.records) == 12 and all(r.ok for r in point.records)
    assert server.max_active <= 3 and point.max_in_flight == 3
    assert seen == [(i, 12) for i in range(1, 13)]
    assert point.mode == "closed" and all(r.queue_s == 0 for r in point.records)


def test_warm_up_requests_run_first_and_are_kept_apart(server: _Server) -> None:
    specs = [spec("ok", 2) for _ in range(6)]
    point = run_point_sync(server.url, specs, concurrency=2, warmup=2)
    assert sorted(r.index for r in point.warmup_records) == [0, 1]
    assert all(r.warmup for r in point.warmup_records) and not any(r.warmup for r in point.records)
    assert sorted(r.index for r in point.records) == [2, 3, 4, 5] and point.planned == 4
    assert min(r.start_s for r in point.records) >= max(r.start_s + r.e2el_s for r in point.warmup_records)
    assert PointMetrics.from_point(point).completed == 4


def test_the_open_loop_at_rate_inf_sends_everything_at_once(server: _Server) -> None:
    specs = [spec("ok first=0.4", 2) for _ in range(6)]
    point = run_point_sync(server.url, specs, rate=math.inf)
    assert all(r.ok for r in point.records) and point.mode == "open"
    assert server.max_active == 6 and point.max_in_flight == 6


def test_the_open_loop_capped_by_a_concurrency_queues_the_rest(server: _Server) -> None:
    specs = [spec("ok first=0.15", 2) for _ in range(4)]
    point = run_point_sync(server.url, specs, rate=math.inf, concurrency=2)
    assert all(r.ok for r in point.records) and server.max_active <= 2 and point.max_in_flight == 2
    queued = sorted(r.queue_s for r in point.records)
    assert queued[-1] >= 0.15  # the last two waited for a slot, at least one server answer long


def test_the_open_loop_at_a_rate_waits_for_each_arrival(server: _Server) -> None:
    specs = [spec("ok", 1) for _ in range(5)]
    point = run_point_sync(server.url, specs, rate=20.0, burstiness=1.0, seed=7)
    assert all(r.ok for r in point.records)
    assert point.duration_s >= sum(arrival_gaps(5, 20.0, 1.0, 7))  # the last request is due at n/rate = 0.25 s


def test_a_cancelled_point_keeps_what_finished(server: _Server) -> None:
    specs = [spec("ok", 2), spec("ok", 2)] + [spec("slow sleep=30", 2) for _ in range(6)]
    point = PointRun(url=server.url, concurrency=2, rate=None)

    async def scenario() -> None:
        task = asyncio.create_task(run_point(server.url, specs, concurrency=2, into=point))
        deadline = time.perf_counter() + 10
        while len([r for r in point.records if r.ok]) < 2 and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the two slow ones are in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert point.cancelled and point.duration_s > 0
    finished = [r for r in point.records if r.ok]
    stopped = [r for r in point.records if not r.ok]
    assert sorted(r.index for r in finished) == [0, 1]
    assert len(stopped) == 2 and all(r.error.startswith("cancelled after ") for r in stopped)
    assert len(point.records) == 4 < len(specs)  # the rest never went out
    assert PointMetrics.from_point(point).completed == 2


CTRL_C = """
import json, sys, threading
from tests.test_serve_client import _Server, spec
from iotrace.engines.serve_client import PointRun, run_point_sync
srv = _Server()
threading.Thread(target=srv.serve_forever, daemon=True).start()
point = PointRun(url=srv.url, concurrency=2, rate=None)
def progress(record, done, total):
    if done == 2:
        print("two done", flush=True)
try:
    run_point_sync(srv.url, [spec("ok", 2)] * 2 + [spec("slow sleep=30", 2)] * 4, concurrency=2, into=point,
                   progress=progress)
except KeyboardInterrupt:
    print(json.dumps({"cancelled": point.cancelled, "records": [[r.index, r.ok, r.error] for r in point.ordered()]}))
    srv.stop.set()
    sys.exit(130)
"""


def test_ctrl_c_stops_the_point_and_keeps_what_finished() -> None:
    """The command line's path: SIGINT to a process inside ``run_point_sync`` (``asyncio.run`` cancels the point)."""
    root = Path(__file__).resolve().parents[1]
    # SIGINT at its default in the child: a shell's background job (nohup, `make test &`) starts with it ignored, and
    # Python then installs no KeyboardInterrupt handler (docs/contributing/index.md).
    with subprocess.Popen([sys.executable, "-c", CTRL_C], cwd=root, stdout=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as child:
        assert child.stdout is not None and child.stdout.readline().strip() == "two done"
        time.sleep(0.2)  # the two slow requests are in flight
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
    assert child.returncode == 130, out
    saved = json.loads(out)
    assert saved["cancelled"] and [r[:2] for r in saved["records"]] == [[0, True], [1, True], [2, False], [3, False]]
    assert all(r[2].startswith("cancelled after ") for r in saved["records"][2:])


# --- the figures, recomputed from the saved arrays -----------------------------------------------------------------


def _pct(values: list[float], p: int) -> float:
    """numpy's linear percentile is the 'inclusive' method (R type 7)."""
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def test_every_figure_recomputed_from_the_per_request_arrays(server: _Server) -> None:
    specs = [spec(f"ok first={0.01 + 0.03 * (i % 4)} gap={0.004 * (i % 3)}", 3 + i % 4) for i in range(16)]
    specs[5] = spec("http500")
    specs[11] = spec("short give=2", 5)
    slo = Slo(ttft=60.0, tpot=30.0)
    point = run_point_sync(server.url, specs, concurrency=4)
    saved = json.loads(json.dumps(PointMetrics.from_point(point, slo).to_dict()))  # what --json writes
    ok = [i for i, e in enumerate(saved["errors"]) if not e]
    assert saved["completed"] == len(ok) == 14 and saved["failed"] == 2 and saved["num_prompts"] == 16
    dur = saved["duration"]
    ttfts = [saved["ttfts"][i] for i in ok]
    e2els = [saved["latencies"][i] for i in ok]
    outs = [saved["output_lens"][i] for i in ok]
    tpots = [(saved["latencies"][i] - saved["ttfts"][i]) / (saved["output_lens"][i] - 1) for i in ok
             if saved["output_lens"][i] > 1]
    itls = [gap for i in ok for gap in saved["itls"][i]]
    assert saved["total_output_tokens"] == sum(outs) == sum(saved["output_lens"])
    assert saved["total_input_tokens"] == sum(saved["input_lens"][i] for i in ok)
    assert saved["request_throughput"] == pytest.approx(len(ok) / dur)
    assert saved["output_throughput"] == pytest.approx(sum(outs) / dur)
    assert saved["total_token_throughput"] == pytest.approx((sum(outs) + saved["total_input_tokens"]) / dur)
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        ms = [v * 1000 for v in values]
        assert saved[f"mean_{name}_ms"] == pytest.approx(statistics.fmean(ms)), name
        assert saved[f"median_{name}_ms"] == pytest.approx(statistics.median(ms)), name
        assert saved[f"std_{name}_ms"] == pytest.approx(statistics.pstdev(ms), abs=1e-9), name
        assert saved[f"p90_{name}_ms"] == pytest.approx(_pct(ms, 90)), name
        assert saved[f"p99_{name}_ms"] == pytest.approx(_pct(ms, 99)), name
    assert saved["output_token_throughput_per_user"] == pytest.approx(statistics.median([1 / t for t in tpots]))
    good = sum(1 for i in ok if saved["ttfts"][i] <= 0.060 and (saved["tpots"][i] or 0) <= 0.030)
    assert saved["good_requests"] == good and saved["request_goodput"] == pytest.approx(good / dur)
    assert good <= sum(1 for i in ok if 0.01 + 0.03 * (i % 4) < 0.060)  # a server that waited longer cannot be good
    assert saved["goodput_slo_ms"] == {"ttft": 60.0, "tpot": 30.0}
    # Peak concurrency from the start times and latencies (a sweep over half-open spans), at most the 4 streams.
    events = sorted([(saved["start_times"][i], 1) for i in ok] +
                    [(saved["start_times"][i] + saved["latencies"][i], -1) for i in ok])
    level, peak = 0, 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert saved["max_concurrent_requests"] == peak <= 4
    assert saved["max_concurrency"] == 4 and saved["request_rate"] == "inf" and saved["burstiness"] == 1.0


def _record(index: int, ttft: float, gaps: list[float], ok: bool = True, prompt: int = 10) -> RequestRecord:
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return RequestRecord(index=index, requested_tokens=len(times), start_s=float(index), ttft_s=ttft,
                         chunk_times_s=times, itl_s=list(gaps), e2el_s=times[-1], output_tokens=len(times),
                         prompt_tokens=prompt, ok=ok, error="" if ok else "HTTP 500 Internal Server Error: x")


def test_goodput_counts_requests_meeting_every_target() -> None:
    records = [_record(0, 0.1, [0.05, 0.05]),  # ttft 100 ms, tpot 50 ms: good
               _record(1, 0.3, [0.05]),  # ttft 300 ms: misses ttft
               _record(2, 0.1, [0.2, 0.01]),  # tpot 105 ms: misses tpot (its worst gap 200 ms)
               _record(3, 0.15, []),  # one token: tpot counts as 0 (vLLM), good
               _record(4, 0.01, [0.01], ok=False)]  # failed: never good
    metrics = PointMetrics.from_requests(records, 2.0, Slo(ttft=200, tpot=100))
    assert metrics.good == 2 and metrics.request_goodput == pytest.approx(1.0)
    assert metrics.completed == 4 and metrics.failed == 1 and metrics.request_throughput == pytest.approx(2.0)
    assert PointMetrics.from_requests(records, 2.0, Slo(itl=100)).good == 3  # record 2's 200 ms gap
    assert PointMetrics.from_requests(records, 2.0, Slo(e2el=250)).good == 2  # records 0 (200 ms) and 3 (150 ms)
    assert PointMetrics.from_requests(records, 2.0).request_goodput is None
    assert PointMetrics.from_requests(records, 2.0, MLPERF_LLAMA31_8B_SLO).good == 4 - 1  # record 2's tpot
    empty = PointMetrics.from_requests([], 1.0).to_dict()
    assert empty["completed"] == 0 and empty["mean_ttft_ms"] is None and empty["p99_itl_ms"] is None


# --- the load plan -------------------------------------------------------------------------------------------------


def test_arrival_gaps_mean_one_over_the_rate_and_burstiness_sets_the_spread() -> None:
    rate, n = 4.0, 20000
    var = {}
    for burstiness in (0.25, 1.0, 4.0):
        gaps = arrival_gaps(n, rate, burstiness, seed=11, normalize=False)
        assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.05)
        var[burstiness] = statistics.pvariance(gaps)
        # gamma(shape k, scale 1/(rate k)): variance 1/(rate^2 k)
        assert var[burstiness] == pytest.approx(1 / (rate**2 * burstiness), rel=0.15)
    assert var[0.25] > var[1.0] > var[4.0]
    assert arrival_gaps(50, rate, 1.0, seed=3) == arrival_gaps(50, rate, 1.0, seed=3)
    assert arrival_gaps(50, rate, 1.0, seed=3) != arrival_gaps(50, rate, 1.0, seed=4)
    assert sum(arrival_gaps(50, rate, 1.0, seed=3)) == pytest.approx(50 / rate)  # vLLM's normalisation
    assert arrival_gaps(4, math.inf, 1.0) == [0.0] * 4
    assert arrival_gaps(3, 2.0, math.inf) == [0.5] * 3


def test_requests_per_point_and_warm_up() -> None:
    assert [default_requests(c) for c in (1, 2, 4, 8)] == [10, 10, 20, 40]
    assert default_requests(rate=4.0) == 20 and default_requests(rate=math.inf) == 10
    assert default_warmup(4) == 4 and default_warmup(None) == 1


def test_random_prompts_avoid_special_ids_and_repeat_per_seed() -> None:
    special = {0, 1, 2, 49151}
    prompts = random_prompts(20, 49152, 64, seed=5, special_ids=special)
    assert all(len(p) == 64 and not special & set(p) and all(0 <= t < 49152 for t in p) for p in prompts)
    assert len({tuple(p) for p in prompts}) == 20
    assert prompts == random_prompts(20, 49152, 64, seed=5, special_ids=special)
    assert prompts != random_prompts(20, 49152, 64, seed=6, special_ids=special)
    assert set(random_prompt_ids(4, 200, seed=1, special_ids=[0, 1, 3])) == {2}


def test_the_flags_parse() -> None:
    assert parse_concurrency("1,2,4,8") == (1, 2, 4, 8) and parse_concurrency(" 3 ") == (3,)
    assert parse_rates("2,inf") == (2.0, math.inf) and parse_rates("0.5") == (0.5,)
    assert parse_slo("ttft=2000,tpot=100") == MLPERF_LLAMA31_8B_SLO
    assert parse_slo("E2EL=5000, itl=250").targets() == {"itl": 250.0, "e2el": 5000.0}
    assert parse_burstiness("0.5") == 0.5 and parse_burstiness("inf") == math.inf


@pytest.mark.parametrize(("parse", "text", "named"), [
    (parse_concurrency, "", "''"), (parse_concurrency, "1,,2", "'1,,2'"), (parse_concurrency, "0", "'0'"),
    (parse_concurrency, "-2", "'-2'"), (parse_concurrency, "two", "'two'"), (parse_concurrency, "1.5", "'1.5'"),
    (parse_concurrency, "1,2,1", "'1'"),
    (parse_rates, "0", "'0'"), (parse_rates, "-1", "'-1'"), (parse_rates, "fast", "'fast'"),
    (parse_rates, "nan", "'nan'"), (parse_rates, "2,inf,inf", "'inf'"), (parse_rates, " ", "' '"),
    (parse_burstiness, "0", "'0'"),
    (parse_slo, "", "''"), (parse_slo, "ttft", "'ttft'"), (parse_slo, "ttfb=200", "'ttfb'"),
    (parse_slo, "ttft=200,ttft=300", "'ttft'"), (parse_slo, "tpot=abc", "'abc'"), (parse_slo, "tpot=0", "'0'"),
    (parse_slo, "e2el=-5", "'-5'"), (parse_slo, "ttft=inf", "'inf'"),
])
def test_a_bad_flag_is_one_message_naming_the_value(parse, text: str, named: str) -> None:
    with pytest.raises(InvalidValueError) as caught:
        parse(text)
    message = str(caught.value)
    assert named in message and " — " in message and "\n" not in message
    assert caught.value.fix and "e.g." in caught.value.fix


def test_a_point_needs_a_concurrency_or_a_rate() -> None:
    with pytest.raises(InvalidValueError, match="needs a concurrency or a request rate"):
        run_point_sync("http://127.0.0.1:9", [spec("ok")])
    with pytest.raises(InvalidValueError, match="warm-up"):
        run_point_sync("http://127.0.0.1:9", [spec("ok")], concurrency=1, warmup=2)
