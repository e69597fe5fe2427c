"""Model runs under the regression gates (pytest-benchmark): one decode step of a real model, timed by
pytest-benchmark, with the bench's figures in ``extra_info`` (decode tok/s, the decode wall, the fraction of it,
prefill tok/s, card, device, command, versions), so ``--benchmark-compare --benchmark-compare-fail=median:5%`` gates
model runs as it gates kernels. Run:

    .venv/bin/python -m pytest bench/test_bench_model.py --benchmark-json=out/bench_model.json

On a CPU the pinned model runs the torch path (a CPU figure, labelled so); on a GPU the Triton kernels, with the
baseline of the same run: transformers' eager decode step of the same weights, in the same process.
"""

from __future__ import annotations

import platform
import sys

import pytest
import torch

pytest.importorskip("gguf", reason="the model bench needs iotrace[model] (make setup installs it)")


@pytest.fixture(scope="module")
def pinned():
    from iotrace.model.gguf_file import MissingModelDependencyError, open_gguf, pinned_gguf

    try:
        return open_gguf(pinned_gguf())
    except MissingModelDependencyError as exc:
        pytest.skip(str(exc))


def test_bench_pinned_model_decode_step(benchmark, pinned) -> None:
    from iotrace.cards import detect, lookup
    from iotrace.model.decoder import Decoder
    from iotrace.model.measure import BenchRequest, run_bench
    from iotrace.model.ops import make_ops
    from iotrace.model.prompts import default_prompt
    from iotrace.model.weights import from_gguf

    gpu = torch.cuda.is_available()
    card = detect() if gpu else lookup("rtx3090")
    result = run_bench(BenchRequest(model="smollm2-135m", prompt=default_prompt(), gen_tokens=16, reps=2), card)
    weights = from_gguf(pinned, torch.bfloat16 if gpu else torch.float32, "cuda" if gpu else "cpu")
    decoder = Decoder(weights, make_ops("triton" if gpu else "torch", card), 1, 64)
    token = decoder.prefill(torch.tensor([result.prompt_ids])).argmax(-1)

    def step() -> None:
        decoder.decode(token)
        decoder.lens -= 1  # the same position every round: the same work
        if gpu:
            torch.cuda.synchronize()

    benchmark.pedantic(step, rounds=20, warmup_rounds=2)
    depth = result.depths[0]
    benchmark.extra_info.update({
        "device": result.device, "kernels": result.kernels, "card": card.key, "labels": result.labels,
        "decode_tok_s": depth.decode_tok_s.mean, "decode_tok_s_stddev": depth.decode_tok_s.stddev,
        "decode_wall_tok_s": depth.walls[0].tokens_per_s if depth.walls else None,
        "fraction_of_wall": depth.walls[0].fraction(depth.decode_tok_s.mean) if depth.walls else None,
        "prefill_tok_s": result.prefill_tok_s.mean, "command": " ".join(sys.argv),
        "versions": {"python": platform.python_version(), "torch": torch.__version__}})
    assert depth.decode_tok_s.mean > 0 and result.generated_ids[0][0] == 7042  # " Paris", as transformers says
