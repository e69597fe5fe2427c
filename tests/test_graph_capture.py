"""A trace recorded while an engine captures CUDA graphs is said to be a warm-up, never told to capture a graph
(issue 45 item 3); traces that only ask whether a stream captures, or replay graphs, are not.

The corpus holds no capture run yet, so the positive case is a Kineto trace written here in the profiler's own
schema around the calls a capture makes (cudaStreamBeginCapture, the launches it records, cudaStreamEndCapture,
cudaGraphInstantiate) and vLLM's capture range; the negatives are real corpus files: the vLLM V1 H100 trace replays
729 graphs and calls cudaStreamGetCaptureInfo_v2 171 times, the V100 training trace calls cudaStreamGetCaptureInfo
684 times (counted with plain json in PROVENANCE's spirit: see the assertions).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from iotrace.trace import load
from iotrace.trace.reports.graph_capture import capture_run
from iotrace.trace.reports.report import build_report
from tests.conftest import load_corpus, run_cli_in_process

H100 = "kineto/h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz"
V100 = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"


def _capture_trace(path: Path) -> Path:
    """A Kineto trace of one piecewise capture: 40 launches recorded into a graph (none ran), between the capture's
    begin and end, then the graph's instantiation, under vLLM's capture range."""
    events, ts, corr = [], 1_000_000.0, 100
    events.append({"ph": "X", "cat": "user_annotation", "name": "capture_8192_PIECEWISE", "ts": ts, "dur": 5000,
                   "pid": 7, "tid": 7})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "ts": ts + 10, "dur": 5,
                   "pid": 7, "tid": 7, "args": {"correlation": corr}})
    for i in range(40):
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts + 20 + 4 * i,
                       "dur": 3, "pid": 7, "tid": 7, "args": {"correlation": corr}})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "ts": ts + 200, "dur": 20,
                   "pid": 7, "tid": 7, "args": {"correlation": corr + 1}})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphInstantiate", "ts": ts + 230, "dur": 900,
                   "pid": 7, "tid": 7, "args": {"correlation": corr + 2}})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_a_capture_run_is_said_to_be_a_warm_up_once_and_first(tmp_path: Path) -> None:
    trace = _capture_trace(tmp_path / "capture.pt.trace.json")
    said = capture_run(load(trace))
    assert said is not None and said.startswith("this trace records CUDA graph capture (1 stream capture(s) begun; "
                                                "1 graph(s) instantiated; capture ranges capture_8192_PIECEWISE)")
    report = build_report(load(trace))
    assert report.findings[0].rule == "graph-capture" and "a warm-up, not a workload" in report.findings[0].text
    assert sum(f.rule == "graph-capture" for f in report.findings) == 1
    assert not any("Capture the stretch" in f.try_next for f in report.findings)
    done = run_cli_in_process("report", str(trace))
    assert done.returncode == 0 and "a warm-up, not a workload" in " ".join(done.stdout.split())


@pytest.mark.parametrize("name", [H100, V100])
def test_traces_that_only_ask_or_replay_are_not_capture_runs(corpus: Path, name: str) -> None:
    with gzip.open(corpus / name, "rt") as handle:
        calls = [e["name"] for e in json.load(handle)["traceEvents"] if e.get("cat") == "cuda_runtime"]
    asked = sum(1 for n in calls if n.startswith("cudaStreamGetCaptureInfo"))
    assert asked in (171, 684) and not any("BeginCapture" in n or "GraphInstantiate" in n for n in calls)
    tables = load_corpus(corpus / name)
    assert capture_run(tables) is None
    assert not any(f.rule == "graph-capture" for f in build_report(tables).findings)
