"""The load plan of ``iotrace bench serve`` (issue 44): which points a sweep visits (each checked before anything is
sent), when each request arrives, how many requests a point sends, what each request asks for (:class:`RequestSpec`,
the random prompts), and the latency targets goodput counts against.

Every rule here is a public benchmark's, named where it is used, so a point measured here means what the same point
means to a reader of ``vllm bench serve`` (vllm-project/vllm, ``vllm/benchmarks/serve.py``, formerly
``benchmarks/benchmark_serving.py``): the request rate and burstiness draw the same gamma-distributed gaps, ``inf``
sends everything at once, and the goodput targets are the same keys in milliseconds. Nothing here touches the network
(:mod:`iotrace.engines.serve_client` sends) or computes a figure (:mod:`iotrace.engines.serve_metrics`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from iotrace.errors import InvalidValueError

__all__ = ["MLPERF_LLAMA31_8B_SLO", "SLO_KEYS", "RequestSpec", "Slo", "arrival_gaps", "check_point",
           "default_requests", "default_warmup", "parse_burstiness", "parse_concurrency", "parse_rates", "parse_slo",
           "random_prompt_ids", "random_prompts"]

#: The latency targets goodput accepts, in milliseconds: vLLM's ``--goodput`` keys (``ttft``, ``tpot``, ``e2el``;
#: ``check_goodput_args`` in vllm/benchmarks/serve.py) plus ``itl``, which vLLM does not take: here it bounds a
#: request's longest gap between two content chunks (the stall a reader of the stream sees), see :meth:`Slo.meets`.
SLO_KEYS = ("ttft", "tpot", "itl", "e2el")
#: Requests per sweep point: at least this many times the concurrency (issue 44, "--requests N per point (default at
#: least 5x the concurrency)"), so every stream slot turns over several times and the steady state outweighs the
#: ramp-up and drain at the point's two ends.
REQUESTS_PER_SLOT = 5
#: And never fewer than this: a p90 over fewer requests is one of them, not a percentile.
MIN_REQUESTS = 10


@dataclass(frozen=True)
class Slo:
    """Latency targets in milliseconds; None where not set. A request is good when it meets every target set."""

    ttft: float | None = None
    tpot: float | None = None
    itl: float | None = None
    e2el: float | None = None

    def targets(self) -> dict[str, float]:
        """The targets that are set, ``{key: ms}``, in :data:`SLO_KEYS` order (what ``--json`` records)."""
        return {key: value for key in SLO_KEYS if (value := getattr(self, key)) is not None}

    def meets(self, ttft_s: float, tpot_s: float, max_itl_s: float, e2el_s: float) -> bool:
        """Whether one request meets every target set: its TTFT, its TPOT (0 for a one-token answer, as vLLM's
        ``calculate_metrics`` counts it for goodput), its longest ITL (0 without a gap) and its end-to-end latency,
        each at most the target (vLLM: ``s >= r`` for every target, i.e. a request exactly on the line is good)."""
        measured = {"ttft": ttft_s, "tpot": tpot_s, "itl": max_itl_s, "e2el": e2el_s}
        return all(measured[key] <= ms / 1000.0 for key, ms in self.targets().items())

    def __bool__(self) -> bool:
        return bool(self.targets())


#: MLPerf Inference's server-scenario limits for llama3.1-8b (p99 TTFT 2000 ms, p99 TPOT 100 ms; the MLPerf
#: Inference rules, mlcommons/inference, as quoted in issue 44): the documented example of ``--slo``.
MLPERF_LLAMA31_8B_SLO = Slo(ttft=2000.0, tpot=100.0)


def _items(text: str, flag: str, example: str) -> list[str]:
    """The comma-separated items of a flag's text; an empty text or an empty item is an error naming it."""
    items = [item.strip() for item in str(text).split(",")]
    if not str(text).strip() or any(not item for item in items):
        raise InvalidValueError(f"{flag} {text!r} has an empty value",
                                f"write numbers separated by commas, e.g. {flag} {example}")
    return items


def _no_duplicates(values: list, texts: list[str], flag: str, example: str) -> None:
    seen: set = set()
    for value, item in zip(values, texts, strict=True):
        if value in seen:
            raise InvalidValueError(f"{flag} names {item!r} twice",
                                    f"list each point once (--reps repeats a sweep), e.g. {flag} {example}")
        seen.add(value)


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``--concurrency 1,2,4,8``: the closed-loop points, each a whole number of streams of at least 1."""
    flag, example = "--concurrency", "1,2,4,8"
    items = _items(text, flag, example)
    values: list[int] = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise InvalidValueError(f"{flag} value {item!r} is not a whole number of streams",
                                    f"write whole numbers of at least 1, e.g. {flag} {example}") from None
        if value < 1:
            raise InvalidValueError(f"{flag} value {item!r} must be at least 1 (streams in flight at once)",
                                    f"write whole numbers of at least 1, e.g. {flag} {example}")
        values.append(value)
    _no_duplicates(values, items, flag, example)
    return tuple(values)


def _rate(item: str, flag: str, example: str) -> float:
    if item.lower() in ("inf", "infinity"):
        return math.inf
    try:
        value = float(item)
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise InvalidValueError(f"{flag} value {item!r} is not a number",
                                f"write requests per second, or inf for all at once, e.g. {flag} {example}")
    if value <= 0:
        raise InvalidValueError(f"{flag} value {item!r} must be above 0 requests per second",
                                f"write requests per second, or inf for all at once, e.g. {flag} {example}")
    return value


def parse_rates(text: str) -> tuple[float, ...]:
    """``--rate 2,4,inf``: the open-loop points in requests per second; ``inf`` sends every request at once, as
    ``--request-rate inf`` does in vLLM's bench serve (its default)."""
    flag, example = "--rate", "2,4,inf"
    items = _items(text, flag, example)
    values = [_rate(item, flag, example) for item in items]
    _no_duplicates(values, items, flag, example)
    return tuple(values)


def parse_burstiness(text: str) -> float:
    """``--burstiness B``: the gamma shape of the arrival gaps, above 0 (vLLM's ``--burstiness``: 1 is a Poisson
    process, below 1 burstier, above 1 more even, ``inf`` evenly spaced)."""
    flag, example = "--burstiness", "1"
    return _rate(str(text).strip(), flag, example)


def parse_slo(text: str) -> Slo:
    """``--slo ttft=2000,tpot=100``: latency targets in milliseconds, keys from :data:`SLO_KEYS` (MLPerf Inference's
    llama3.1-8b server limits are the example: :data:`MLPERF_LLAMA31_8B_SLO`)."""
    flag, example = "--slo", "ttft=2000,tpot=100"
    found: dict[str, float] = {}
    for item in _items(text, flag, example):
        key, sep, raw = (part.strip() for part in item.partition("="))
        key = key.lower()
        if not sep:
            raise InvalidValueError(f"{flag} item {item!r} is not KEY=MS",
                                    f"write targets in milliseconds as KEY=MS, e.g. {flag} {example}")
        if key not in SLO_KEYS:
            raise InvalidValueError(f"{flag} key {key!r} is not a latency target iotrace measures",
                                    f"use {', '.join(SLO_KEYS)}, e.g. {flag} {example}")
        if key in found:
            raise InvalidValueError(f"{flag} sets {key!r} twice", f"give each target once, e.g. {flag} {example}")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InvalidValueError(f"{flag} {key}={raw!r} is not a number of milliseconds",
                                    f"write a number of milliseconds, e.g. {flag} {example}")
        if value <= 0:
            raise InvalidValueError(f"{flag} {key}={raw!r} must be above 0 ms (no request is that fast)",
                                    f"write a number of milliseconds above 0, e.g. {flag} {example}")
        found[key] = value
    return Slo(**found)


def arrival_gaps(n: int, rate: float, burstiness: float = 1.0, seed: int = 0, *,
                 normalize: bool = True) -> list[float]:
    """The ``n`` gaps in seconds before each request of an open-loop point (the first gap is before the first
    request), drawn as vLLM's ``get_request`` draws them (vllm/benchmarks/serve.py):

    - rate ``inf``: every gap 0, all requests at once;
    - burstiness ``inf``: every gap ``1/rate``, evenly spaced;
    - otherwise gamma with shape ``burstiness`` and scale ``theta = 1/(rate * burstiness)``, so the mean is ``1/rate``
      whatever the burstiness, and the variance ``1/(rate^2 * burstiness)`` (burstiness 1: exponential gaps, a
      Poisson process);
    - ``normalize`` (vLLM does it when there is no ramp-up): all gaps scaled by one factor so the last request
      arrives at ``n/rate``, which takes the 1-2% wander of a sampled total out of the throughput a point reports.

    Deterministic per ``seed`` (``random.Random``, not numpy's global state that vLLM seeds: the same gaps here for
    the same seed on every machine, though not the same draws as vLLM's)."""
    if n < 0:
        raise InvalidValueError(f"{n} requests is fewer than none", "ask for 0 or more requests")
    if not rate > 0:
        raise InvalidValueError(f"request rate {rate!r} must be above 0 per second", "write e.g. --rate 2 or inf")
    if not burstiness > 0:
        raise InvalidValueError(f"burstiness {burstiness!r} must be above 0",
                                "1 is a Poisson process, below 1 burstier, above 1 more even (e.g. --burstiness 1)")
    if math.isinf(rate):
        return [0.0] * n
    if math.isinf(burstiness):
        return [1.0 / rate] * n
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    gaps = [rng.gammavariate(burstiness, theta) for _ in range(n)]
    total = sum(gaps)
    if normalize and total > 0:
        factor = (n / rate) / total
        gaps = [gap * factor for gap in gaps]
    return gaps


def check_point(n_specs: int, concurrency: int | None, rate: float | None, burstiness: float, timeout_s: float,
                warmup: int) -> None:
    """One point's load, checked before anything is sent: each bad value is one message naming it."""
    for bad, problem, fix in (
            (concurrency is None and rate is None, "a point needs a concurrency or a request rate",
             "give --concurrency N (closed loop) or --rate R (open loop)"),
            (concurrency is not None and concurrency < 1, f"concurrency {concurrency} must be at least 1",
             "e.g. --concurrency 1,2,4"),
            (rate is not None and not rate > 0, f"request rate {rate!r} must be above 0 per second",
             "e.g. --rate 2 or inf"),
            (not burstiness > 0, f"burstiness {burstiness!r} must be above 0", "e.g. --burstiness 1 (Poisson)"),
            (not timeout_s > 0, f"timeout {timeout_s!r} s must be above 0", "e.g. a few minutes for a CPU server"),
            (not 0 <= warmup <= n_specs, f"{warmup} warm-up requests out of {n_specs} requests",
             "pass the warm-up specs first, then the measured ones")):
        if bad:
            raise InvalidValueError(problem, fix)


def default_requests(concurrency: int | None = None, rate: float | None = None) -> int:
    """Measured requests per point when ``--requests`` is not given: :data:`REQUESTS_PER_SLOT` per stream slot for a
    closed-loop (or concurrency-capped) point, about that many seconds of arrivals for an open-loop one, never fewer
    than :data:`MIN_REQUESTS`. An uncapped ``inf`` rate has neither, so it gets the minimum."""
    if concurrency is not None:
        return max(REQUESTS_PER_SLOT * concurrency, MIN_REQUESTS)
    if rate is not None and math.isfinite(rate):
        return max(math.ceil(REQUESTS_PER_SLOT * rate), MIN_REQUESTS)
    return MIN_REQUESTS


def default_warmup(concurrency: int | None = None) -> int:
    """Warm-up requests per point, excluded from its figures: one per stream slot, so every slot's first request
    (connection set-up, the server's first batch of that size, its graph or kernel warm-up) is not measured.
    vLLM's ``--num-warmups`` defaults to 0; users of the surveyed tools ask for warm-up excluded (issue 44)."""
    return concurrency if concurrency is not None else 1


def random_prompts(count: int, vocab_size: int, n_tokens: int, seed: int = 0,
                   special_ids: Iterable[int] = ()) -> list[list[int]]:
    """``count`` prompts of ``n_tokens`` token ids each, drawn uniformly from ``range(vocab_size)`` without the
    special ids, as vLLM's random dataset does (``RandomDataset``: ``allowed_tokens = set(range(vocab_size)) -
    all_special_ids``), so no prompt holds a BOS/EOS/chat-template token that would end or reshape it. Sent as token
    ids (the completions API takes ``prompt: list[int]``), so the length is exact and no detokenise-retokenise round
    trip changes it. Deterministic per ``seed``; every prompt differs, so a server's prefix cache cannot answer one
    from another (the warm-up ones included)."""
    special = {int(i) for i in special_ids if 0 <= int(i) < vocab_size}
    if vocab_size < 1:
        raise InvalidValueError(f"vocabulary size {vocab_size} has no tokens", "read it from the model (e.g. 49152)")
    if n_tokens < 1:
        raise InvalidValueError(f"{n_tokens} input tokens is too few", "ask for at least 1, e.g. --input-tokens 128")
    if count < 0:
        raise InvalidValueError(f"{count} prompts is fewer than none", "ask for 0 or more")
    if len(special) >= vocab_size:
        raise InvalidValueError(f"every one of the {vocab_size} token ids is special", "pass only the special ids")
    rng = random.Random(seed)
    prompts: list[list[int]] = []
    for _ in range(count):
        ids: list[int] = []
        # Draw over the whole range and redraw a special id: the specials are a handful among tens of thousands, so
        # this is a redraw in a thousand, and no list of every allowed id is built per prompt.
        while len(ids) < n_tokens:
            token = rng.randrange(vocab_size)
            if token not in special:
                ids.append(token)
        prompts.append(ids)
    return prompts


def random_prompt_ids(vocab_size: int, n_tokens: int, seed: int = 0, special_ids: Iterable[int] = ()) -> list[int]:
    """One random prompt (:func:`random_prompts` with ``count=1``)."""
    return random_prompts(1, vocab_size, n_tokens, seed, special_ids)[0]


@dataclass
class RequestSpec:
    """One request: a prompt (text, or token ids: the completions API takes ``prompt: list[int]``) and the tokens
    asked for. ``ignore_eos`` (vLLM's and llama.cpp's extension) makes the server generate exactly ``max_tokens``, so
    every request of a point costs the same; temperature 0 is greedy, comparable with the offline engines.
    ``prompt_tokens``: the prompt's length when known here (the server's usage chunk wins)."""

    prompt: str | list[int]
    max_tokens: int
    model: str | None = None
    ignore_eos: bool = True
    temperature: float = 0.0
    prompt_tokens: int | None = None
    extra_body: dict[str, Any] | None = None

    def payload(self) -> dict[str, Any]:
        """vLLM's streaming completions body; ``include_usage`` asks for the final usage chunk (the output length)."""
        body: dict[str, Any] = {"prompt": self.prompt, "max_tokens": self.max_tokens, "temperature": self.temperature,
                                "stream": True, "stream_options": {"include_usage": True}}
        if self.model is not None:
            body["model"] = self.model
        if self.ignore_eos:
            body["ignore_eos"] = True
        return {**body, **(self.extra_body or {})}
