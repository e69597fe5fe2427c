"""Step 6: the model bench. On a GPU: SmolLM2-135M (the pinned GGUF) and Llama-3-8B with random weights, bf16,
batch 1 and 32, depth 0 and 8k, the 8B with a 2k-token prefill; each decode figure beside the decode wall from the
copy bandwidth measured in the same run; then transformers' LlamaForCausalLM on the same 8B shape (eager, and under
``torch.compile`` while the budget allows) for the same-run ratios of the bench issue's targets (≥ 80% of the wall,
≥ 1.2× eager, ≥ 0.9× compiled). On a CPU: one short bench of the pinned model on the torch path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from iotrace.cards import Card
from iotrace.selfcheck.record import Step

#: (name, request fields) of the GPU cases, cheapest first so a short budget still gets the pinned model.
GPU_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("smollm2-135m b1", {"model": "smollm2-135m", "batch": 1, "depths": (0, 8192), "gen_tokens": 64, "reps": 2}),
    ("smollm2-135m b32", {"model": "smollm2-135m", "batch": 32, "depths": (0, 8192), "gen_tokens": 64, "reps": 2}),
    ("llama-3-8b b1", {"random_weights": "llama-3-8b", "prompt_tokens": 2048, "batch": 1, "depths": (0, 8192),
                       "gen_tokens": 64, "reps": 2}),
    ("llama-3-8b b32", {"random_weights": "llama-3-8b", "prompt_tokens": 2048, "batch": 32, "depths": (0, 8192),
                        "gen_tokens": 32, "reps": 1}),
)
CPU_CASE = ("smollm2-135m b1 (CPU, torch path)", {"model": "smollm2-135m", "gen_tokens": 4, "reps": 1})


def _rows(name: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for d in data["decode"]:
        wall = d["decode_wall"] or {}
        rows.append({"case": name, "device": data["device"], "kernels": data["kernels"], "batch": data["batch"],
                     "prompt": data["prompt"]["tokens"], "depth": d["depth"],
                     "prefill_tok_s": data["prefill"]["tok_s"]["mean"] if d["depth"] == 0 else None,
                     "ttft_ms": data["prefill"]["ttft_ms"]["mean"] if d["depth"] == 0 else None,
                     "decode_tok_s": d["decode_tok_s"]["mean"], "itl_p50_ms": d["itl_ms"]["p50"],
                     "wall_tok_s": wall.get("tok_s"), "of_wall": wall.get("fraction"),
                     "wall_from": wall.get("bandwidth_source"),
                     "j_per_token": (d["energy"] or {}).get("j_per_token")})
    return rows


def _hf_decode_tok_s(batch: int, prompt: int, steps: int, compiled: bool) -> float:
    """Greedy decode tok/s of transformers' LlamaForCausalLM in the Llama-3-8B shape, random bf16 weights, its static
    KV cache (what torch.compile needs), same card."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from iotrace.model_shapes import model

    m = model("llama-3-8b")
    config = LlamaConfig(hidden_size=m.hidden, intermediate_size=m.intermediate, num_hidden_layers=m.layers,
                         num_attention_heads=m.heads, num_key_value_heads=m.kv_heads, head_dim=m.head_dim,
                         vocab_size=m.vocab, rope_theta=500000.0, max_position_embeddings=prompt + steps + 16)
    with torch.device("cuda"):
        hf = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, m.vocab, (batch, prompt), device="cuda")
    if compiled:
        hf.forward = torch.compile(hf.forward, mode="reduce-overhead", fullgraph=False)
    with torch.no_grad():
        hf.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, cache_implementation="static")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        prefill_only = hf.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False,
                                   cache_implementation="static")
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        hf.generate(ids, max_new_tokens=steps + 1, min_new_tokens=steps + 1, do_sample=False,
                    cache_implementation="static")
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    del hf, prefill_only
    torch.cuda.empty_cache()
    # The decode steps alone: the longer run less the prefill-and-one-token run.
    return batch * steps / ((t2 - t1) - (t1 - t0))


def run_benches(step: Step, card: Card, gpu: bool, quick: bool, out_of_time: Callable[[], bool]) -> Step:
    from iotrace.errors import IotraceError
    from iotrace.model.measure import BenchRequest, run_bench
    from iotrace.model.prompts import default_prompt

    cases = GPU_CASES[:1] if gpu and quick else GPU_CASES if gpu else (CPU_CASE,)
    failures = []
    for name, fields in cases:
        if out_of_time():
            step.rows.append({"case": name, "skipped": "the time budget ran out"})
            continue
        fields = {"prompt": default_prompt(), **fields} if "prompt_tokens" not in fields else fields
        try:
            result = run_bench(BenchRequest(**fields), card)
        except (IotraceError, RuntimeError) as exc:  # one case out of memory or refused: the others still run
            failures.append(f"{name}: {' '.join(str(exc).split())[:200]}")
            step.rows.append({"case": name, "failed": failures[-1]})
            continue
        step.rows.extend(_rows(name, result.to_dict()))
        if name == "llama-3-8b b1":
            step.figures["llama_3_8b_b1_decode_tok_s"] = result.depths[0].decode_tok_s.mean
    ours = step.figures.get("llama_3_8b_b1_decode_tok_s")
    if gpu and ours:
        for compiled in (False, True):
            label = "transformers + torch.compile" if compiled else "transformers eager"
            if out_of_time():
                step.rows.append({"case": f"llama-3-8b b1 {label}", "skipped": "the time budget ran out"})
                continue
            try:
                theirs = _hf_decode_tok_s(1, 2048, 64, compiled)
            except Exception as exc:  # a transformers version without static caches, a compile failure: recorded
                step.rows.append({"case": f"llama-3-8b b1 {label}", "failed": str(exc)[:200]})
                continue
            step.rows.append({"case": f"llama-3-8b b1 {label}", "decode_tok_s": theirs, "ours_over_theirs":
                              ours / theirs})
    if gpu:
        _speculation(step, card, quick, out_of_time, failures)
    if failures:
        step.fail("; ".join(failures))
    return step


#: The GPU speculation case: the pinned model, prompt lookup and a layer-skipping draft, a few γ, the shipped
#: code/prose/chat prompts, plain decoding timed in the same run.
SPEC_CASE = {"drafts": ("ngram", "layerskip:24"), "gammas": (1, 2, 4, 8), "gen_tokens": 64}


def _speculation(step: Step, card: Card, quick: bool, out_of_time: Callable[[], bool], failures: list[str]) -> None:
    """Speculative decoding's wall-clock speedup over plain decoding, with α, per prompt, draft and γ (GPU only:
    the CPU's exactness checks are tests/test_speculate.py)."""
    from iotrace.errors import IotraceError
    from iotrace.model.spec_bench import SpecRequest, run_spec_bench, spec_prompts

    if out_of_time():
        step.rows.append({"case": "speculation", "skipped": "the time budget ran out"})
        return
    fields = dict(SPEC_CASE, gammas=(1, 4)) if quick else SPEC_CASE
    try:
        data = run_spec_bench(SpecRequest(prompts=spec_prompts(), **fields), card)
    except (IotraceError, RuntimeError) as exc:
        failures.append(f"speculation: {' '.join(str(exc).split())[:200]}")
        step.rows.append({"case": "speculation", "failed": failures[-1]})
        return
    for prompt in data["speculation"]["prompts"]:
        for draft in prompt["drafts"]:
            for r in draft["runs"]:
                step.rows.append({"case": f"speculation {prompt['key']} {draft['draft']} γ={r['gamma']}",
                                  "device": data["device"], "kernels": data["kernels"], "alpha": r["alpha"],
                                  "tokens_per_step": r["tokens_per_step"],
                                  "identity5_tokens_per_step": r["identity5_tokens_per_step"],
                                  "draft_cost": r["draft_cost"], "speedup": r["speedup"],
                                  "identity5_speedup": r["identity5_speedup"],
                                  "identical_to_plain": r["identical_to_plain"],
                                  "plain_step_ms": prompt["plain"]["step_ms"]})
                if r["identical_to_plain"] is False:
                    failures.append(f"speculation {prompt['key']} {draft['draft']} γ={r['gamma']}: greedy "
                                    "output differs from plain decoding")
