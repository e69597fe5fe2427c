"""``iotrace bench serve``: engines' own servers through a load sweep, every point beside its batched wall (issue 44).

One *curve* per engine and flag set (``--server-args``): its server started from the engine's pinned venv on a free
loopback port (:class:`~iotrace.engines.server.Server`) or one already running (``--url``), then every point of the
sweep (``--concurrency`` closed loops, ``--rate`` open loops) ``--reps`` times, each point's figures under vLLM's
names (:mod:`iotrace.engines.serve_metrics`) with its walls (:mod:`iotrace.engines.serve_walls`). The prompts are
windows of the shipped text (Jane Austen, as the quality figures use), a different window per request so no prefix
cache answers one from another, sent as text (llama.cpp's server takes no token ids); each request's prompt length is
the server's own count.

What goes wrong stays in the result, one line each: a server that does not start (its log's last lines), a server
that dies mid-sweep (the finished points kept, the rest marked failed with its last words), a request that fails
(counted, with its reason). Ctrl-C stops the point running, keeps every finished request and stops the server.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from iotrace import interrupts
from iotrace.engines.launch import EngineSpec
from iotrace.engines.serve_walls import ServedWeights, point_walls, wall_curve
from iotrace.errors import IotraceError

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.engines.serve_load import Slo

__all__ = ["SCHEMA", "ServePoint", "ServeSweep", "flag_effects", "point_label", "run_sweep"]

SCHEMA = "iotrace.bench-serve/1"


@dataclass(frozen=True)
class ServePoint:
    """One load: ``concurrency`` streams back to back (rate None), or arrivals at ``rate`` per second (at most
    ``concurrency`` in flight when given)."""

    concurrency: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        if self.rate is None:
            return f"c={self.concurrency}"
        return f"rate={'inf' if math.isinf(self.rate) else f'{self.rate:g}'}/s"


def point_label(point: dict[str, Any]) -> str:
    """A saved point's label (``c=4``, ``rate=2/s``), as :attr:`ServePoint.label`."""
    rate = point.get("request_rate")
    if rate == "inf" and point.get("max_concurrency"):
        return f"c={point['max_concurrency']}"
    return f"rate={rate if rate == 'inf' else f'{float(rate):g}'}/s"


@dataclass(frozen=True)
class ServeSweep:
    """What ``iotrace bench serve`` was asked for (the CLI's options, checked)."""

    gguf: Path
    points: tuple[ServePoint, ...]
    engines: tuple[EngineSpec, ...] = ()
    url: str | None = None
    #: one curve per flag set, each appended to the engine's own flags (``((),)``: the engine's defaults)
    server_args: tuple[tuple[str, ...], ...] = ((),)
    input_tokens: int = 32
    output_tokens: int = 16
    #: measured requests per point (None: :func:`iotrace.engines.serve_load.default_requests`)
    requests: int | None = None
    #: warm-up requests per point, left out of every figure (None: one per stream slot)
    warmup: int | None = None
    burstiness: float = 1.0
    seed: int = 0
    slo: Slo | None = None
    reps: int = 1
    #: a request's hang guard, and a server's time to get ready
    timeout_s: float = 300.0
    start_timeout_s: float = 900.0
    #: the context the servers are sized for (vLLM's --max-model-len, llama.cpp's --n_ctx)
    context: int = 512
    log_dir: Path | None = None


def _prompts(tokenizer: Any, count: int, tokens: int, seed: int) -> list[str]:
    """``count`` prompts of about ``tokens`` tokens: consecutive windows of the shipped text from an offset the seed
    picks, wrapping at its end."""
    import random

    from iotrace.model.quality import reference_text

    ids = list(tokenizer.encode(reference_text(), add_special_tokens=False))
    start = random.Random(seed).randrange(len(ids))
    out = []
    for i in range(count):
        at = (start + i * tokens) % max(1, len(ids) - tokens)
        out.append(tokenizer.decode(ids[at:at + tokens]))
    return out


#: vLLM's ``--dtype`` and ``--kv-cache-dtype`` values -> bytes per value (vllm/config: "auto" follows the model's).
_VLLM_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0, "fp8": 1.0,
               "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


def _flag(flags: tuple[str, ...], name: str) -> str | None:
    """The last value ``flags`` give ``name`` (``--x v`` or ``--x=v``): the server's parser keeps the last."""
    found = None
    for i, word in enumerate(flags):
        if word == name and i + 1 < len(flags):
            found = flags[i + 1]
        elif word.startswith(name + "="):
            found = word.split("=", 1)[1]
    return found


def _served_weights(engine: str, flags: tuple[str, ...], gguf: Any, stored: int) -> ServedWeights:
    """The bytes a decode step of ``engine``'s server reads: vLLM serves the Hugging Face folder at its ``--dtype``
    (iotrace starts it at float32; a later ``--dtype`` in the flags wins) with its KV cache at that width or
    ``--kv-cache-dtype``; llama.cpp reads the GGUF as stored with an f16 KV cache (unless ``--type_k``/``--type_v``
    change it); any other engine, the GGUF as stored, said so."""
    config = gguf.config
    common = {"layers": config.layers, "kv_heads": config.kv_heads, "head_dim": config.head_dim,
              "params": float(config.params)}
    if engine == "vllm":
        dtype = _flag(flags, "--dtype") or "float32"
        kv = _flag(flags, "--kv-cache-dtype") or "auto"
        width = _VLLM_BYTES.get(dtype)
        kv_width = width if kv == "auto" else _VLLM_BYTES.get(kv)
        if width is not None and kv_width is not None:
            label = "fp32 (dequantised)" if dtype in ("float32", "float") else f"{dtype} (dequantised)"
            return ServedWeights(label, config.params * width, kv_width, **common,
                                 basis=f"vLLM serves the Hugging Face folder at --dtype {dtype}, its KV cache at "
                                       f"{kv if kv != 'auto' else dtype}")
    if engine == "llama.cpp" and not {"--type_k", "--type_v"} & {f.split("=")[0] for f in flags}:
        return ServedWeights(f"{gguf.file_type} as stored", float(stored), 2.0, **common,
                             basis="llama.cpp reads the GGUF as stored; its KV cache is f16 by default")
    return ServedWeights(f"{gguf.file_type} as stored", float(stored), 2.0, **common,
                         basis=f"{engine}'s formats not known here (or changed by its flags): the GGUF's bytes as "
                               "stored and a 16-bit KV cache")


def _server(sweep: ServeSweep, spec: EngineSpec | None, flags: tuple[str, ...], say: Callable[[str], None]) -> Any:
    from iotrace.engines.server import RemoteServer, Server

    if sweep.url is not None:
        return RemoteServer(str(sweep.url))
    return Server(spec, gguf=sweep.gguf, extra_args=flags, context=sweep.context, log_dir=sweep.log_dir,
                  timeout_s=sweep.start_timeout_s, progress=say)


def _failed_point(point: ServePoint, why: str, rep: int) -> dict[str, Any]:
    return {"label": point.label, "rep": rep, "max_concurrency": point.concurrency,
            "request_rate": "inf" if point.rate is None or math.isinf(point.rate) else point.rate,
            "completed": 0, "failed": None, "error": why}


def _run_point(sweep: ServeSweep, url: str, model: str | None, point: ServePoint, prompts: list[str],
               rep: int, say: Callable[[str], None], body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """One point: its figures as JSON, and whether it was interrupted (Ctrl-C: the finished requests kept)."""
    from iotrace.engines.serve_client import PointRun, run_point_sync
    from iotrace.engines.serve_load import RequestSpec, default_requests, default_warmup
    from iotrace.engines.serve_metrics import PointMetrics

    requests = sweep.requests or default_requests(point.concurrency, point.rate)
    warmup = sweep.warmup if sweep.warmup is not None else default_warmup(point.concurrency)
    specs = [RequestSpec(prompt=p, max_tokens=sweep.output_tokens, model=model, extra_body=body or None)
             for p in prompts[: warmup + requests]]
    run = PointRun(url=url, concurrency=point.concurrency, rate=point.rate)
    say(f"{point.label}: {requests} requests after {warmup} warm-up")
    interrupted = False
    try:
        run_point_sync(url, specs, concurrency=point.concurrency, rate=point.rate, burstiness=sweep.burstiness,
                       seed=sweep.seed + rep, timeout_s=sweep.timeout_s, warmup=warmup, into=run)
    except KeyboardInterrupt:
        interrupted = True
    data = PointMetrics.from_point(run, sweep.slo).to_dict()
    data.update(label=point.label, rep=rep, interrupted=interrupted or run.cancelled, max_in_flight=run.max_in_flight)
    return data, interrupted


def _bursts(point: dict[str, Any]) -> int:
    """How many completed requests of ``point`` were paced faster than one stream's wall allows (1 / TPOT above
    B / (weights + b · KV)): no decode step does that, so their tokens were held back and sent in a burst (on two busy
    cores vLLM's API process waits for a core while its engine computes), and their TPOT times the delivery. 0 where
    the point has no wall to judge by."""
    wall = ((point.get("walls") or {}).get("decode") or {}).get("per_user_tok_s")
    if not wall:
        return 0
    return sum(1 for tpot, error in zip(point["tpots"], point["errors"], strict=True)
               if not error and tpot and 1.0 / tpot > wall)


def _curve(sweep: ServeSweep, spec: EngineSpec | None, flags: tuple[str, ...], served: dict[str, Any],
           prompts: list[str], say: Callable[[str], None]) -> tuple[dict[str, Any], bool]:
    """One engine and flag set through every point and repetition; (its JSON, whether Ctrl-C stopped it)."""
    name = spec.name if spec is not None else "url"  # a --url server's engine is named by --engine or guessed
    label = name + (f" {' '.join(flags)}" if flags else "")
    curve: dict[str, Any] = {"engine": name, "label": label, "server_args": list(flags), "server": None,
                             "error": None, "points": [], "weights": None}
    interrupted = False
    try:
        # the server's own lines name the engine already; a flag set is added after them
        with _server(sweep, spec, flags, lambda line: say(f"{line} [{' '.join(flags)}]" if flags else line)) as server:
            info = server.info()
            curve["server"] = {**info.to_dict(), "ready_s": server.ready_s,
                               "log": str(server.log_path) if server.log_path else None}
            engine = curve["engine"] if spec is not None else str(info.engine or "unknown engine")
            if sweep.url is not None:
                curve["engine"], curve["label"] = engine, f"{engine} at {sweep.url}"
            weights = served["weights"](engine, flags)
            body = _request_body(engine, served["eos_id"])
            curve["request_body"] = body
            curve["weights"] = weights.to_dict()
            if served["bandwidth"] is not None:  # the Pareto chart's wall for what this server reads
                most = max(p.concurrency or 1 for p in sweep.points)
                curve["wall_curve"] = wall_curve(weights, served["context"], served["bandwidth"],
                                                 list(range(1, most + 1)))
            for rep in range(sweep.reps):
                for point in sweep.points:
                    died = server.failure()
                    if died or interrupted:
                        why = died or f"not run: interrupted ({interrupts.cause()})"
                        curve["points"].append(_failed_point(point, why, rep))
                        continue
                    data, interrupted = _run_point(sweep, server.url, info.model, point, prompts,
                                                   rep, lambda line: say(f"{label}: {line}"), body)
                    data["walls"] = point_walls(data, weights, served["context"], served["bandwidth"],
                                                served["source"], served["card"], _mean(data.get("input_lens")))
                    data["burst_requests"] = _bursts(data)
                    died = server.failure()
                    if died and data["failed"]:
                        data["error"] = died
                    curve["points"].append(data)
    except IotraceError as exc:
        curve["error"] = str(exc)
    except KeyboardInterrupt:
        interrupted = True
    return curve, interrupted


#: A logit bias that no logit survives: JSON has no -inf, and a float32 logit near -1e9 never wins a softmax or argmax.
_NEVER = -1e9


def _request_body(engine: str, eos_id: int | None) -> dict[str, Any]:
    """What every request to ``engine``'s server carries for greedy decoding to the length asked
    (``EngineDef.request_body``; the EOS token biased away where its server has no ``ignore_eos``); nothing for an
    engine the registry does not know (a --url server it cannot name)."""
    from iotrace.engines.registry import engine as lookup

    try:
        found = lookup(engine)
    except IotraceError:
        return {}
    body = dict(found.request_body)
    if found.eos_by_logit_bias and eos_id is not None:
        body["logit_bias"] = {str(eos_id): _NEVER}
    return body


def _mean(values: list[Any] | None) -> float | None:
    kept = [v for v in values or [] if v]
    return statistics.fmean(kept) if kept else None


def run_sweep(sweep: ServeSweep, card: Card | None, say: Callable[[str], None] = lambda _: None,
              into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every curve of ``sweep`` (``iotrace.bench-serve/1``), filled into ``into`` as it goes (a caller interrupted
    by Ctrl-C still holds the finished points; ``interrupted`` is then true)."""
    from iotrace.engines.serve_load import default_requests, default_warmup
    from iotrace.model.copy_bandwidth import copy_bandwidth_bytes_per_s
    from iotrace.model.gguf_file import open_gguf
    from iotrace.model.measure import bench_manifest
    from iotrace.model.tokenizer import gguf_tokenizer

    gguf = open_gguf(sweep.gguf)
    stored = sum(int(info.n_bytes) for info in gguf.reader.tensors)
    most = max((sweep.requests or default_requests(p.concurrency, p.rate))
               + (sweep.warmup if sweep.warmup is not None else default_warmup(p.concurrency)) for p in sweep.points)
    prompts = _prompts(gguf_tokenizer(sweep.gguf), most, sweep.input_tokens, sweep.seed)
    # a server on this machine's loopback reads this machine's memory: its wall is the copy loop's, as a started one's
    local = sweep.url is None or urlsplit(sweep.url).hostname in ("127.0.0.1", "localhost", "::1")
    on_gpu = local and __import__("torch").cuda.is_available()
    bandwidth, source = None, None
    if card is not None and card.memory_bandwidth_gbs and (on_gpu or not local):
        bandwidth, source = card.bandwidth_bytes_per_s, f"CardBook {card.key}"
    elif local and not on_gpu:
        say("measuring the memory bandwidth with a copy loop")
        bandwidth, source = copy_bandwidth_bytes_per_s("cpu"), "measured copy (this run, CPU)"
        card = None  # a CPU server is never a fraction of a card's wall
    context = sweep.input_tokens + sweep.output_tokens // 2  # the KV read at the decode steps' mean context
    eos = gguf.reader.fields.get("tokenizer.ggml.eos_token_id")
    served = {"weights": lambda engine, flags: _served_weights(engine, flags, gguf, stored), "context": context,
             "eos_id": int(eos.parts[eos.data[0]][0]) if eos is not None else None,
             "bandwidth": bandwidth, "source": source, "card": card}
    data = into if into is not None else {}
    data.update({"schema": SCHEMA,
                 "model": {"name": gguf.config.name, "gguf": str(sweep.gguf), "file_type": gguf.file_type,
                           "params": gguf.config.params, "stored_bytes": stored},
                 "work": {"points": [p.label for p in sweep.points], "input_tokens": sweep.input_tokens,
                          "output_tokens": sweep.output_tokens, "requests": sweep.requests, "warmup": sweep.warmup,
                          "burstiness": sweep.burstiness, "seed": sweep.seed, "reps": sweep.reps,
                          "slo_ms": sweep.slo.targets() if sweep.slo else None, "temperature": 0.0,
                          "ignore_eos": True, "prompts": "windows of the shipped text (iotrace/data/eval_text.toml)"},
                 "machine": "CPU" if local and not on_gpu else (card.key if card else "unknown"),
                 "bandwidth_gbs": None if bandwidth is None else bandwidth / 1e9, "bandwidth_source": source,
                 "card": None if card is None else {"key": card.key, "name": card.name},
                 "curves": [], "interrupted": False, "manifest": bench_manifest(sweep, card)})
    specs: list[EngineSpec | None] = list(sweep.engines) or [None]  # with --url: the engine serving there, if named
    for spec in specs:
        for flags in sweep.server_args:
            curve, interrupted = _curve(sweep, spec, flags, served, prompts, say)
            data["curves"].append(curve)
            if interrupted:
                data["interrupted"] = True
                data["interrupted_by"] = interrupts.cause()
                return data
    data["flag_effects"] = flag_effects(data["curves"])
    return data


#: Two-sided 95% Student t quantiles t(0.975, df) for df = 1..30 (NIST/SEMATECH e-Handbook of Statistical Methods,
#: §1.3.6.7.2, "Critical values of the Student's t distribution"); beyond 30 the normal 1.96 is within 2%.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _welch(a: list[float], b: list[float]) -> tuple[float, float | None]:
    """The difference of means b − a and its 95% half-width (Welch's unequal-variance interval); None below two
    repetitions on either side."""
    diff = statistics.fmean(b) - statistics.fmean(a)
    if len(a) < 2 or len(b) < 2:
        return diff, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, 0.0
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = _T975[min(len(_T975), max(1, math.floor(df))) - 1] if df <= len(_T975) else 1.96
    return diff, t * math.sqrt(va + vb)


def flag_effects(curves: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each flag set's effect on ``output_throughput`` at each point against the same engine's first curve: the
    difference of the repetitions' means, its 95% interval, and "within noise" where the interval holds zero."""
    out = []
    first: dict[str, dict[str, Any]] = {}
    for curve in curves:
        base = first.setdefault(curve["engine"], curve)
        if base is curve:
            continue
        for label in dict.fromkeys(p["label"] for p in curve["points"]):
            a = [p["output_throughput"] for p in base["points"] if p["label"] == label and p.get("output_throughput")]
            b = [p["output_throughput"] for p in curve["points"] if p["label"] == label and p.get("output_throughput")]
            if not a or not b:
                continue
            diff, half = _welch(a, b)
            out.append({"engine": curve["engine"], "flags": curve["server_args"], "against": base["server_args"],
                        "point": label, "reps": [len(a), len(b)], "change_tok_s": diff,
                        "change_pct": 100 * diff / statistics.fmean(a), "ci95_tok_s": half,
                        "verdict": "one repetition: no interval" if half is None else
                        "within noise" if abs(diff) <= half else "faster" if diff > 0 else "slower"})
    return out
