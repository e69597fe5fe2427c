"""transformers, eager: the reference. It reads the GGUF converted by transformers' GGUF loader (the request's
``hf_folder``; the GGUF itself where none is given), dequantised to fp32 (or the request's dtype), and decodes with
a DynamicCache one token a step; every time is the runner's clock. Like every engine module it returns, at each
generated position of the first timed repetition, its top two tokens and their logits (``top2``)."""

from __future__ import annotations

import os
import time

from engine_common import Clock, Rep, same_tokens, work

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
    runs, records, top2 = [], [], []
    with torch.inference_mode():
        for rep in range(reps + 1):  # rep 0 is the discarded warm-up
            cache = DynamicCache()
            clock = Clock()
            logits = model(torch.tensor([prompt], device=device), past_key_values=cache, use_cache=True).logits[0, -1]
            record = Rep(prefill_s=clock.lap())
            rows = [logits]
            tokens = [int(logits.argmax())]
            for _ in range(gen):
                step = torch.tensor([[tokens[-1]]], device=device)
                logits = model(step, past_key_values=cache, use_cache=True).logits[0, -1]
                tokens.append(int(logits.argmax()))
                record.step_s.append(clock.lap())
                rows.append(logits)
            if rep == 0:
                continue
            runs.append(tokens)
            records.append(record)
            if rep == 1:
                for row in rows:
                    values, ids = torch.topk(row.float(), 2)
                    top2.append([int(ids[0]), float(values[0]), int(ids[1]), float(values[1])])
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"build": {"engine": "transformers", "version": transformers.__version__, "torch": torch.__version__,
                      "mode": "eager", "threads": torch.get_num_threads()},
            "device": device,
            "weights": {"format": dtype_name, "as_stored": False, "params": params, "bytes": weight_bytes,
                        "kv_dtype": dtype_name},
            "load_s": load_s, "tokens": runs[0], "tokens_stable": same_tokens(runs),
            "reps": [r.to_dict() for r in records], "top2": top2,
            "timing": {"prefill": "runner clock", "decode": "runner clock", "itl": "runner clock"}}
