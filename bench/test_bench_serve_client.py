"""The ``iotrace bench serve`` client's own ceiling (issue 44, "a client that is never the bottleneck"): how many
requests and streamed content chunks per second it times against a local server that answers at once, against a
bare socket client in the same run (pytest-benchmark, CPU). Run:

    .venv/bin/python -m pytest bench/test_bench_serve_client.py --benchmark-json=out/bench_serve_client.json

- The server: a separate process (its own interpreter, so it does not share this one's GIL), asyncio on loopback,
  answering every ``/v1/completions`` request with one pre-built write: an empty first chunk, ``TOKENS`` content
  chunks, a usage chunk and ``data: [DONE]``, chunked over a kept-alive HTTP/1.1 connection.
- iotrace: ``run_point_sync`` closed loop, ``REQUESTS`` requests at each concurrency, every chunk timed and parsed.
- The baseline, in the ``setup`` of each round (interleaved, so both see the same machine load): a bare asyncio
  client on raw sockets sending the same request bytes over the same number of kept-alive connections and reading
  each answer to its terminating chunk, parsing nothing. It is what the machine, the loopback and the server allow;
  ``ratio_to_bare`` is how much of that the client keeps.

The issue's target: the ceiling is at least 10x the fastest point ``iotrace bench serve`` reports on this machine;
``fastest_point_it_can_time_tok_s`` (the ceiling / 10) is recorded for that comparison, beside the figures, the
versions and the command. Nothing is asserted on timing (a shared machine is too noisy to gate on); what is asserted
is that every request succeeded with every token counted.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import pytest

ROUNDS = int(os.environ.get("IOTRACE_BENCH_ROUNDS", "5"))
REQUESTS = int(os.environ.get("IOTRACE_BENCH_SERVE_REQUESTS", "400"))
TOKENS = 64

SERVER = r"""
import asyncio, json, sys
tokens = int(sys.argv[1])
events = [{"choices": [{"index": 0, "text": ""}]}]
events += [{"choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == tokens - 1 else None}]}
           for i in range(tokens)]
events += [{"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}}]
datas = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
body = b"".join(b"%x\r\n%s\r\n" % (len(d), d) for d in datas) + b"0\r\n\r\n"
answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + body

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if length:
                await reader.readexactly(length)
            writer.write(answer)
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def server_url():
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(TOKENS)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _request_bytes(port: int) -> bytes:
    """The request iotrace's client sends, as raw bytes (the bare client sends the same size)."""
    from iotrace.engines.serve_client import RequestSpec

    body = json.dumps(RequestSpec(prompt=list(range(8)), max_tokens=TOKENS).payload()).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (port, len(body), body))


async def _bare(port: int, requests: int, concurrency: int) -> None:
    request = _request_bytes(port)
    todo = iter(range(requests))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in todo:
            writer.write(request)
            await writer.drain()
            await reader.readuntil(b"\r\n0\r\n\r\n")  # the terminating chunk: nothing in the events ends so
        writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def _versions() -> dict[str, str]:
    import httpx

    import iotrace

    return {"iotrace": iotrace.__version__, "httpx": httpx.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or platform.machine(),
            "cpus": str(os.cpu_count()), "command": " ".join(sys.argv)}


@pytest.mark.parametrize("concurrency", [1, 16])
def test_the_client_ceiling_against_a_server_that_answers_at_once(benchmark, server_url: str,
                                                                  concurrency: int) -> None:
    from iotrace.engines.serve_client import RequestSpec, run_point_sync
    from iotrace.engines.serve_metrics import PointMetrics

    port = int(server_url.rsplit(":", 1)[1])
    specs = [RequestSpec(prompt=list(range(8)), max_tokens=TOKENS) for _ in range(REQUESTS)]
    ours: list[float] = []
    bare: list[float] = []
    points = []

    def measure() -> None:
        start = time.perf_counter()
        points.append(run_point_sync(server_url, specs, concurrency=concurrency, timeout_s=60))
        ours.append(time.perf_counter() - start)

    def baseline() -> None:
        start = time.perf_counter()
        asyncio.run(_bare(port, REQUESTS, concurrency))
        bare.append(time.perf_counter() - start)

    benchmark.pedantic(measure, setup=baseline, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    metrics = PointMetrics.from_point(points[-1])
    assert metrics.completed == REQUESTS and metrics.failed == 0
    assert metrics.total_output_tokens == REQUESTS * TOKENS
    assert all(r.content_chunks == TOKENS for r in points[-1].records)
    ours_s, bare_s = statistics.median(ours), statistics.median(bare)
    chunks_per_s = REQUESTS * TOKENS / ours_s
    benchmark.extra_info.update({
        **_versions(), "concurrency": concurrency, "requests": REQUESTS, "tokens_per_request": TOKENS,
        "requests_per_s": REQUESTS / ours_s, "content_chunks_per_s": chunks_per_s,
        "bare_requests_per_s": REQUESTS / bare_s, "bare_content_chunks_per_s": REQUESTS * TOKENS / bare_s,
        "ratio_to_bare": bare_s / ours_s, "fastest_point_it_can_time_tok_s": chunks_per_s / 10,
        "target": "ceiling >= 10x the fastest point bench serve reports here (issue 44)",
        "ours_s": ours, "bare_s": bare})
