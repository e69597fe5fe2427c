"""Engines side by side under pytest-benchmark: the pinned model through iotrace, transformers, vLLM and llama.cpp
(``iotrace bench --engine``), one comparison timed as a whole, each engine's decode tok/s in ``extra_info`` beside
its ratio to the baseline of the same run (the decode wall of the bandwidth a copy loop measured in that run), with
the engine builds (version, build flags, interpreter, a hash of its installed distributions), the card and the
command. Needs the engine venvs (``make engines``); skips without them. Run:

    .venv/bin/python -m pytest bench/test_bench_engines.py --benchmark-json=out/bench_engines.json
"""

from __future__ import annotations

import platform
import sys

import pytest

pytest.importorskip("gguf", reason="the model bench needs iotrace[model] (make setup installs it)")


def test_bench_engines_side_by_side(benchmark) -> None:
    from iotrace.engines.compare import EngineComparison, compare_engines
    from iotrace.engines.launch import ENGINES, EngineSpec, interpreter
    from iotrace.model.gguf_file import pinned_gguf
    from iotrace.model.prompts import default_prompt
    from iotrace.model.tokenizer import gguf_tokenizer

    specs = tuple(EngineSpec(name) for name in ENGINES)
    missing = [str(interpreter(s)) for s in specs if not interpreter(s).exists()]
    if missing:
        pytest.skip(f"no engine venv at {', '.join(missing)}: `make engines` builds them")
    ids = tuple(gguf_tokenizer(pinned_gguf()).encode(default_prompt(), add_special_tokens=False))
    request = EngineComparison(engines=specs, gguf=pinned_gguf(), prompt_ids=ids, prompt_source="default prompt",
                               gen_tokens=64, reps=3)
    data = benchmark.pedantic(lambda: compare_engines(request, None), rounds=1, iterations=1)
    rows = {row["engine"]: row for row in data["engines"]}
    assert all(row["ok"] for row in rows.values()), {k: r["error"] for k, r in rows.items() if not r["ok"]}
    benchmark.extra_info.update({
        "engines": {name: {"decode_tok_s": row["decode_tok_s"]["mean"],
                           "decode_tok_s_stddev": row["decode_tok_s"]["stddev"],
                           "wall_here_tok_s": row["walls"]["here"]["tok_s"],
                           "ratio_to_wall": row["walls"]["here"]["fraction"], "weights": row["weights"]["format"],
                           "device": row["device"], "build": row["build"], "python": row["python"],
                           "freeze_sha256": row["environment"]["freeze_sha256"],
                           "agreement": row["agreement"]["verdict"]} for name, row in rows.items()},
        "bandwidth_gbs": data["bandwidth_gbs"], "labels": data["labels"], "command": " ".join(sys.argv),
        "versions": {"python": platform.python_version()}})
    for row in rows.values():
        assert row["decode_tok_s"]["mean"] > 0 and row["walls"]["here"]["fraction"] > 0
