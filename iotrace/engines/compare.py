"""Engines side by side on the same work: the figures, the walls and the agreement of each engine's tokens.

Every engine gets the same prompt token ids (the GGUF's tokenizer), greedy decoding with EOS ignored, exactly
``gen_tokens`` decode steps after the prefill, the same repetitions after a discarded warm-up. Per engine:

- prefill tok/s, TTFT, decode tok/s and inter-token latency percentiles, from the engine's own counters where it
  has them (llama.cpp's perf context) and otherwise the runner's clock; the table says which;
- the weight format the engine actually read (Q4_1 as stored for llama.cpp; fp32 dequantised for transformers and
  vLLM; iotrace's dtype) and its bytes per decode token (identity 1: every weight once, plus the KV cache at the
  mean context of the timed steps) -> the decode wall on the machine it ran on, against the memory bandwidth a copy
  loop measured in this run; with a card, the wall that card would have for the same bytes. A CPU run is never a
  fraction of a GPU's wall;
- agreement with transformers' tokens: the identical prefix, and where they diverge, the reference's margin between
  its top two logits there. A near-tie is a legitimate divergence, and so is a margin within the spread the two
  engines' margins showed before it (llama.cpp quantises activations to 8 bits: its logits differ by tenths); a
  margin beyond both is a bug for an engine with the reference's weights and dtype, and for one whose arithmetic
  differs (llama.cpp's 8-bit activations) the verdict names that arithmetic instead.

A table, not a ranking: no engine's figure is divided by another's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.engines.launch import EngineRun, EngineSpec, rerun_line, run_engine
from iotrace.engines.machine_load import engine_threads, machine_load

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["NEAR_TIE_LOGITS", "QUANTISED_ACTIVATIONS", "EngineComparison", "agreement", "compare_engines",
           "engine_figures"]

#: A divergence where the reference's top two logits are this close is a near-tie, not a bug: the acceptance rule of
#: docs/commands/bench.md ("Engines side by side"), chosen as fp32 rounding of 30 layers' logits is ~1e-3 and
#: llama.cpp's Q8_0 activations move logits by a few 0.01.
NEAR_TIE_LOGITS = 0.05


@dataclass(frozen=True)
class EngineComparison:
    """What ``iotrace bench --engine`` was asked for (the CLI's options, checked)."""

    engines: tuple[EngineSpec, ...]
    gguf: Path
    prompt_ids: tuple[int, ...]
    prompt_source: str
    gen_tokens: int = 32
    reps: int = 3
    concurrency: int = 1
    #: iotrace, transformers and vLLM compute in it (None: fp32 on a CPU, bf16 on a GPU); llama.cpp reads as stored
    dtype: str | None = None
    #: threads every CPU engine is given (None: the machine's cores)
    threads: int | None = None
    #: ``--profile``: the folder each traceable engine writes its trace into (made and checked by the caller)
    profile: Path | None = None


def _spread(values: list[float]) -> dict[str, Any]:
    from iotrace.model.measure import Spread

    return asdict(Spread.of(values))


def engine_figures(result: dict[str, Any], prompt_tokens: int) -> dict[str, Any]:
    """Prefill, TTFT, decode and ITL of one runner result, over its timed repetitions."""
    from iotrace.model.measure import latency_percentiles

    reps = result["reps"]
    steps = [s for r in reps for s in r["step_s"]]
    if all("t_eval_ms" in r["counters"] for r in reps):  # llama.cpp's own counters
        prefill = [r["counters"]["n_p_eval"] / (r["counters"]["t_p_eval_ms"] / 1e3) for r in reps]
        decode = [r["counters"]["n_eval"] / (r["counters"]["t_eval_ms"] / 1e3) for r in reps]
    else:
        prefill = [prompt_tokens / r["prefill_s"] for r in reps]
        decode = [len(r["step_s"]) / sum(r["step_s"]) for r in reps]
    ms = [s * 1e3 for s in steps]
    return {"prefill_tok_s": _spread(prefill), "ttft_ms": _spread([r["prefill_s"] * 1e3 for r in reps]),
            "decode_tok_s": _spread(decode),
            "itl_ms": latency_percentiles(ms),
            "aggregate_tok_s": _spread(result["aggregate_tok_s"]) if result.get("aggregate_tok_s") else None,
            "timing": result.get("timing", {})}


def _margin(top2: list) -> float:
    return top2[1] - top2[3]


#: What an engine that reads the weights as stored does to its arithmetic, for the verdict beyond the measured spread:
#: ggml quantises each activation row to the weight type's ``vec_dot_type`` before a quantised matmul (Q8_1 for the
#: Q4_1 GGUF: ggml-cpu's type traits, ``ggml_compute_forward_mul_mat``), so its logits differ from an fp32 run's by
#: an amount the positions before a divergence only sample.
QUANTISED_ACTIVATIONS = ("its activations are quantised to 8 bits before each matmul (ggml's vec_dot_type), so "
                         "a margin this size is within what that arithmetic can move; more tokens measure the "
                         "spread better")


def agreement(tokens: list[int], reference: list[int], ref_top2: list[list], own_top2: list[list],
              own_arithmetic: str | None = None) -> dict[str, Any]:
    """The identical prefix of ``tokens`` and the reference's; at a divergence, the reference's margin between its top
    two logits there, against the spread of the two engines' margins measured at the positions before it (where both
    ranked the same two tokens first). ``*_top2``: per position ``[id1, logit1, id2, logit2]``. ``own_arithmetic``
    says how the engine's arithmetic differs from the reference's (None: the same weights in the same dtype); a
    divergence beyond the measured spread is a bug only where it is None, and named with the reason otherwise."""
    n = min(len(tokens), len(reference))
    prefix = next((i for i in range(n) if tokens[i] != reference[i]), n)
    if prefix == n and len(tokens) == len(reference):
        return {"identical_prefix": prefix, "of": len(reference), "diverged_at": None, "margin": None,
                "spread_before": None, "verdict": "identical"}
    pairs = [(r, o) for r, o in zip(ref_top2[:prefix], own_top2[:prefix], strict=False)
             if r[0] == o[0] and r[2] == o[2]]
    spread = max((abs(_margin(r) - _margin(o)) for r, o in pairs), default=None)
    margin = _margin(ref_top2[prefix]) if prefix < len(ref_top2) else None
    if margin is None:
        verdict = "diverged (no reference margin there)"
    elif margin <= NEAR_TIE_LOGITS:
        verdict = f"diverged at a near-tie (margin {margin:.3f} <= {NEAR_TIE_LOGITS} logits)"
    elif spread is not None and margin <= spread:
        verdict = (f"diverged at a margin of {margin:.3f} logits, within the {spread:.3f} the two engines' margins "
                   "differed by before it: arithmetic, not a bug")
    elif own_arithmetic is not None:
        verdict = (f"diverged at a margin of {margin:.3f} logits, beyond the spread measured before it "
                   f"({'none' if spread is None else f'{spread:.3f}'} over {len(pairs)} positions) but not a bug: "
                   f"{own_arithmetic}")
    else:
        verdict = (f"diverged at a margin of {margin:.3f} logits, beyond the engines' measured spread "
                   f"({'none measured' if spread is None else f'{spread:.3f}'}) with the reference's own weights "
                   "and dtype: not a tie, a bug to find")
    return {"identical_prefix": prefix, "of": len(reference), "diverged_at": prefix, "margin": margin,
            "spread_before": spread, "verdict": verdict}


def _weights(result: dict[str, Any], stored_bytes: int, file_type: str, params: int) -> dict[str, Any]:
    from iotrace.model.walls import ELEMENT_BYTES

    w = result["weights"]
    if w.get("as_stored"):  # llama.cpp: its KV cache is f16 by default, and the runner reports its element size
        return {"format": f"{file_type} as stored", "bytes": stored_bytes,
                "kv_element_bytes": w.get("kv_element_bytes", 2), "kv_dtype": w.get("kv_dtype")}
    element = ELEMENT_BYTES[w["format"]]  # the KV cache is in the engine's compute dtype
    return {"format": f"{w['format']} (dequantised)", "bytes": w.get("bytes") or params * element,
            "kv_element_bytes": w.get("kv_element_bytes", ELEMENT_BYTES.get(w.get("kv_dtype"), element)),
            "kv_dtype": w.get("kv_dtype")}


def _walls(figures: dict[str, Any], weights: dict[str, Any], device: str, batch: int, context: int, config: Any,
           bandwidth: dict[str, float | None], card: Card | None) -> dict[str, Any]:
    from iotrace.model.walls import CPU_NOT_A_FRACTION, decode_step_bytes, decode_wall

    step = decode_step_bytes(weights["bytes"], batch, context, config.layers, config.kv_heads, config.head_dim,
                             weights["kv_element_bytes"])
    # Concurrent streams are measured against the batch's wall by their summed decode rate; one stream by its own.
    rate = (figures["aggregate_tok_s"] if batch > 1 and figures["aggregate_tok_s"] else figures["decode_tok_s"])["mean"]
    out: dict[str, Any] = {"bytes_per_step": step, "batch": batch, "mean_context": context, "here": None,
                           "card": None}
    measured = bandwidth.get(device)
    if measured:
        source = f"measured copy (this run, {device.upper()})"
        out["here"] = decode_wall(step, batch, measured, source, weight_bytes=weights["bytes"]).to_dict(rate)
    if card is not None and card.memory_bandwidth_gbs:
        wall = decode_wall(step, batch, card.bandwidth_bytes_per_s, f"CardBook {card.key}",
                           weight_bytes=weights["bytes"], no_fraction=None if device == "cuda" else CPU_NOT_A_FRACTION)
        out["card"] = {**wall.to_dict(rate), "card": card.key}
    return out


def compare_engines(request: EngineComparison, card: Card | None,
                    progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every engine of ``request`` on the same work and put them side by side (``iotrace.bench-engines/1``)."""
    from iotrace.engines.hf_folder import hf_folder
    from iotrace.engines.launch import engines_dir
    from iotrace.engines.profiling import profile_cost, profile_manifest, write_manifest
    from iotrace.model.copy_bandwidth import copy_bandwidth_bytes_per_s
    from iotrace.model.gguf_file import open_gguf
    from iotrace.model.measure import bench_manifest

    load = machine_load()  # before any engine starts: other work, not ours
    gguf = open_gguf(request.gguf)
    config = gguf.config
    stored = sum(int(info.n_bytes) for info in gguf.reader.tensors)
    threads = request.threads or engine_threads()
    folder = hf_folder(request.gguf, engines_dir(), progress)
    base = {"gguf": str(Path(request.gguf).resolve()), "hf_folder": str(folder),
            "prompt_ids": list(request.prompt_ids), "gen_tokens": request.gen_tokens, "reps": request.reps,
            "threads": threads, "dtype": request.dtype}
    names = [spec.name for spec in request.engines]
    runs: list[EngineRun] = []
    reference: EngineRun | None = None
    for spec in request.engines:
        progress(f"{spec.name}: loading and running ({request.reps} repetitions after a warm-up)")
        extra = {"concurrency": request.concurrency} if spec.name == "vllm" else {}
        if request.profile is not None:
            extra["profile"] = str(request.profile)
        run = run_engine(spec, {**base, **extra})
        runs.append(run)
        if spec.name == "transformers" and run.ok and reference is None:
            reference = run
    if reference is None:
        progress("transformers: the reference tokens and logit margins")
        # Its tokens and margins only: one repetition and no warm-up (a second generation of gen_tokens for nothing).
        reference = run_engine(EngineSpec("transformers"), {**base, "reps": 1, "dtype": "fp32", "warmup": False})
    progress("measuring the memory bandwidth with a copy loop")
    devices = {(r.result or {}).get("device") for r in runs if r.ok}
    bandwidth: dict[str, float | None] = {}
    for device in sorted(d for d in devices if d):
        bandwidth[device] = copy_bandwidth_bytes_per_s(device)
    ref_tokens = reference.result["tokens"] if reference.ok and reference.result else None
    ref_top2 = reference.result.get("top2", []) if reference.ok and reference.result else []
    context = len(request.prompt_ids) + request.gen_tokens // 2  # the KV read is costed at the timed steps' mean
    rows = []
    for run in runs:
        row: dict[str, Any] = {"engine": run.spec.name, "python": run.python, "ok": run.ok, "error": run.error,
                               "wall_s": run.wall_s, "rerun": rerun_line(run)}
        if run.ok and run.result is not None:
            result = run.result
            figures = engine_figures(result, len(request.prompt_ids))
            weights = _weights(result, stored, gguf.file_type, config.params)
            batch = int(result.get("concurrency") or 1)
            row.update(build=result["build"], environment=result["environment"], device=result["device"],
                       weights=weights, load_s=result["load_s"], tokens=result["tokens"],
                       tokens_stable=result["tokens_stable"], concurrency=batch, **figures,
                       walls=_walls(figures, weights, result["device"], batch, context, config, bandwidth, card),
                       agreement=agreement(result["tokens"], ref_tokens, ref_top2, result.get("top2", []),
                                           QUANTISED_ACTIVATIONS if result["weights"].get("as_stored") else None)
                       if ref_tokens else None)
            if result.get("profile"):
                row["profile"] = {**result["profile"], "cost": profile_cost(result["profile"], result["reps"])}
        rows.append(row)
    labels = []
    if any(r.get("device") == "cpu" for r in rows):
        labels.append("CPU figures of each engine's CPU build (no GPU here): not GPU results")
    if any(r.get("device") == "cpu" for r in rows) and load.label():
        labels.append(load.label())
    data = {"schema": "iotrace.bench-engines/1",
            "model": {"name": config.name, "gguf": str(request.gguf), "file_type": gguf.file_type,
                      "params": config.params, "stored_bytes": stored, "hf_folder": str(folder)},
            "prompt": {"tokens": len(request.prompt_ids), "ids": list(request.prompt_ids),
                       "source": request.prompt_source},
            "work": {"gen_tokens": request.gen_tokens, "reps": request.reps, "concurrency": request.concurrency,
                     "threads": threads, "greedy": True, "ignore_eos": True, "engines": names},
            "bandwidth_gbs": {k: (v / 1e9 if v else None) for k, v in bandwidth.items()},
            "card": None if card is None else {"key": card.key, "name": card.name},
            "reference": {"engine": "transformers", "python": reference.python, "ok": reference.ok,
                          "error": reference.error, "tokens": ref_tokens, "top2": ref_top2},
            "engines": rows, "labels": labels, "machine_load": load.to_dict(),
            "manifest": bench_manifest(request, card), "profile": None}
    if request.profile is not None:  # the manifest beside the traces, for a later `iotrace report TRACE`
        manifest = write_manifest(request.profile, profile_manifest(data, config, bandwidth))
        data["profile"] = {"folder": str(request.profile), "manifest": str(manifest)}
    return data
