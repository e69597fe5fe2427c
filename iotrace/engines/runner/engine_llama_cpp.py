"""llama.cpp through its Python binding, llama-cpp-python (built from source here; with ``CMAKE_ARGS=-DGGML_CUDA=on``
on a GPU machine): the GGUF read as it is stored (Q4_1 for the pinned model), the KV cache in f16 (llama.cpp's
default), all layers on the GPU where the build has one (``n_gpu_layers=-1``). Prefill and decode rates come from
llama.cpp's own perf context (``t_p_eval_ms``/``n_p_eval`` and ``t_eval_ms``/``n_eval``, reset each repetition); the
inter-token latencies are the runner's clock around each one-token ``eval``."""

from __future__ import annotations

import os
import time

from engine_common import Clock, Rep, same_tokens, work


def run(request: dict, failure: type[Exception]) -> dict:
    try:
        import llama_cpp
        import numpy as np  # a dependency of llama-cpp-python
        from llama_cpp import Llama
    except Exception as exc:  # a wheel built for another CPU or CUDA fails here, not with ImportError alone
        raise failure("import", f"this interpreter cannot import llama_cpp ({type(exc).__name__}: {exc})") from None
    prompt, gen, reps = work(request)
    threads = int(request.get("threads") or 0) or None  # None: llama-cpp-python's default (the physical cores)
    t0 = time.perf_counter()
    try:
        # The prompt's threads too: left None, llama-cpp-python gives the prefill every core whatever n_threads is, and
        # ggml's spinning barriers wait on a descheduled thread wherever the process was given fewer cores.
        llm = Llama(request["gguf"], n_ctx=max(256, len(prompt) + gen + 16), n_batch=512, n_threads=threads,
                    n_threads_batch=threads, n_gpu_layers=-1, seed=0, verbose=False)
    except Exception as exc:
        raise failure("load", f"llama.cpp cannot load {request['gguf']}: {type(exc).__name__}: {exc}") from None
    load_s = time.perf_counter() - t0
    ctx = llm._ctx.ctx
    vocab = llm.n_vocab()

    def logits():  # the last evaluated position's logits, a view of llama.cpp's buffer
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(vocab,))

    def greedy() -> int:
        return int(logits().argmax())  # ties: the lowest id, as torch.argmax

    def top_two() -> list:
        row = logits()
        first, second = (int(i) for i in np.argsort(row)[::-1][:2])
        return [first, float(row[first]), second, float(row[second])]

    runs, records, top2 = [], [], []
    for rep in range(reps + 1):  # rep 0 is the discarded warm-up
        llm.reset()
        llama_cpp.llama_perf_context_reset(ctx)
        clock = Clock()
        llm.eval(prompt)
        tokens = [greedy()]
        record = Rep(prefill_s=clock.lap())
        top2 = [top_two()] if rep == 1 else top2
        for _ in range(gen):
            llm.eval([tokens[-1]])
            tokens.append(greedy())
            record.step_s.append(clock.lap())
            if rep == 1:  # after the mark: the top two are not timed
                top2.append(top_two())
        perf = llama_cpp.llama_perf_context(ctx)
        record.counters = {"t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval, "t_eval_ms": perf.t_eval_ms,
                           "n_eval": perf.n_eval}
        if rep:
            runs.append(tokens)
            records.append(record)
    # No torch here: llama.cpp's ggml kernels are not torch ops, and its CPU build marks no ranges a CPU trace
    # could hold (a CUDA build's kernels are for Nsight Systems, on a GPU).
    profile = ({"skipped": "llama.cpp runs ggml, not torch: no torch profiler trace of its CPU build (a CUDA "
                           "build's kernels are traced with Nsight Systems on a GPU)"}
               if request.get("profile") else None)
    info = llama_cpp.llama_print_system_info()
    return {"build": {"engine": "llama.cpp", "version": f"llama-cpp-python {llama_cpp.__version__}",
                      "system_info": info.decode() if isinstance(info, bytes) else str(info),
                      "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
                      "threads": llm.context_params.n_threads, "threads_batch": llm.context_params.n_threads_batch,
                      "mode": "eval one token a step"},
            "device": "cuda" if llama_cpp.llama_supports_gpu_offload() else "cpu",
            "weights": {"format": "as stored", "as_stored": True, "kv_dtype": "f16", "kv_element_bytes": 2},
            "load_s": load_s, "tokens": runs[0], "tokens_stable": same_tokens(runs),
            "reps": [r.to_dict() for r in records], "top2": top2, "cpu_count": os.cpu_count(), "profile": profile,
            "timing": {"prefill": "llama.cpp perf context (t_p_eval_ms, n_p_eval)",
                       "decode": "llama.cpp perf context (t_eval_ms, n_eval)", "itl": "runner clock"}}
