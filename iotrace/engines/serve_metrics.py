"""The figures of one ``iotrace bench serve`` point (issue 44), under the names ``vllm bench serve`` saves them with
where a figure means the same, so a reader of vLLM's result JSON reads iotrace's.

The names and the arithmetic are those of vllm-project/vllm, ``vllm/benchmarks/serve.py``: ``BenchmarkMetrics``,
``calculate_metrics`` and the ``result`` dict of ``benchmark()`` and ``main_async`` (``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``request_goodput``, ``output_throughput``,
``total_token_throughput``, ``{mean,median,std}_{ttft,tpot,itl,e2el}_ms``, ``p{p}_{metric}_ms``,
``max_concurrent_requests``, ``max_concurrency``, ``request_rate``, ``burstiness``, ``duration``, ``num_prompts``, and
with ``--save-detailed`` the per-request ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``latencies``,
``start_times``, ``queue_times``, ``generated_texts``, ``errors``). As there: only completed requests enter the
latency figures and token totals, a failed request counts in ``failed`` (and as 0 in ``output_lens``), ITL is pooled
over every gap of every request, TPOT is ``(e2el - ttft) / (output_tokens - 1)`` over requests with two or more
tokens, percentiles are ``np.percentile`` (linear) and ``std`` the population deviation (``np.std``).

Two differences, both deliberate: a figure over no requests is None (JSON null), not vLLM's 0 (a 0 ms latency is a
wrong number, not a missing one); and iotrace adds the tokens per second each user sees
(``output_token_throughput_per_user``, see :func:`_per_user`), the y axis of the Pareto chart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iotrace.engines.serve_client import PointRun, RequestRecord
from iotrace.engines.serve_load import Slo

__all__ = ["PERCENTILES", "PointMetrics", "Stats"]

#: The percentiles a point reports: p90 and p99, the tails the surveyed tools report (issue 44) and MLPerf's p99
#: limits are stated at; the median is reported on its own (vLLM's default ``--metric-percentiles`` is 99 alone).
PERCENTILES = (90.0, 99.0)
#: Milliseconds per second: vLLM's figures are in ms (``MILLISECONDS_TO_SECONDS_CONVERSION``).
_MS = 1000.0


def _p_word(p: float) -> str:
    """vLLM's percentile key: ``p99`` for 99.0, ``p99.9`` for 99.9 (``process_one_metric``)."""
    return str(int(p)) if int(p) == p else str(p)


@dataclass(frozen=True)
class Stats:
    """One latency's distribution in milliseconds: None throughout when there was nothing to measure."""

    mean: float | None = None
    median: float | None = None
    std: float | None = None
    percentiles: dict[float, float | None] = field(default_factory=dict)
    count: int = 0

    @classmethod
    def of_seconds(cls, values_s: Sequence[float]) -> Stats:
        if not values_s:
            return cls(percentiles={p: None for p in PERCENTILES})
        ms = np.asarray(values_s, dtype=float) * _MS
        return cls(mean=float(np.mean(ms)), median=float(np.median(ms)), std=float(np.std(ms)),
                   percentiles={p: float(np.percentile(ms, p)) for p in PERCENTILES}, count=len(ms))

    def flat(self, name: str) -> dict[str, float | None]:
        """vLLM's keys: ``mean_ttft_ms``, ``median_ttft_ms``, ``std_ttft_ms``, ``p90_ttft_ms``, ``p99_ttft_ms``."""
        out: dict[str, float | None] = {f"mean_{name}_ms": self.mean, f"median_{name}_ms": self.median,
                                        f"std_{name}_ms": self.std}
        out.update({f"p{_p_word(p)}_{name}_ms": value for p, value in self.percentiles.items()})
        return out


def _per_user(tpots_s: Sequence[float]) -> tuple[float | None, float | None]:
    """(median, mean) over requests of ``1 / TPOT``: the decode speed one user sees once its stream has started.

    Why 1/TPOT and not ``output_tokens / e2el``: the Pareto chart plots this against the batched decode wall, which is
    a decode rate; e2el also holds the TTFT (prefill and queueing), which would fold a prefill cost into a decode
    figure. NVIDIA AIPerf's ``output_token_throughput_per_user`` is the same per-request quantity (the inverse of its
    per-request inter-token latency, which is TPOT); the median keeps one stalled request from moving the point."""
    rates = [1.0 / t for t in tpots_s if t > 0]
    if not rates:
        return None, None
    return float(np.median(rates)), float(np.mean(rates))


def _peak_concurrency(spans: Sequence[tuple[float, float]]) -> int:
    """The most requests open at once over half-open [start, end) spans: vLLM's ``max_concurrent_requests`` sweep
    (a departure sorts before an arrival at the same instant)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    peak = current = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


@dataclass(frozen=True)
class PointMetrics:
    """One point's figures (vLLM's names, see the module docstring) and its per-request arrays."""

    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    duration: float
    request_throughput: float | None
    request_goodput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    output_token_throughput_per_user: float | None
    mean_output_token_throughput_per_user: float | None
    max_concurrent_requests: int
    ttft: Stats
    tpot: Stats
    itl: Stats
    e2el: Stats
    good: int | None = None
    slo: Slo | None = None
    max_concurrency: int | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    records: tuple[RequestRecord, ...] = ()

    @classmethod
    def from_requests(cls, records: Sequence[RequestRecord], duration_s: float, slo: Slo | None = None, *,
                      max_concurrency: int | None = None, request_rate: float | None = None,
                      burstiness: float | None = None) -> PointMetrics:
        """The figures of the measured ``records`` (warm-up ones left out by the caller) over ``duration_s``, the
        point's wall time (vLLM's ``benchmark_duration``); goodput counts the requests meeting every target of
        ``slo`` (vLLM's definition, after DistServe), None without targets as vLLM writes it."""
        ordered = tuple(sorted(records, key=lambda r: r.index))
        done = [r for r in ordered if r.ok]
        ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
        tpots = [t for r in done if (t := r.tpot_s) is not None]
        itls = [gap for r in done for gap in r.itl_s]
        e2els = [r.e2el_s for r in done if r.e2el_s is not None]
        total_in = sum(r.prompt_tokens for r in done)
        total_out = sum(r.output_tokens for r in done)
        rate_of = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: None)
        good = None
        if slo:
            # A one-token answer has no TPOT; vLLM counts it as 0 for goodput (``all_tpots``).
            good = sum(slo.meets(r.ttft_s or 0.0, r.tpot_s or 0.0, r.max_itl_s, r.e2el_s or 0.0) for r in done)
        per_user_median, per_user_mean = _per_user(tpots)
        return cls(
            completed=len(done), failed=len(ordered) - len(done), total_input_tokens=total_in,
            total_output_tokens=total_out, duration=duration_s, request_throughput=rate_of(len(done)),
            request_goodput=rate_of(good) if good is not None else None, output_throughput=rate_of(total_out),
            total_token_throughput=rate_of(total_in + total_out),
            output_token_throughput_per_user=per_user_median, mean_output_token_throughput_per_user=per_user_mean,
            max_concurrent_requests=_peak_concurrency([(r.start_s, r.start_s + (r.e2el_s or 0.0)) for r in done]),
            ttft=Stats.of_seconds(ttfts), tpot=Stats.of_seconds(tpots), itl=Stats.of_seconds(itls),
            e2el=Stats.of_seconds(e2els), good=good, slo=slo if slo else None, max_concurrency=max_concurrency,
            request_rate=request_rate, burstiness=burstiness, records=ordered)

    @classmethod
    def from_point(cls, point: PointRun, slo: Slo | None = None) -> PointMetrics:
        """The figures of a :class:`PointRun`'s measured requests (a cancelled point's: those that finished).

        A closed-loop point is what vLLM runs as ``--request-rate inf --max-concurrency N`` (every request due at
        once, N in flight, the next sent as one ends), so it is written with that rate and vLLM's default
        burstiness: a reader of vLLM's JSON files it beside vLLM's own concurrency sweeps."""
        rate = point.rate if point.rate is not None else math.inf
        return cls.from_requests(point.records, point.duration_s, slo, max_concurrency=point.concurrency,
                                 request_rate=rate, burstiness=point.burstiness)

    def to_dict(self, details: bool = True) -> dict[str, Any]:
        """The point as JSON: vLLM's keys (``request_rate`` ``"inf"`` for all at once, as vLLM writes it), iotrace's
        additions, and with ``details`` the per-request arrays in spec order under vLLM's saved-detail names, plus
        ``tpots`` (seconds, None below two tokens) and ``requested_lens``."""
        rate: float | str | None = self.request_rate
        if rate is not None and math.isinf(rate):
            rate = "inf"
        out: dict[str, Any] = {
            "num_prompts": len(self.records), "request_rate": rate, "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency, "duration": self.duration, "completed": self.completed,
            "failed": self.failed, "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens, "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput, "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_concurrent_requests": self.max_concurrent_requests,
            "output_token_throughput_per_user": self.output_token_throughput_per_user,
            "mean_output_token_throughput_per_user": self.mean_output_token_throughput_per_user,
            "goodput_slo_ms": self.slo.targets() if self.slo else None, "good_requests": self.good,
        }
        for name in ("ttft", "tpot", "itl", "e2el"):
            out.update(getattr(self, name).flat(name))
        if details:
            first = min((r.start_s for r in self.records), default=0.0)
            out.update({
                "input_lens": [r.prompt_tokens for r in self.records],
                "output_lens": [r.output_tokens if r.ok else 0 for r in self.records],
                "requested_lens": [r.requested_tokens for r in self.records],
                "ttfts": [r.ttft_s for r in self.records],
                "itls": [list(r.itl_s) for r in self.records],
                "tpots": [r.tpot_s for r in self.records],
                "latencies": [r.e2el_s for r in self.records],
                "start_times": [r.start_s - first for r in self.records],
                "queue_times": [r.queue_s for r in self.records],
                "generated_texts": [r.text for r in self.records],
                "errors": [r.error for r in self.records],
            })
        return out
