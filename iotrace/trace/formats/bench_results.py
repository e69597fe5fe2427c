"""LLM benchmark results given where a profiler trace is expected: told apart by content and sent to their reader.

:func:`identify` looks at a file's first bytes and says what the file is, so :func:`iotrace.trace.load` refuses it
in one line that names it and the commands that read it (``iotrace bench import``, ``iotrace recipes add``:
:mod:`iotrace.model.imported`), instead of reading it as the trace format it happens to resemble (a benchmark JSONL
starts like a Kineto trace). Each signature is stated once below, with where it comes from. Nothing here reads more
than the head.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iotrace.trace.formats._sniff import SQLITE_MAGIC
from iotrace.trace.parser import Head

__all__ = ["BenchResult", "identify"]


@dataclass(frozen=True)
class BenchResult:
    """What a recognised benchmark result is (``what``), with the refusal's problem and hint."""

    what: str

    @property
    def problem(self) -> str:
        """The refusal, as the one-line message's problem part."""
        return f"is {self.what}, a benchmark result and not a profiler trace"

    @property
    def hint(self) -> str:
        return "read it with `iotrace bench import FILE`, or file it as recipes with `iotrace recipes add FILE`"


# --- JSON documents and JSON lines (top-level keys of the first record) -----------------------------------------
# (keys the first record holds, what the file is), most specific first.
_JSON_KEYS: tuple[tuple[frozenset[str], str], ...] = (
    # llama.cpp llama-bench -o json / -o jsonl (ggml-org/llama.cpp tools/llama-bench/README.md, "Output formats")
    (frozenset({"build_commit", "model_type", "n_prompt", "n_gen", "avg_ts"}),
     "a llama.cpp llama-bench result file (JSON or JSON lines)"),
    # SGLang python -m sglang.bench_serving --output-file (sgl-project/sglang python/sglang/bench_serving.py)
    (frozenset({"backend", "dataset_name", "request_rate", "total_output_tokens_retokenized", "completed"}),
     "an SGLang bench_serving result file (JSON lines)"),
    # vLLM benchmarks/benchmark_serving.py --save-result (vllm-project/vllm benchmarks/benchmark_serving.py)
    (frozenset({"backend", "model_id", "num_prompts", "request_rate", "completed", "request_throughput"}),
     "a vLLM benchmark_serving result file (JSON)"),
    # vLLM benchmarks/benchmark_throughput.py --output-json (vllm-project/vllm benchmarks/benchmark_throughput.py)
    (frozenset({"elapsed_time", "num_requests", "total_num_tokens", "requests_per_second", "tokens_per_second"}),
     "a vLLM benchmark_throughput result file (JSON)"),
)
_KEY = re.compile(r'"([^"\\]{1,80})"\s*:')
# llama-bench -o md table header: | model | size | params | backend | ... | test | t/s | (tools/llama-bench/README.md)
_LLAMA_BENCH_MD = frozenset({"model", "size", "params", "backend", "test", "t/s"})


def identify(head: Head) -> BenchResult | None:
    """What ``head``'s file is when it is an LLM benchmark result, else None. Never raises."""
    if head.raw.startswith(SQLITE_MAGIC):
        return None  # an SQLite database: Nsight Systems' and rocpd's readers tell them apart
    text = head.text
    if text is None:
        return None
    text = text.lstrip("\ufeff \t\r\n")
    if text[:1] in ("{", "["):
        return _json(text)
    lines = text.splitlines()
    for line in lines[:400]:
        if line.lstrip().startswith("|") and {cell.strip() for cell in line.split("|")} >= _LLAMA_BENCH_MD:
            return BenchResult("a llama.cpp llama-bench report (Markdown table)")
    return None


def _json(text: str) -> BenchResult | None:
    if re.match(r'\{\s*"traceEvents"', text):
        return None  # a Chrome trace: the Kineto reader's
    first = text[1:].lstrip() if text.startswith("[") else text  # llama-bench -o json: a list of records
    record = first.split("\n{", 1)[0] if first.startswith("{") else ""  # JSON lines: the first line's record
    keys = set(_KEY.findall(record))
    for wanted, what in _JSON_KEYS:
        if wanted <= keys:
            return BenchResult(what)
    return None
