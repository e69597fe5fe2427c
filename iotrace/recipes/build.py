"""Recipes from what iotrace reads: the rows of an imported bench file, or an ``iotrace bench --json`` run.

A llama-bench file measures prefill and decode in separate rows (``pp512``, ``tg128``); the rows of one
configuration (card, model, quant, build, depth and flags) become one recipe, the n-th prefill paired with the n-th
decode. A serving run is one recipe of one stream's decode rate with the aggregate output rate beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError
from iotrace.model.import_rows import ImportedRun
from iotrace.recipes.record import Derived, Figure, Recipe, Source

__all__ = ["from_bench_json", "from_engines_json", "from_imported"]

# The llama-bench fields that make two rows different configurations (besides card, model, quant and build).
_FLAG_FIELDS = ("n_gpu_layers", "n_ubatch", "n_batch", "n_threads", "flash_attn", "type_k", "type_v", "split_mode")
# The fields of a llama-bench JSON row a recipe quotes, so its figures can be checked against the row.
_QUOTED_FIELDS = ("model_type", "model_size", "model_n_params", "n_prompt", "n_gen", "n_depth", "n_ubatch",
                  "avg_ts", "stddev_ts")


def _location(run: ImportedRun, path: Path) -> str:
    rest = run.source[len(str(path)):] if run.source.startswith(str(path)) else run.source
    if run.engine == "vllm":  # vLLM's bench files are one JSON object each, named FILE:1 (import_serving)
        return "the file's one object"
    if rest.startswith(":") and rest[1:].isdigit():
        return f"line {rest[1:]}"
    if rest.startswith("#"):
        return f"object {rest[1:]} of the array"
    return rest.strip(" :()") or "the file's one object"


def _row(run: ImportedRun) -> str | None:
    raw = run.raw
    if "markdown_row" in raw:
        return "| " + " | ".join(raw["markdown_row"]) + " |"
    if "avg_ts" in raw:
        return json.dumps({k: raw[k] for k in _QUOTED_FIELDS if k in raw})
    return json.dumps(raw) if len(json.dumps(raw)) < 2000 else None


def _model_name(run: ImportedRun) -> tuple[str, str | None]:
    """(model, architecture): llama_model_desc's "<arch> <size> <ftype>" less its ftype, else the file's name."""
    model_type = run.raw.get("model_type")
    if isinstance(model_type, str) and len(model_type.split(" ")) >= 2:
        arch, size = model_type.split(" ")[:2]
        return f"{arch} {size}", arch
    return run.model, None


def _derived(runs: list[ImportedRun]) -> Derived:
    decode = next((r for r in runs if r.phase in ("decode", "serving")), None)
    prefill = next((r for r in runs if r.phase == "prefill"), None)
    notes = list(dict.fromkeys(n for r in runs for n in (r.wall_note or "").split("; ") if n))
    return Derived(
        decode_wall_tok_s=decode.decode_wall_tok_s if decode else None,
        decode_fraction=decode.fraction_of_wall if decode else None,
        prefill_wall_tok_s=prefill.prefill_wall_tok_s if prefill else None,
        prefill_fraction=prefill.fraction_of_wall if prefill else None,
        note="; ".join(notes) or None)


def _figure(run: ImportedRun, path: Path) -> Figure:
    return Figure(run.tokens_per_s, run.tokens_per_s_stddev, run.test, _location(run, path), _row(run))


def _recipe(runs: list[ImportedRun], path: Path, source: Source) -> Recipe:
    first = runs[0]
    model, arch = _model_name(first)
    by_phase = {r.phase: r for r in runs}
    serving = by_phase.get("serving")
    decode_run = by_phase.get("decode") or serving
    concurrency = None
    if serving is not None:
        concurrency = serving.test.split(", ", 1)[1] if ", " in serving.test else None
    bits = (first.weight_bytes * 8 / first.params) if first.weight_bytes and first.params else None
    unnamed = "CPU" if first.machine == "cpu" else "a GPU the file does not name"
    return Recipe(
        card=first.card_key, machine=first.card_name or unnamed,
        placement=first.machine or "unknown", gpus=first.gpus, model=model, params=first.params,
        quant=first.quant or "unknown", bits_per_weight=round(bits, 3) if bits else None,
        weight_bytes=first.weight_bytes, engine=first.engine, engine_version=first.engine_version, source=source,
        architecture=arch, flags={k: first.raw[k] for k in _FLAG_FIELDS if k in first.raw}, batch=first.batch,
        driver=first.raw.get("driver") if first.machine != "cpu" else None, command=first.raw.get("command"),
        concurrency=concurrency, depth=first.depth, prompt_tokens=first.prompt_tokens if serving else None,
        gen_tokens=first.gen_tokens if serving else None,
        prefill=_figure(by_phase["prefill"], path) if "prefill" in by_phase else None,
        decode=_figure(decode_run, path) if decode_run else None,
        end_to_end=_figure(by_phase["end-to-end"], path) if "end-to-end" in by_phase else None,
        output_tok_s=serving.output_tokens_per_s if serving else None,
        ttft_s=serving.ttft_median_s if serving else None,
        itl_s=(serving.tpot_median_s or serving.itl_median_s) if serving else None,
        derived=_derived(runs))


def from_imported(runs: list[ImportedRun], path: Path, source: Source) -> list[Recipe]:
    """The recipes of one imported file's rows, in file order."""
    groups: list[tuple[tuple[Any, ...], list[ImportedRun]]] = []
    for run in runs:
        flags = json.dumps({k: run.raw[k] for k in _FLAG_FIELDS if k in run.raw}, sort_keys=True)
        key = (run.card_key, run.card_name, run.machine, run.gpus, run.model, run.quant, run.engine,
               run.engine_version, run.depth, flags)
        # Pair the n-th prefill with the n-th decode of a configuration: a row joins the first open recipe of its
        # key whose phase slot is free; serving and end-to-end rows are recipes of their own.
        home = None
        if run.phase in ("prefill", "decode"):
            home = next((rows for k, rows in groups if k == key and all(r.phase != run.phase for r in rows)
                         and all(r.phase in ("prefill", "decode") for r in rows)), None)
        if home is None:
            groups.append((key, [run]))
        else:
            home.append(run)
    return [_recipe(rows, path, source) for _, rows in groups]


def _mean_spread(obj: Any, where: str) -> tuple[float, float | None]:
    if not isinstance(obj, dict) or not isinstance(obj.get("mean"), (int, float)):
        raise InvalidValueError(f"{where} is not a figure with a mean", "pass the file `iotrace bench --json` wrote")
    return float(obj["mean"]), obj.get("stddev")


def _quality(model: dict[str, Any]) -> str | None:
    """What is known of the run's weights' quality: a bench decodes a GGUF as stored (the format ``iotrace quant``
    measures others against), or random weights (no quality at all)."""
    if model.get("quality") != "measured":
        return "n/a: random weights"
    return ("none against the file: the GGUF's own weights, the baseline `iotrace quant` measures other formats "
            "against")


def from_bench_json(data: dict[str, Any], path: Path) -> list[Recipe]:
    """The recipes of one ``iotrace bench --json`` run: one per depth, each with the run's prefill."""
    try:
        manifest = data["manifest"]
        model = data["model"]
        prompt_tokens = int(data["prompt"]["tokens"])
        prefill_mean, prefill_spread = _mean_spread(data["prefill"]["tok_s"], f"{path}: prefill")
        generated = data.get("generated", {}).get("ids") or [[]]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidValueError(f"{path} lacks {exc} of an iotrace bench result",
                                "pass the file `iotrace bench --json` wrote, unedited") from None
    card = data.get("card") or {}
    versions = manifest.get("versions", {})
    source = Source(kind="own run", file=path.name, date=manifest.get("date"), manifest=manifest)
    prefill_wall = data["prefill"].get("prefill_wall") or {}
    weight_bytes, params = model.get("weight_bytes"), model.get("params")
    bits = weight_bytes * 8 / params if weight_bytes and params else None
    device = str(data.get("device", ""))
    steps = manifest.get("request", {}).get("gen_tokens") or len(generated[0])  # the timed decode steps
    out = []
    for i, depth in enumerate(data.get("decode", [])):
        mean, spread = _mean_spread(depth.get("decode_tok_s"), f"{path}: decode[{i}]")
        wall = depth.get("decode_wall") or {}
        test = f"tg{steps}" + (f" @ d{depth['depth']}" if depth.get("depth") else "")
        out.append(Recipe(
            card=card.get("key"), machine=card.get("name") or device, placement="cpu" if device.startswith("cpu")
            else "gpu", gpus=1, model=str(model.get("name")), params=params, quant=f"{data.get('dtype')} "
            f"({model.get('source', 'weights as loaded')})", bits_per_weight=round(bits, 3) if bits else None,
            weight_bytes=weight_bytes, engine="iotrace", engine_version=versions.get("iotrace"), source=source,
            flags={"kernels": data.get("kernels"), "batch": data.get("batch")}, driver=versions.get("cuda"),
            batch=data.get("batch"), depth=int(depth.get("depth", 0)), prompt_tokens=prompt_tokens,
            gen_tokens=steps,
            prefill=Figure(prefill_mean, prefill_spread, f"pp{prompt_tokens}", "prefill") if i == 0 else None,
            decode=Figure(mean, spread, test, f"decode[{i}]"),
            ttft_s=data["prefill"]["ttft_ms"]["mean"] / 1e3 if i == 0 else None,
            itl_s=depth.get("itl_ms", {}).get("p50", 0) / 1e3 or None,
            vram_gib=(data.get("memory", {}).get("peak_allocated_bytes") or 0) / 2 ** 30 or None,
            power_w=(depth.get("energy") or {}).get("mean_w"),
            command=manifest.get("rerun"),
            derived=Derived(decode_wall_tok_s=wall.get("tok_s"), decode_fraction=wall.get("fraction"),
                            prefill_wall_tok_s=prefill_wall.get("tok_s") if i == 0 else None,
                            prefill_fraction=prefill_wall.get("fraction") if i == 0 else None,
                            note=None if wall else "no decode wall in the run (no card named)",
                            quality_drop=_quality(model))))
    if not out:
        raise InvalidValueError(f"{path}: an iotrace bench result with no decode figures", "rerun iotrace bench")
    return out


def _engine_waterfall(row: dict[str, Any]) -> tuple[dict[str, Any] | None, tuple[tuple[str, float], ...]]:
    """A profiled engine's decode phase (its waterfall rows in ns) and its largest gaps, from the row's
    ``waterfall`` (``StepReport.to_dict``); (None, ()) where the engine was not profiled or no decode step was
    found."""
    from iotrace.trace.reports.step_report import PhaseFigures

    flow = row.get("waterfall") or {}
    decode = next((p for p in flow.get("phases") or [] if p.get("phase") == "decode"), None)
    if flow.get("error") or decode is None:
        return None, ()
    phase = PhaseFigures.from_dict(decode)
    labels = flow.get("categories") or {}
    kept = {"source": flow.get("source"), "labels": labels, "steps": phase.steps, "median_ms": phase.median_ms,
            "span_ns": phase.span_ns, "categories_ns": phase.categories_ns, "pct_of_wall": phase.pct_of_wall,
            "gemm_floor_pct": phase.gemm_floor_pct, "attention_floor_pct": phase.attention_floor_pct}
    gaps = tuple((labels.get(c, c), round(100.0 * ns / phase.span_ns, 1)) for c, ns in phase.gaps() if phase.span_ns)
    return kept, gaps


def from_engines_json(data: dict[str, Any], path: Path) -> list[Recipe]:
    """The recipes of one ``iotrace bench --engine … --json`` run (``iotrace.bench-engines/1``): one per engine
    that ran, each against the wall of the machine it ran on (a CPU's copy loop measured in the same run, or the
    named card), with its profiled decode step's waterfall where ``--profile`` recorded one. An engine that failed
    is no recipe (it measured nothing)."""
    try:
        manifest, model, work = data["manifest"], data["model"], data["work"]
        prompt_tokens = int(data["prompt"]["tokens"])
        rows = list(data["engines"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidValueError(f"{path} lacks {exc} of an iotrace bench --engine result",
                                "pass the file `iotrace bench --engine … --json` wrote, unedited") from None
    card = data.get("card") or {}
    source = Source(kind="own run", file=path.name, date=manifest.get("date"), manifest=manifest)
    steps = int(work.get("gen_tokens") or 0)
    out = []
    for i, row in enumerate(rows):
        if not row.get("ok"):
            continue
        device = str(row.get("device", ""))
        weights = row.get("weights") or {}
        params, weight_bytes = model.get("params"), weights.get("bytes")
        bits = weight_bytes * 8 / params if weight_bytes and params else None
        on_card = device.startswith("cuda")
        walls = row.get("walls") or {}
        wall = (walls.get("card") if on_card else walls.get("here")) or {}
        build = row.get("build") or {}
        waterfall, gaps = _engine_waterfall(row)
        concurrency = int(row.get("concurrency") or 1)
        out.append(Recipe(
            card=card.get("key") if on_card else None,
            machine=card.get("name") if on_card and card.get("name") else device.upper() or "unknown",
            placement="gpu" if on_card else "cpu", gpus=1, model=str(model.get("name")), params=params,
            quant=str(weights.get("format") or model.get("file_type")),
            bits_per_weight=round(bits, 3) if bits else None, weight_bytes=weight_bytes, engine=str(row["engine"]),
            engine_version=build.get("version") if isinstance(build, dict) else str(build), source=source,
            flags={k: v for k, v in build.items() if k not in ("engine", "version")} if isinstance(build, dict)
            else {}, batch=concurrency, concurrency=f"{concurrency} requests at once" if concurrency > 1 else None,
            prompt_tokens=prompt_tokens, gen_tokens=steps,
            prefill=Figure(row["prefill_tok_s"]["mean"], row["prefill_tok_s"].get("stddev"), f"pp{prompt_tokens}",
                           f"engines[{i}].prefill_tok_s"),
            decode=Figure(row["decode_tok_s"]["mean"], row["decode_tok_s"].get("stddev"), f"tg{steps}",
                          f"engines[{i}].decode_tok_s"),
            ttft_s=row["ttft_ms"]["mean"] / 1e3, itl_s=(row.get("itl_ms") or {}).get("p50", 0) / 1e3 or None,
            command=manifest.get("rerun"),
            derived=Derived(decode_wall_tok_s=wall.get("tok_s"), decode_fraction=wall.get("fraction"),
                            note=wall.get("no_fraction") or (None if wall else "no decode wall in the run"),
                            waterfall=waterfall, gaps=gaps)))
    if not out:
        raise InvalidValueError(f"{path}: no engine of this bench --engine result ran",
                                "rerun it once the engines' errors (in the file) are fixed")
    return out
