"""``iotrace bench serve --json`` read back (schema ``iotrace.bench-serve/1``): one serving row per curve and point.

Each point is written under vLLM's ``bench serve`` names, with its walls already worked out against what that
engine's server reads (the weights as it holds them, each stream's KV cache, the bandwidth of the machine it ran
on); the rows keep them rather than guess a card or a width. As for any serving file, a row's rate is one stream's:
1 / median TPOT against one stream's wall at the point's batch, and ``output_tokens_per_s`` the rate over all
streams. The repetitions of a point are separate rows (``rep N`` in the test); a point with no completed request,
or whose tokens arrived in bursts (its TPOT times their delivery, not the decode), is no row: it is named in the
rows' ``read_notes``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.model.import_rows import ImportedRun
from iotrace.model.import_text import Skipped

__all__ = ["SCHEMA", "is_own_serve", "own_serve_runs"]

SCHEMA = "iotrace.bench-serve/1"


def is_own_serve(value: Any) -> bool:
    return isinstance(value, dict) and value.get("schema") == SCHEMA


def _s(value: Any) -> float | None:
    return None if value is None else float(value) / 1e3


def _rate(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def _row(data: dict[str, Any], curve: dict[str, Any], point: dict[str, Any], source: str) -> ImportedRun:
    card_key = (data.get("card") or {}).get("key")
    card = lookup(card_key) if card_key else None
    decode = (point.get("walls") or {}).get("decode") or {}
    weights = curve.get("weights") or {}
    rate, streams = _rate(point["request_rate"]), point.get("max_concurrency")
    if math.isinf(rate) and streams:
        label = f"{streams} stream" + ("s" if streams != 1 else "")
    else:
        label = "all at once" if math.isinf(rate) else f"{rate:g} req/s"
        label += f", ≤{streams} in flight" if streams and not math.isinf(rate) else ""
    flags = " ".join(curve.get("server_args") or [])
    test = f"serve {point['completed']} req, {label}" + (f", {flags}" if flags else "") + f", rep {point['rep'] + 1}"
    per_user = point.get("output_token_throughput_per_user")
    if not per_user:
        raise InvalidValueError(f"{source}: no tokens per user (every request had fewer than two tokens)",
                                "rerun iotrace bench serve with --output-tokens 2 or more")
    note = decode.get("no_fraction") or decode.get("none")
    server = curve.get("server") or {}
    return ImportedRun(
        engine=curve["engine"], engine_version=server.get("version"), source=source, model=data["model"]["name"],
        card_name=card.name if card is not None else None, card_key=card_key, test=test, phase="serving",
        batch=streams if math.isinf(rate) else None, prompt_tokens=round(point["total_input_tokens"] /
                                                                        point["completed"]),
        gen_tokens=round(point["total_output_tokens"] / point["completed"]), depth=0, tokens_per_s=per_user,
        tokens_per_s_stddev=None, latency_avg_s=_s(point.get("mean_e2el_ms")),
        latency_p50_s=_s(point.get("median_e2el_ms")), latency_p90_s=_s(point.get("p90_e2el_ms")),
        latency_p99_s=_s(point.get("p99_e2el_ms")), requests=point["completed"],
        weight_bytes=weights.get("weight_bytes"), params=data["model"].get("params"),
        kv_bytes_per_value=weights.get("kv_bytes_per_value"), step_bytes=decode.get("bytes_per_step"),
        decode_wall_tok_s=decode.get("per_user_tok_s"), prefill_wall_tok_s=None,
        fraction_of_wall=decode.get("per_user_fraction"), wall_note=note,
        raw={k: v for k, v in point.items() if not isinstance(v, (list, dict))} | {"command": (
            data.get("manifest") or {}).get("rerun")},
        gpus=1, quant=weights.get("label"), machine="cpu" if data.get("machine") == "CPU" else "gpu",
        request_rate=rate, max_concurrency=streams, ttft_median_s=_s(point.get("median_ttft_ms")),
        ttft_p99_s=_s(point.get("p99_ttft_ms")), tpot_median_s=_s(point.get("median_tpot_ms")),
        itl_median_s=_s(point.get("median_itl_ms")), output_tokens_per_s=point.get("output_throughput"))


def own_serve_runs(path: Path, data: dict[str, Any], skipped: Skipped) -> list[ImportedRun]:
    """Every point of every curve that completed a request, as a serving row; the others noted in ``skipped``."""
    try:
        curves = list(data["curves"])
        data["model"]["name"]
    except (KeyError, TypeError):
        raise InvalidValueError(f"{path} says {SCHEMA} but has no curves or model",
                                "pass the file `iotrace bench serve --json` wrote, unedited") from None
    out = []
    places: list[str] = []
    skipped.where = lambda k: places[k]  # a skipped point is named by where it sits in the file, not by a line
    for i, curve in enumerate(curves):
        for j, point in enumerate(curve.get("points") or []):
            where = f"{path}#curves[{i}].points[{j}]"
            places.append(f"curves[{i}].points[{j}]")
            if not point.get("completed"):
                skipped.add("points with no completed request", len(places) - 1,
                            f"{curve.get('label')} {point.get('label')}")
                continue
            if point.get("burst_requests"):  # TPOT timed the delivery of held-back tokens: no per-stream rate
                skipped.add("points whose tokens arrived in bursts (no per-stream rate)", len(places) - 1,
                            f"{curve.get('label')} {point.get('label')}: {point['burst_requests']} requests")
                continue
            try:
                out.append(_row(data, curve, point, where))
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidValueError(f"{where} lacks {exc} of a bench serve point",
                                        "pass the file `iotrace bench serve --json` wrote, unedited") from None
    return out
