"""iotrace's own reference decoder (iotrace.model.decoder): the GGUF dequantised to the request's dtype, the torch
ops on a CPU, the Triton kernels (with their CUDA graph) on a GPU; the runner's clock, synchronised on a GPU. With
``profile``, one more repetition recorded by the torch profiler (engine_common.torch_profiler)."""

from __future__ import annotations

import time

from engine_common import PROFILED_REPS, Clock, Rep, StepRanges, profile_result, same_tokens, torch_profiler, work


def run(request: dict, failure: type[Exception]) -> dict:
    try:
        import torch

        import iotrace
        from iotrace.cards import detect
        from iotrace.model.decoder import Decoder
        from iotrace.model.gguf_file import open_gguf
        from iotrace.model.ops import make_ops
        from iotrace.model.weights import from_gguf
    except ImportError as exc:
        raise failure("import", f"this interpreter has no iotrace (with its [model] extra) ({exc})") from None
    on_gpu = torch.cuda.is_available()
    dtype_name = request.get("dtype") or ("bf16" if on_gpu else "fp32")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    if request.get("threads"):
        torch.set_num_threads(int(request["threads"]))
    kernels = "triton" if on_gpu else "torch"
    prompt, gen, reps = work(request)
    t0 = time.perf_counter()
    try:
        weights = from_gguf(open_gguf(request["gguf"]), dtype, "cuda" if on_gpu else "cpu")
    except Exception as exc:
        raise failure("load", f"iotrace cannot read {request['gguf']}: {exc}") from None
    ops = make_ops(kernels, detect(None) if on_gpu else None)
    load_s = time.perf_counter() - t0

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    steps = StepRanges(torch)
    decoder = Decoder(weights, ops, 1, len(prompt) + gen + 1)
    ids = torch.tensor([prompt], dtype=torch.int64)

    def repetition(keep_top2: bool) -> tuple[list[int], Rep, list]:
        decoder.reset()
        sync()
        clock = Clock()
        # Each range holds what the clock times for that token (the forward, the greedy choice, the token on the
        # host), so a step read from the trace is the step the runner timed.
        with steps("prefill", 1, len(prompt), len(prompt)):
            logits = decoder.prefill(ids)
            current = logits.argmax(-1)
            sync()
        record = Rep(prefill_s=clock.lap())
        tokens = [int(current[0])]
        rows = [logits[0].float().topk(2)] if keep_top2 else []
        for step in range(1, gen + 1):
            with steps("decode", 1, 1, len(prompt) + step):
                logits = decoder.decode(current)
                current = logits.argmax(-1)
                tokens.append(int(current[0]))  # int() waits for the step: the mark follows the device
            record.step_s.append(clock.lap())
            if keep_top2:  # after the mark: the top two are not timed
                rows.append(logits[0].float().topk(2))
        return tokens, record, rows

    runs, records, top2 = [], [], []
    for rep in range(reps + 1):  # rep 0 is the discarded warm-up (Triton compiles there)
        tokens, record, rows = repetition(rep == 1)
        if rep:
            runs.append(tokens)
            records.append(record)
        if rep == 1:
            top2 = [[int(i[0]), float(v[0]), int(i[1]), float(v[1])] for v, i in rows]
    profile = None
    if request.get("profile"):  # after the timed repetitions: their figures are the profiler's cost baseline
        steps.reset()
        profiled = []
        with torch_profiler(torch, request["profile"], "iotrace") as trace:
            for _ in range(PROFILED_REPS):
                tokens, record, _ = repetition(False)
                runs.append(tokens)
                profiled.append(record)
        profile = profile_result(trace, records, profiled, steps, "torch.profiler (this runner)")
    element = torch.tensor([], dtype=dtype).element_size()
    return {"build": {"engine": "iotrace", "version": iotrace.__version__, "torch": torch.__version__,
                      "mode": f"{kernels} kernels", "threads": torch.get_num_threads()},
            "device": "cuda" if on_gpu else "cpu",
            "weights": {"format": dtype_name, "as_stored": False, "params": weights.config.params,
                        "bytes": weights.weight_bytes, "kv_dtype": dtype_name, "kv_element_bytes": element},
            "load_s": load_s, "tokens": runs[0], "tokens_stable": same_tokens(runs),
            "reps": [r.to_dict() for r in records], "top2": top2, "profile": profile,
            "timing": {"prefill": "runner clock", "decode": "runner clock", "itl": "runner clock"}}
