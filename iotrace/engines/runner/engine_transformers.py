"""transformers, eager: the reference. It reads the GGUF converted by transformers' GGUF loader (the request's
``hf_folder``; the GGUF itself where none is given), dequantised to fp32 (or the request's dtype), and decodes with
a DynamicCache one token a step; every time is the runner's clock. Like every engine module it returns, at each
generated position of the first timed repetition, its top two tokens and their logits (``top2``). With ``profile``,
one more repetition recorded by the torch profiler (engine_common.torch_profiler)."""

from __future__ import annotations

import os
import time

from engine_common import PROFILED_REPS, Clock, Rep, StepRanges, profile_result, same_tokens, torch_profiler, work

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def run(request: dict, failure: type[Exception]) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local file: never ask the Hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, DynamicCache
    except ImportError as exc:
        raise failure("import", f"this interpreter has no transformers/torch ({exc})") from None
    dtype_name = request.get("dtype") or "fp32"
    dtype = getattr(torch, _DTYPES[dtype_name])
    if request.get("threads"):
        torch.set_num_threads(int(request["threads"]))
    path = request.get("hf_folder") or request["gguf"]
    t0 = time.perf_counter()
    try:
        if request.get("hf_folder"):
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
        else:
            model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                         dtype=dtype).eval()
    except Exception as exc:
        raise failure("load", f"transformers cannot read {path}: {type(exc).__name__}: {exc}") from None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    load_s = time.perf_counter() - t0
    prompt, gen, reps = work(request)
    steps = StepRanges(torch)

    def repetition(keep_rows: bool) -> tuple[list[int], Rep, list]:
        cache = DynamicCache()
        clock = Clock()
        # Each range holds what the clock times for that token (the forward, the greedy choice, the token on the
        # host), so a step read from the trace is the step the runner timed.
        with steps("prefill", 1, len(prompt), len(prompt)):
            logits = model(torch.tensor([prompt], device=device), past_key_values=cache, use_cache=True).logits[0, -1]
            tokens = [int(logits.argmax())]
        record = Rep(prefill_s=clock.lap())
        rows = [logits] if keep_rows else []
        for step in range(1, gen + 1):
            with steps("decode", 1, 1, len(prompt) + step):
                logits = model(torch.tensor([[tokens[-1]]], device=device), past_key_values=cache,
                               use_cache=True).logits[0, -1]
                tokens.append(int(logits.argmax()))
            record.step_s.append(clock.lap())
            if keep_rows:
                rows.append(logits)
        return tokens, record, rows

    runs, records, top2 = [], [], []
    profile = None
    # "warmup": false where only the tokens and margins are wanted (the comparison's reference run): no timing, so
    # nothing to warm up for.
    first = 0 if request.get("warmup", True) else 1
    with torch.inference_mode():
        for rep in range(first, reps + 1):  # rep 0 is the discarded warm-up
            tokens, record, rows = repetition(rep == 1)
            if rep == 0:
                continue
            runs.append(tokens)
            records.append(record)
            if rep == 1:
                for row in rows:
                    values, ids = torch.topk(row.float(), 2)
                    top2.append([int(ids[0]), float(values[0]), int(ids[1]), float(values[1])])
        if request.get("profile"):  # after the timed repetitions: their figures are the profiler's cost baseline
            steps.reset()
            profiled = []
            with torch_profiler(torch, request["profile"], "transformers") as trace:
                for _ in range(PROFILED_REPS):
                    tokens, record, _ = repetition(False)
                    runs.append(tokens)
                    profiled.append(record)
            profile = profile_result(trace, records, profiled, steps, "torch.profiler (this runner)")
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"build": {"engine": "transformers", "version": transformers.__version__, "torch": torch.__version__,
                      "mode": "eager", "threads": torch.get_num_threads()},
            "device": device,
            "weights": {"format": dtype_name, "as_stored": False, "params": params, "bytes": weight_bytes,
                        "kv_dtype": dtype_name},
            "load_s": load_s, "tokens": runs[0], "tokens_stable": same_tokens(runs),
            "reps": [r.to_dict() for r in records], "top2": top2, "profile": profile,
            "timing": {"prefill": "runner clock", "decode": "runner clock", "itl": "runner clock"}}
