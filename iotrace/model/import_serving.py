"""Serving engines' bench results as rows with the walls beside them: vLLM's and SGLang's.

Read, sniffed from the content:

* vLLM's ``vllm bench latency --output-json`` (``avg_latency``, ``latencies``, ``percentiles`` keyed "10" … "99",
  ``std_latency`` on newer versions): ``batch_size`` requests of ``input_len`` prompt tokens, each generating
  ``output_len`` tokens, timed end to end. The file does not record those three, so the caller passes them.
* vLLM's ``vllm bench throughput --output-json`` (``elapsed_time``, ``num_requests``, ``total_num_tokens``,
  ``requests_per_second``, ``tokens_per_second``; ``tokens_per_second`` counts prompt and output tokens).
* vLLM's ``vllm bench serve --save-result`` (``vllm/benchmarks/serve.py``; ``benchmarks/benchmark_serving.py`` in
  older releases): one object (JSON lines with ``--append-result``) with ``backend``, ``model_id``,
  ``request_rate`` (the string ``"inf"`` for an infinite rate), ``max_concurrency`` (null when unset),
  ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``output_throughput`` and
  ``{mean,median,std,p99}_{ttft,tpot,itl}_ms`` (``process_one_metric``; ``…_e2el_ms`` when asked for), plus
  per-request lists.
* SGLang's ``python -m sglang.bench_one_batch --result-filename`` (one JSON line per batch size and length:
  ``batch_size``, ``input_len``, ``output_len``, ``prefill_latency``, ``prefill_throughput``,
  ``median_decode_latency``, ``median_decode_throughput`` = batch / median step time, ``overall_throughput``): a
  static batch, so a prefill row and a decode row with the walls of that batch.
* SGLang's ``python -m sglang.bench_serving --output-file`` (``python/sglang/bench_serving.py``, its ``result``
  dict appended as ``json.dumps(result)``): one JSON line per run, with ``backend``, ``dataset_name``,
  ``request_rate`` (the bare token ``Infinity`` when every request is sent at once), ``max_concurrency``,
  ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``output_throughput``, ``median_ttft_ms``,
  ``median_itl_ms``, ``{mean,median}_e2e_latency_ms`` and, in newer versions, the ``*_tpot_ms`` and ``p99_*`` keys
  too.

A serving row's rate is one stream's: 1 / the median TPOT (time per output token after the first; vLLM), or 1 / the
median inter-token latency where the file has no TPOT (older SGLang). Its wall is the decode wall of one stream,
which holds at any batch size: each step reads every weight at least once and gives a stream one token. The
aggregate output tokens per second is kept beside it. None of these files names its card, tensor parallelism, or the
weights' width, so the caller states them (``card``, ``gpus``, ``model``, ``dtype``).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from iotrace.errors import InvalidValueError
from iotrace.model.import_rows import (
    DTYPE_PEAKS,
    WEIGHT_BYTES,
    ImportedRun,
    Setting,
    field_number,
    field_text,
    walls_of,
)

__all__ = ["is_one_batch_result", "is_serving_result", "one_batch_runs", "serving_run", "vllm_latency",
           "vllm_throughput"]

# --- vLLM -----------------------------------------------------------------------------------------------------------


def _percentile(obj: dict[str, Any], which: int, where: str) -> float | None:
    table = obj.get("percentiles")
    if not isinstance(table, dict):
        return None
    for key in (str(which), f"{which}.0", which):
        if key in table:
            return float(field_number(table, key, f"{where} percentiles"))
    return None


def _kv_width(dtype: str) -> float:
    """Bytes per cached value: vLLM's and SGLang's default KV cache dtype ("auto") follows the activations, so fp32
    for fp32 weights and 16 bits for the rest (bf16 activations for fp8 and int8 weights)."""
    return 4.0 if dtype == "fp32" else 2.0


def _vllm_common(setting: Setting, file_model: str = "") -> dict[str, Any]:
    shape = setting.shape
    if shape is not None:
        weight_bytes, weight_note = shape.params * WEIGHT_BYTES[setting.dtype], ""
        name = file_model or setting.model_arg or shape.name  # the caller's spelling: an alias names the release
    else:
        weight_bytes = None
        weight_note = f"weight bytes unknown: {setting.shape_note}"
        name = setting.model_arg or file_model or "unknown"
    return {"shape": shape, "weight_bytes": weight_bytes, "weight_note": weight_note, "name": name,
            "params": shape.params if shape is not None else None}


def vllm_latency(obj: dict[str, Any], setting: Setting) -> ImportedRun:
    source = f"{setting.path}:1"
    missing = [flag for flag, value in (("--batch", setting.batch), ("--input-len", setting.input_len),
                                        ("--output-len", setting.output_len)) if value is None]
    if missing:
        raise InvalidValueError(
            f"{setting.path}: a vllm bench latency JSON does not record its batch size, input and output lengths",
            f"pass {', '.join(missing)} as given to `vllm bench latency` (its defaults: --batch-size 8, --input-len "
            "32, --output-len 128)")
    batch, input_len, output_len = int(setting.batch), int(setting.input_len), int(setting.output_len)
    avg = float(field_number(obj, "avg_latency", source))
    if avg <= 0:
        raise InvalidValueError(f"{source}: avg_latency is {avg}, not a positive time",
                                "restore the file as vLLM wrote it")
    latencies = obj.get("latencies")
    if not isinstance(latencies, list):
        raise InvalidValueError(f"{source}: latencies is not a list", "restore the file as vLLM wrote it")
    per_iteration = []
    for i, latency in enumerate(latencies):
        seconds = float(field_number({"latency": latency}, "latency", f"{source} latencies[{i}]"))
        if seconds <= 0:
            raise InvalidValueError(f"{source}: latencies[{i}] is {seconds}, not a positive time",
                                    "restore the file as vLLM wrote it")
        per_iteration.append(batch * output_len / seconds)
    stddev = statistics.stdev(per_iteration) if len(per_iteration) > 1 else None
    tokens_per_s = batch * output_len / avg
    common = _vllm_common(setting)
    card = setting.card
    kv = _kv_width(setting.dtype)
    card_note = "" if card is not None else "the vLLM JSON names no card: pass --card"
    walls = walls_of("end-to-end", tokens_per_s, card, card_note,
                   weight_bytes=common["weight_bytes"], weight_note=common["weight_note"], params=common["params"],
                   batch=batch, depth=input_len, shape=common["shape"], shape_note=setting.shape_note,
                   kv_bytes_per_value=kv, kv_note="",
                   peaks=(), notes=["end to end: includes the prefill, so the share of the decode wall is a floor"],
                   gpus=setting.gpus)
    return ImportedRun(
        engine="vllm", engine_version=None, source=source, model=common["name"],
        card_name=card.name if card is not None else None, card_key=card.key if card is not None else None,
        test=f"latency in{input_len} out{output_len}", phase="end-to-end", batch=batch, prompt_tokens=input_len,
        gen_tokens=output_len, depth=input_len, tokens_per_s=tokens_per_s, tokens_per_s_stddev=stddev,
        latency_avg_s=avg, latency_p50_s=_percentile(obj, 50, source), latency_p90_s=_percentile(obj, 90, source),
        latency_p99_s=_percentile(obj, 99, source), requests=batch, weight_bytes=common["weight_bytes"],
        params=common["params"], kv_bytes_per_value=kv, raw=dict(obj), gpus=setting.gpus, quant=setting.dtype,
        machine="gpu" if card is not None else None, **walls)


def vllm_throughput(obj: dict[str, Any], setting: Setting) -> ImportedRun:
    source = f"{setting.path}:1"
    tokens_per_s = float(field_number(obj, "tokens_per_second", source))
    requests = field_number(obj, "num_requests", source, integer=True)
    field_number(obj, "elapsed_time", source)
    common = _vllm_common(setting)
    card = setting.card
    note = "prefills and decodes of many requests interleave: no single wall; tok/s counts prompt + output tokens"
    return ImportedRun(
        engine="vllm", engine_version=None, source=source, model=common["name"],
        card_name=card.name if card is not None else None, card_key=card.key if card is not None else None,
        test=f"throughput {requests} req", phase="end-to-end", batch=None, prompt_tokens=setting.input_len,
        gen_tokens=setting.output_len, depth=0, tokens_per_s=tokens_per_s, tokens_per_s_stddev=None,
        latency_avg_s=None, latency_p50_s=None, latency_p90_s=None, latency_p99_s=None, requests=requests,
        weight_bytes=common["weight_bytes"], params=common["params"], kv_bytes_per_value=None, step_bytes=None,
        decode_wall_tok_s=None, prefill_wall_tok_s=None, fraction_of_wall=None, wall_note=note, raw=dict(obj),
        gpus=setting.gpus, quant=setting.dtype, machine="gpu" if card is not None else None)




# --- vllm bench serve and SGLang bench_serving ----------------------------------------------------------------------

_SERVE_KEYS = frozenset({"request_rate", "completed", "output_throughput", "total_output_tokens"})


def is_serving_result(obj: Any) -> bool:
    """Whether ``obj`` is one run of ``vllm bench serve --save-result`` or SGLang's ``bench_serving``."""
    return isinstance(obj, dict) and obj.keys() >= _SERVE_KEYS and ("median_itl_ms" in obj or "median_tpot_ms" in obj)


#: How the benches write an infinite rate (every request sent at time 0): vLLM's save-result writes the string
#: ``"inf"`` (``args.request_rate if args.request_rate < float("inf") else "inf"`` in benchmarks/benchmark_serving.py
#: and vllm/benchmarks/serve.py, vllm-project/vllm); SGLang's bench_serving ``json.dumps`` the float, the bare token
#: ``Infinity`` (python/sglang/bench_serving.py, sgl-project/sglang); a hand-edited file may say "infinity".
_INFINITE_RATES = frozenset({"inf", "+inf", "infinity", "+infinity"})


def _rate(obj: dict[str, Any], where: str) -> float:
    value = obj.get("request_rate")
    if isinstance(value, str) and value.strip().lower() in _INFINITE_RATES:
        return math.inf
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (value > 0):
        return float(value)  # math.inf: every request sent at once (the file's bare Infinity)
    raise InvalidValueError(f"{where}: request_rate is {value!r}, not a positive rate, 'inf' or Infinity",
                            "restore the file as the bench wrote it")


def _ms(obj: dict[str, Any], key: str, where: str) -> float | None:
    value = field_number(obj, key, where, default=None)
    return None if value is None else float(value) / 1e3


def _e2e(obj: dict[str, Any], which: str, where: str) -> float | None:
    """A request's end-to-end latency statistic: SGLang's ``{which}_e2e_latency_ms``, vLLM's ``{which}_e2el_ms``
    (written when ``--percentile-metrics`` names e2el)."""
    key = f"{which}_e2e_latency_ms" if f"{which}_e2e_latency_ms" in obj else f"{which}_e2el_ms"
    return _ms(obj, key, where)


def serving_run(obj: dict[str, Any], source: str, setting: Setting) -> ImportedRun:
    """One serving run (vLLM or SGLang) as a row: one stream's decode rate against one stream's wall."""
    engine = field_text(obj, "backend") or "unknown"
    completed = field_number(obj, "completed", source, integer=True)
    if completed == 0:
        raise InvalidValueError(f"{source}: completed is 0, no request finished",
                                "nothing was measured: check the server's log and rerun the bench")
    rate = _rate(obj, source)
    output_tps = float(field_number(obj, "output_throughput", source))
    input_tokens = field_number(obj, "total_input_tokens", source, integer=True)
    output_tokens = field_number(obj, "total_output_tokens", source, integer=True)
    tpot, itl = _ms(obj, "median_tpot_ms", source), _ms(obj, "median_itl_ms", source)
    per_token, basis = (tpot, "1 / median TPOT") if tpot else (itl, "1 / median ITL (the file has no TPOT)")
    if not per_token:
        raise InvalidValueError(f"{source}: median TPOT and ITL are both 0 or missing",
                                "restore the file as the bench wrote it")
    concurrency = obj.get("max_concurrency")
    label = "all at once" if math.isinf(rate) else f"{rate:g} req/s"
    test = f"serve {completed} req, {label}"
    if isinstance(concurrency, int) and concurrency > 0:
        test += f", ≤{concurrency} in flight"
    if obj.get("dataset_name"):
        test += f", {obj['dataset_name']}"
    common = _vllm_common(setting, field_text(obj, "model_id"))
    card = setting.card
    notes = [f"per stream: {basis}; {output_tps:.1f} output tok/s over all streams"]
    walls = walls_of("serving", 1 / per_token, card, "" if card is not None else "the file names no card: pass --card",
                     weight_bytes=common["weight_bytes"], weight_note=common["weight_note"], params=common["params"],
                     batch=1, depth=0, shape=common["shape"], shape_note=setting.shape_note, kv_bytes_per_value=None,
                     kv_note="", peaks=(), notes=notes, gpus=setting.gpus)
    return ImportedRun(
        engine=engine, engine_version=None, source=source, model=common["name"],
        card_name=card.name if card is not None else None, card_key=card.key if card is not None else None,
        test=test, phase="serving", batch=None, prompt_tokens=round(input_tokens / completed),
        gen_tokens=round(output_tokens / completed), depth=0, tokens_per_s=1 / per_token, tokens_per_s_stddev=None,
        latency_avg_s=_e2e(obj, "mean", source), latency_p50_s=_e2e(obj, "median", source),
        latency_p90_s=None, latency_p99_s=None, requests=completed, weight_bytes=common["weight_bytes"],
        params=common["params"], kv_bytes_per_value=None, raw={k: v for k, v in obj.items() if not isinstance(v, list)},
        gpus=setting.gpus, quant=setting.dtype, machine="gpu" if card is not None else None,
        request_rate=rate, max_concurrency=concurrency if isinstance(concurrency, int) else None,
        ttft_median_s=_ms(obj, "median_ttft_ms", source), ttft_p99_s=_ms(obj, "p99_ttft_ms", source),
        tpot_median_s=tpot, itl_median_s=itl, output_tokens_per_s=output_tps, **walls)


# --- SGLang bench_one_batch -----------------------------------------------------------------------------------------

_ONE_BATCH_KEYS = frozenset({"run_name", "batch_size", "input_len", "output_len", "prefill_throughput"})


def is_one_batch_result(obj: Any) -> bool:
    """Whether ``obj`` is one line of SGLang's ``bench_one_batch`` result file."""
    return isinstance(obj, dict) and obj.keys() >= _ONE_BATCH_KEYS


def one_batch_runs(obj: dict[str, Any], source: str, setting: Setting) -> list[ImportedRun]:
    """A static batch's prefill row and (when it generated more than one token) its decode row, each with its walls:
    the decode wall of ``batch_size`` sequences at ``input_len`` tokens of context (identity 1 with identity 3's KV
    cache, which needs ``model``), the prefill wall at the weights' peak (identity 2)."""
    batch = field_number(obj, "batch_size", source, integer=True)
    input_len = field_number(obj, "input_len", source, integer=True)
    output_len = field_number(obj, "output_len", source, integer=True)
    if batch < 1 or input_len < 1:
        raise InvalidValueError(f"{source}: batch_size {batch} and input_len {input_len} must be ≥ 1",
                                "restore the file as bench_one_batch wrote it")
    common = _vllm_common(setting)
    card = setting.card
    card_note = "" if card is not None else "the file names no card: pass --card"
    kv = _kv_width(setting.dtype)
    base = dict(engine="sglang", engine_version=None, source=source, model=common["name"],
                card_name=card.name if card is not None else None, card_key=card.key if card is not None else None,
                batch=batch, prompt_tokens=input_len, gen_tokens=output_len, latency_p50_s=None, latency_p90_s=None,
                latency_p99_s=None, requests=batch, weight_bytes=common["weight_bytes"], params=common["params"],
                kv_bytes_per_value=kv, raw=dict(obj), gpus=setting.gpus, quant=setting.dtype,
                machine="gpu" if card is not None else None)
    peaks = DTYPE_PEAKS[setting.dtype]
    prefill_rate = float(field_number(obj, "prefill_throughput", source))
    walls = walls_of("prefill", prefill_rate, card, card_note, weight_bytes=common["weight_bytes"],
                     weight_note=common["weight_note"], params=common["params"], batch=batch, depth=0,
                     shape=common["shape"], shape_note=setting.shape_note, kv_bytes_per_value=kv, kv_note="",
                     peaks=peaks, notes=[], gpus=setting.gpus)
    rows = [ImportedRun(test=f"prefill b{batch} in{input_len}", phase="prefill", depth=0, tokens_per_s=prefill_rate,
                        tokens_per_s_stddev=None, latency_avg_s=field_number(obj, "prefill_latency", source,
                                                                             default=None), **base, **walls)]
    if output_len > 1 and "median_decode_throughput" in obj:
        rate = float(field_number(obj, "median_decode_throughput", source))
        walls = walls_of("decode", rate, card, card_note, weight_bytes=common["weight_bytes"],
                         weight_note=common["weight_note"], params=common["params"], batch=batch, depth=input_len,
                         shape=common["shape"], shape_note=setting.shape_note, kv_bytes_per_value=kv, kv_note="",
                         peaks=(), notes=["the KV cache at the prompt's length: the wall of the first step"],
                         gpus=setting.gpus)
        rows.append(ImportedRun(test=f"decode b{batch} in{input_len} out{output_len}", phase="decode",
                                depth=input_len, tokens_per_s=rate, tokens_per_s_stddev=None,
                                latency_avg_s=field_number(obj, "median_decode_latency", source, default=None),
                                **base, **walls))
    return rows
