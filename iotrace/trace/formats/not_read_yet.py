"""Outputs iotrace recognises but does not read yet: AMD's rocprof family and LLM serving/benchmark results.

:func:`identify` looks at a file's first bytes (and, for an SQLite file, its table names) and says what the file
is, so :func:`iotrace.trace.load` refuses it in one line that names it, instead of reading it as the format it
happens to resemble (a rocprof v1 JSON is a Chrome trace, a benchmark JSONL starts like a Kineto trace, a rocpd
database is SQLite like an Nsight Systems export). Each signature is stated once below, with where it comes from.
Nothing here reads more than the head, except the table names of an SQLite file's schema.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass

from iotrace.trace.formats._sniff import SQLITE_MAGIC
from iotrace.trace.parser import Head

__all__ = ["NotReadYet", "identify"]

ROCPROF = "rocprof output"
BENCHMARK = "LLM benchmark results"


@dataclass(frozen=True)
class NotReadYet:
    """What a recognised, not yet readable file is (``what``) and the family of outputs it belongs to."""

    what: str
    family: str

    @property
    def problem(self) -> str:
        """The refusal, as the one-line message's problem part."""
        return f"is {self.what}: iotrace does not read {self.family} yet"


# --- CSV header rows (first line of the file; cells stripped of spaces and quotes) ------------------------------
# (columns the header holds, what the file is), most specific first.
_CSV: tuple[tuple[frozenset[str], str], ...] = (
    # rocprof v1 --stats: results.stats.csv / hip_stats.csv / copy_stats.csv (ROCm/rocprofiler bin/tblextr.py)
    (frozenset({"Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage"}),
     "a rocprof v1 --stats summary CSV (AMD ROCm)"),
    # rocprof v1 per-dispatch results.csv with --timestamp/--stats (ROCm/rocprofiler doc/rocprof.md, "Output")
    (frozenset({"Index", "KernelName", "gpu-id", "queue-id", "grd", "wgr", "BeginNs", "EndNs"}),
     "a rocprof v1 per-dispatch kernel trace CSV (AMD ROCm)"),
    # rocprof v1 -i "pmc: ..." per-dispatch counter CSV (ROCm/rocprofiler doc/rocprof.md, "Output")
    (frozenset({"Index", "KernelName", "gpu-id", "queue-id", "grd", "wgr"}),
     "a rocprof v1 per-dispatch counter CSV (AMD ROCm)"),
    # rocprof-compute (Omniperf) workload folder files (ROCm/rocprofiler-compute, formerly ROCm/omniperf):
    # timestamps.csv, pmc_perf.csv, pmc_kernel_top.csv, pmc_dispatch_info.csv, sysinfo.csv, roofline.csv
    (frozenset({"Dispatch_ID", "Kernel_Name", "Start_Timestamp", "End_Timestamp", "DispatchNs", "CompleteNs"}),
     "a rocprof-compute (Omniperf) workload's timestamps.csv (AMD ROCm)"),
    (frozenset({"Dispatch_ID", "GPU_ID", "Grid_Size", "Workgroup_Size", "Arch_VGPR", "SGPR"}),
     "a rocprof-compute (Omniperf) workload's pmc_perf.csv (AMD ROCm per-dispatch counters)"),
    (frozenset({"Kernel_Name", "Count", "Sum(ns)", "Mean(ns)", "Median(ns)", "Pct"}),
     "a rocprof-compute (Omniperf) workload's pmc_kernel_top.csv (AMD ROCm)"),
    (frozenset({"Dispatch_ID", "Kernel_Name", "GPU_ID"}),
     "a rocprof-compute (Omniperf) workload's pmc_dispatch_info.csv (AMD ROCm)"),
    (frozenset({"workload_name", "command", "ip_blocks", "rocm_version", "gpu_arch"}),
     "a rocprof-compute (Omniperf) workload's sysinfo.csv (AMD ROCm)"),
    (frozenset({"device", "HBMBw", "L2Bw", "L1Bw", "LDSBw", "FP32Flops"}),
     "a rocprof-compute (Omniperf) workload's roofline.csv (AMD ROCm measured peaks)"),
)

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
# rocprof v1 writes its Chrome trace with every event value quoted, "ts":"<digits>", and its rocminfo dump under
# otherData (ROCm/rocprofiler bin/sqlitedb.py: dump_json, metadata_json); Chrome-trace writers (Kineto) write numbers.
_ROCPROF_JSON = re.compile(r'"traceEvents"\s*:.*?"(?:ts|dur)"\s*:\s*"\d|"HSASystemAttributes\.', re.DOTALL)
# llama-bench -o md table header: | model | size | params | backend | ... | test | t/s | (tools/llama-bench/README.md)
_LLAMA_BENCH_MD = frozenset({"model", "size", "params", "backend", "test", "t/s"})
# rocprofv3 --output-format rocpd: an SQLite database of rocpd_* tables (ROCm/rocprofiler-sdk, "rocpd" schema)
_ROCPD_PREFIX = "rocpd_"


def identify(head: Head) -> NotReadYet | None:
    """What ``head``'s file is when it is one of the outputs iotrace does not read yet, else None. Never raises."""
    if head.raw.startswith(SQLITE_MAGIC):
        return _sqlite(head)
    text = head.text
    if text is None:
        return None
    text = text.lstrip("\ufeff \t\r\n")
    if text[:1] in ("{", "["):
        return _json(text)
    lines = text.splitlines()
    if lines:
        header = {cell.strip().strip('"') for cell in lines[0].split(",")}
        for columns, what in _CSV:
            if columns <= header:
                return NotReadYet(what, ROCPROF)
    for line in lines[:400]:
        if line.lstrip().startswith("|") and {cell.strip() for cell in line.split("|")} >= _LLAMA_BENCH_MD:
            return NotReadYet("a llama.cpp llama-bench report (Markdown table)", BENCHMARK)
    return None


def _json(text: str) -> NotReadYet | None:
    if _ROCPROF_JSON.search(text[:65536]):
        return NotReadYet("a rocprof v1 JSON trace (AMD ROCm)", ROCPROF)
    if re.match(r'\{\s*"traceEvents"', text):
        return None  # a Chrome trace: the Kineto reader's
    first = text[1:].lstrip() if text.startswith("[") else text  # llama-bench -o json: a list of records
    record = first.split("\n{", 1)[0] if first.startswith("{") else ""  # JSON lines: the first line's record
    keys = set(_KEY.findall(record))
    for wanted, what in _JSON_KEYS:
        if wanted <= keys:
            return NotReadYet(what, BENCHMARK)
    return None


def _sqlite(head: Head) -> NotReadYet | None:
    """A rocpd database, told by its table names (read from the schema; the data is not read)."""
    try:
        uri = head.path.resolve().as_uri() + "?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    except (sqlite3.Error, OSError, ValueError, RuntimeError):
        return None  # damaged: the SQLite reader names the fault
    if any(str(name).startswith(_ROCPD_PREFIX) for name in names):
        return NotReadYet("a rocprofv3 rocpd database (AMD ROCm profiler SQLite)", ROCPROF)
    return None
