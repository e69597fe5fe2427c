"""The streaming client of ``iotrace bench serve`` (issue 44): OpenAI-compatible ``/v1/completions`` requests with
``stream: true``, every streamed content chunk timed, one sweep point run closed loop (N streams, each sending its
next request when its last one ends) or open loop (arrivals at :func:`~iotrace.engines.serve_load.arrival_gaps`,
optionally capped like vLLM's ``--max-concurrency``).

It times what ``vllm bench serve``'s request function times (vllm-project/vllm,
``vllm/benchmarks/lib/endpoint_request_func.py``, ``async_request_openai_completions``), with the change the
surveyed tools' users asked for (issue 44): the first token is the first chunk whose ``choices[0].text`` is not
empty, and a request ends at its last content chunk. A failed request is kept with a one-line reason, never dropped;
a cancelled point keeps what finished. httpx (not vLLM's aiohttp): maintained, async streaming, connection limits,
per-phase timeouts; what the client can time is measured in bench/test_bench_serve_client.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from iotrace.engines.serve_load import RequestSpec, arrival_gaps, check_point

__all__ = ["DEFAULT_TIMEOUT_S", "PointRun", "RequestRecord", "RequestSpec", "completions_url", "run_point",
           "run_point_sync", "send_request"]

#: Seconds one request may take, sent to last chunk, before it fails as a timeout. Long on purpose: a CPU server
#: decoding 512 tokens under load takes minutes, and a timeout that cuts a slow request short turns a latency into a
#: failure (vLLM's client allows 6 hours, ``AIOHTTP_TIMEOUT``).
DEFAULT_TIMEOUT_S = 600.0
#: How much of an error body a failure's reason quotes: enough for a server's one-line message.
EXCERPT_CHARS = 200
#: Hosts reached without the environment's proxy variables: a proxy must not add its latency to a local server's.
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}

Progress = Callable[["RequestRecord", int, int], None]


def _one_line(text: object, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def completions_url(url: str) -> str:
    """The completions endpoint of a server's base URL (``http://127.0.0.1:8000``, ``…/v1`` or the endpoint itself)."""
    base = url.rstrip("/")
    if base.endswith("/v1/completions"):
        return base
    return base + ("/completions" if base.endswith("/v1") else "/v1/completions")


@dataclass
class RequestRecord:
    """One request as the client saw it, in seconds: ``start_s`` on :func:`time.perf_counter`'s clock (when sent),
    every other time after it. ``ttft_s``: to the first chunk with content (vLLM's ``ttft``, an empty chunk not
    counted); ``chunk_times_s``: each content chunk; ``itl_s``: the gaps between them (vLLM's ``itl``); ``e2el_s``:
    to the last content chunk (vLLM's ``latency``); ``output_tokens``: the usage chunk's ``completion_tokens``, else
    the content chunks counted (a chunk may carry several tokens); ``queue_s``: waiting for a stream slot before
    sending (vLLM's ``client_queue_time``)."""

    index: int
    requested_tokens: int
    warmup: bool = False
    start_s: float = 0.0
    queue_s: float = 0.0
    ttft_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    e2el_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    content_chunks: int = 0
    usage_reported: bool = False
    finish_reason: str | None = None
    text: str = ""
    ok: bool = False
    error: str = ""

    @property
    def tpot_s(self) -> float | None:
        """``(e2el - ttft) / (output_tokens - 1)``, vLLM's ``calculate_metrics``; None below two tokens."""
        if self.ttft_s is None or self.e2el_s is None or self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def max_itl_s(self) -> float:
        return max(self.itl_s, default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tpot_s": self.tpot_s}


class _StreamError(Exception):
    """A stream that cannot be read as the completions API's events; its message is the record's reason."""


async def _read_stream(response: httpx.Response, record: RequestRecord) -> bool:
    """Read the Server-Sent Events of one response into ``record``; True when ``data: [DONE]`` arrived.

    Events as the SSE specification assembles them (``data:`` lines joined until a blank line; ``:`` pings and other
    fields skipped; LF or CRLF line ends, as vLLM, llama.cpp and sse-starlette write). Each event is timed when the
    network read that completed it returned, before any parsing, so the client's own work never shows as an ITL.
    Bytes are split here, not by ``aiter_lines``, whose three more generator layers per read cost the client 40% of
    its requests per second (bench/test_bench_serve_client.py)."""
    done, pending, start = False, b"", record.start_s
    data: list[bytes] = []
    parts: list[str] = []

    def dispatch(payload: bytes, now: float) -> None:
        nonlocal done
        if payload == b"[DONE]":
            done = True
            return
        try:
            event = json.loads(payload)
            if not isinstance(event, dict):
                raise ValueError(payload)
        except ValueError:  # not JSON, not UTF-8, or not an object
            raise _StreamError(f"malformed stream data: {_one_line(payload.decode('utf-8', 'replace'), 80)!r}"
                               ) from None
        choices = event.get("choices") or []
        if not choices and event.get("error"):  # vLLM reports a failure mid-stream as an error event
            error = event["error"]
            raise _StreamError("server error in the stream: "
                               + _one_line(error.get("message", error) if isinstance(error, dict) else error))
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            text = choice.get("text")
            if text is None:  # a chat-shaped chunk: the content is in the delta
                text = (choice.get("delta") or {}).get("content")
            if text:
                record.chunk_times_s.append(now - start)
                parts.append(text)
            if choice.get("finish_reason"):
                record.finish_reason = str(choice["finish_reason"])
        usage = event.get("usage")
        if isinstance(usage, dict):
            if usage.get("completion_tokens") is not None:
                record.output_tokens, record.usage_reported = int(usage["completion_tokens"]), True
            if usage.get("prompt_tokens") is not None:
                record.prompt_tokens = int(usage["prompt_tokens"])

    def lines(block: bytes, now: float) -> None:
        for line in block.split(b"\n"):
            line = line.removesuffix(b"\r")
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif not line and data:  # the blank line that ends an event
                dispatch(b"\n".join(data), now)
                data.clear()

    now = start
    try:
        async for received in response.aiter_bytes():
            now = time.perf_counter()
            pending += received
            if (cut := pending.rfind(b"\n")) >= 0:
                block, pending = pending[:cut], pending[cut + 1:]
                lines(block, now)
        lines(pending + b"\n", now)  # a last line, or a last event, without its line end
    finally:
        record.text = "".join(parts)
    return done


def _finish(record: RequestRecord, spec: RequestSpec, done: bool) -> None:
    """Derive the record's figures from its chunk times and decide whether it succeeded."""
    times = record.chunk_times_s
    record.content_chunks = len(times)
    if times:
        record.ttft_s, record.e2el_s = times[0], times[-1]
        record.itl_s = [b - a for a, b in itertools.pairwise(times)]
    if not record.usage_reported:
        record.output_tokens = len(times)
    if not record.prompt_tokens:
        record.prompt_tokens = spec.prompt_tokens or (len(spec.prompt) if isinstance(spec.prompt, list) else 0)
    if record.error:
        pass
    elif not done:
        record.error = f"stream ended without [DONE] after {len(times)} content chunks"
    elif not times:
        record.error = "no content token before [DONE]"
    elif spec.ignore_eos and record.output_tokens < spec.max_tokens:
        record.error = (f"{record.output_tokens} of {spec.max_tokens} tokens although ignore_eos was set "
                        f"(finish_reason {record.finish_reason})")
    record.ok = not record.error


async def send_request(client: httpx.AsyncClient, url: str, spec: RequestSpec, record: RequestRecord,
                       timeout_s: float = DEFAULT_TIMEOUT_S) -> RequestRecord:
    """Send one streaming request and fill ``record``; every failure becomes ``record.error``, never an exception
    (only a cancellation propagates, with what was read so far in ``record``)."""
    endpoint, done = completions_url(url), False
    record.start_s = time.perf_counter()
    try:
        # The whole request under one deadline: httpx's read timeout only bounds the gap between two reads.
        async with asyncio.timeout(timeout_s), client.stream("POST", endpoint, json=spec.payload()) as response:
            if response.status_code != 200:
                body = _one_line((await response.aread()).decode("utf-8", "replace")) or "(no body)"
                record.error = f"HTTP {response.status_code} {response.reason_phrase}: {body}"
            else:
                done = await _read_stream(response, record)
    except (TimeoutError, httpx.TimeoutException):
        record.error = f"timeout after {timeout_s:g} s ({len(record.chunk_times_s)} content chunks by then)"
    except httpx.ConnectError as exc:
        record.error = f"cannot connect to {endpoint}: {_one_line(exc) or 'connection refused'}"
    except httpx.RemoteProtocolError as exc:
        record.error = (f"stream ended without [DONE] after {len(record.chunk_times_s)} content chunks "
                        f"(the server closed the connection: {_one_line(exc, 80)})")
    except _StreamError as exc:
        record.error = str(exc)
    except (httpx.HTTPError, OSError, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {_one_line(exc)}"
    _finish(record, spec, done)
    return record


@dataclass
class PointRun:
    """One sweep point as it ran, filled in place, so a caller that passed it (``into=``) holds every finished
    request even when the point is cancelled. ``records``: the measured requests as they finished (``index``: the
    spec's position); ``warmup_records``: those left out of the figures; ``duration_s``: vLLM's
    ``benchmark_duration``, from before the first measured request to after the last (or the cancellation);
    ``max_in_flight``: the most requests open at once, which a closed loop's concurrency bounds."""

    url: str
    concurrency: int | None
    rate: float | None
    burstiness: float = 1.0
    seed: int = 0
    warmup: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    planned: int = 0
    records: list[RequestRecord] = field(default_factory=list)
    warmup_records: list[RequestRecord] = field(default_factory=list)
    duration_s: float = 0.0
    max_in_flight: int = 0
    cancelled: bool = False

    @property
    def mode(self) -> str:
        """``closed`` (streams back to back) or ``open`` (arrivals at a rate)."""
        return "closed" if self.rate is None else "open"

    def ordered(self) -> list[RequestRecord]:
        """The measured records in the order of their specs."""
        return sorted(self.records, key=lambda r: r.index)


class _Clients:
    """One :class:`httpx.AsyncClient` of one kept-alive connection per stream, lent to one request at a time, so a
    point holds no more connections than requests in flight. Not one client with an N-connection pool (vLLM's
    aiohttp session): httpcore's pool visits every connection on each request and release, and one shared client
    timed ~40% fewer requests per second at 16 streams than at 1 (bench/test_bench_serve_client.py, this machine).
    Every timeout is the request's own (a first read may wait a whole prefill)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        self._timeout, self._trust_env = httpx.Timeout(timeout_s), (parts.hostname or "") not in _LOOPBACK
        # One TLS context for every client (loading the CA bundle takes ~15 ms each); none for plain http.
        self._verify: ssl.SSLContext | bool = httpx.create_ssl_context() if parts.scheme == "https" else False
        self._idle: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []

    def take(self) -> httpx.AsyncClient:
        if self._idle:
            return self._idle.pop()
        self._all.append(httpx.AsyncClient(limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                                           timeout=self._timeout, trust_env=self._trust_env, verify=self._verify))
        return self._all[-1]

    def give(self, client: httpx.AsyncClient) -> None:
        self._idle.append(client)

    async def aclose(self) -> None:
        for client in self._all:
            await client.aclose()


async def _settle(tasks: list[asyncio.Task], cancelled: bool = False) -> None:
    """Wait for every task; on cancellation (or when already ``cancelled``) cancel them all, wait for each to record
    its request, and re-raise."""
    try:
        if cancelled:
            raise asyncio.CancelledError
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_point(url: str, specs: Sequence[RequestSpec], concurrency: int | None = None,
                    rate: float | None = None, burstiness: float = 1.0, seed: int = 0,
                    timeout_s: float = DEFAULT_TIMEOUT_S, warmup: int = 0, progress: Progress | None = None,
                    into: PointRun | None = None) -> PointRun:
    """Run one sweep point against ``url``. ``rate`` None: closed loop, ``concurrency`` streams each sending its next
    request when its last one ends. ``rate`` given: open loop, requests sent at the arrival gaps of
    ``rate``/``burstiness``/``seed`` (``inf``: all at once), at most ``concurrency`` in flight when given (vLLM's
    ``--max-concurrency``; the wait for a slot is ``queue_s``).

    The first ``warmup`` specs run first at the same concurrency and are kept apart; give them prompts of their own,
    or a prefix cache answers the measured ones early. ``progress(record, done, total)`` follows each request. On
    cancellation the requests in flight are recorded as failed ("cancelled"), ``cancelled`` is set and the
    cancellation propagates: pass ``into`` to keep the point."""
    check_point(len(specs), concurrency, rate, burstiness, timeout_s, warmup)
    point = into if into is not None else PointRun(url=url, concurrency=concurrency, rate=rate)
    point.url, point.concurrency, point.rate, point.burstiness = url, concurrency, rate, burstiness
    point.seed, point.warmup, point.timeout_s, point.planned = seed, warmup, timeout_s, len(specs) - warmup
    slots, in_flight, finished = concurrency or max(len(specs), 1), 0, {True: 0, False: 0}
    clients = _Clients(url, timeout_s)

    async def one(index: int, spec: RequestSpec, warm: bool, arrived: float | None = None) -> None:
        nonlocal in_flight
        record, client = RequestRecord(index=index, requested_tokens=spec.max_tokens, warmup=warm), clients.take()
        in_flight += 1
        point.max_in_flight = max(point.max_in_flight, in_flight)
        try:
            await send_request(client, url, spec, record, timeout_s)
        except asyncio.CancelledError:
            _finish(record, spec, False)
            record.ok, record.error = False, f"cancelled after {time.perf_counter() - record.start_s:.1f} s"
            raise
        finally:
            clients.give(client)
            in_flight -= 1
            record.queue_s = max(record.start_s - arrived, 0.0) if arrived is not None else 0.0
            (point.warmup_records if warm else point.records).append(record)
            finished[warm] += 1
            if progress is not None:
                progress(record, finished[warm], warmup if warm else point.planned)

    async def closed(items: list[tuple[int, RequestSpec]], warm: bool) -> None:
        queue = iter(items)  # shared by the streams: each takes the next spec when its request ends

        async def stream() -> None:
            for index, spec in queue:
                await one(index, spec, warm)

        await _settle([asyncio.create_task(stream()) for _ in range(min(slots, len(items)))])

    async def opened(items: list[tuple[int, RequestSpec]]) -> None:
        gate = asyncio.Semaphore(concurrency) if concurrency is not None else contextlib.nullcontext()
        tasks: list[asyncio.Task] = []

        async def arrive(index: int, spec: RequestSpec) -> None:
            arrived = time.perf_counter()
            async with gate:
                await one(index, spec, False, arrived)

        start, due = time.perf_counter(), 0.0
        try:
            for (index, spec), gap in zip(items, arrival_gaps(len(items), rate or math.inf, burstiness, seed),
                                          strict=True):
                due += gap
                if (wait := start + due - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                tasks.append(asyncio.create_task(arrive(index, spec)))
        except asyncio.CancelledError:
            await _settle(tasks, cancelled=True)
        await _settle(tasks)

    items, started = list(enumerate(specs)), None
    try:
        if warmup:
            await closed(items[:warmup], True)
        started = time.perf_counter()
        await (closed(items[warmup:], False) if rate is None else opened(items[warmup:]))
    except asyncio.CancelledError:
        point.cancelled = True
        raise
    finally:
        if started is not None:
            point.duration_s = time.perf_counter() - started
        await clients.aclose()
    return point


def run_point_sync(url: str, specs: Sequence[RequestSpec], concurrency: int | None = None,
                   rate: float | None = None, burstiness: float = 1.0, seed: int = 0,
                   timeout_s: float = DEFAULT_TIMEOUT_S, warmup: int = 0, progress: Progress | None = None,
                   into: PointRun | None = None) -> PointRun:
    """:func:`run_point` in a fresh event loop. Ctrl-C cancels the point (``asyncio.run`` cancels its task) and
    ``KeyboardInterrupt`` propagates; a caller that passed ``into`` still holds the finished requests."""
    point = into if into is not None else PointRun(url=url, concurrency=concurrency, rate=rate)
    return asyncio.run(run_point(url, specs, concurrency=concurrency, rate=rate, burstiness=burstiness, seed=seed,
                                 timeout_s=timeout_s, warmup=warmup, progress=progress, into=point))
