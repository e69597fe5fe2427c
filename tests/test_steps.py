"""Engine steps and where their time went (iotrace.trace.reports.steps / waterfall / step_report), on real traces.

The vLLM V1 H100 trace of the corpus (kineto/h100sxm_x4tp_...): its steps, their kernels and graph launches and the
matrix products' time are recomputed here with plain ``json`` (the steps are the Python function
``gpu_model_runner.py(1002): execute_model``; a kernel is a step's when its launching runtime call, joined by
``args.correlation``, starts inside it). A CPU trace is recorded here with the real torch profiler, each forward
under an ``iotrace/step`` range as iotrace's runners write them.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from iotrace.errors import InvalidValueError
from iotrace.trace import load
from iotrace.trace.reports.step_report import StepModel, StepOptions, machine_of, step_report
from iotrace.trace.reports.step_roles import CATEGORIES, kernel_role
from iotrace.trace.reports.steps import find_steps
from iotrace.trace.reports.waterfall import waterfall
from tests.conftest import load_corpus, run_cli_in_process, union_ns

H100 = "kineto/h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz"
STEP = re.compile(r"gpu_model_runner\.py\(\d+\): execute_model$")
_cache: dict[str, object] = {}


@pytest.fixture(scope="module")
def h100(corpus: Path):
    return load_corpus(corpus / H100)


@pytest.fixture(scope="module")
def h100_events(corpus: Path) -> list[dict]:
    with gzip.open(corpus / H100, "rt") as handle:
        return json.load(handle)["traceEvents"]


def test_h100_steps_and_their_work_match_plain_json(h100, h100_events: list[dict]) -> None:
    marks = sorted((e for e in h100_events if e.get("cat") == "python_function" and STEP.search(e["name"])),
                   key=lambda e: e["ts"])
    calls = {e["args"]["correlation"]: e for e in h100_events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    kernels = [e for e in h100_events if e.get("cat") == "kernel"]
    expected_kernels, expected_graphs = [], []
    for mark in marks:
        lo, hi = mark["ts"], mark["ts"] + mark["dur"]
        mine = [k for k in kernels if lo <= calls[k["args"]["correlation"]]["ts"] < hi]
        expected_kernels.append(len(mine))
        expected_graphs.append(sum(1 for c in calls.values() if c["name"] == "cudaGraphLaunch" and lo <= c["ts"] < hi))
    steps = find_steps(h100)
    assert steps is not None and steps.source == "vLLM's GPUModelRunner.execute_model Python function"
    assert len(steps) == len(marks) == 11
    assert list(steps.frame["kernels"]) == expected_kernels == [1133] + [1375] * 9 + [0]
    assert list(steps.frame["graph_launches"]) == expected_graphs == [0] + [81] * 9 + [0]
    assert list(steps.frame["phase"]) == ["prefill"] + ["decode"] * 9 + ["empty"]
    assert sum(expected_kernels) == len(kernels)  # every kernel belongs to a step
    assert steps.counts == "inferred" and "give --batch" in steps.notes[0]


def test_h100_waterfall_sums_to_each_step_and_its_gemm_time_matches_plain_json(h100, h100_events: list[dict]) -> None:
    steps = find_steps(h100)
    flow = waterfall(h100, steps)
    columns = [f"{c}_ns" for c in CATEGORIES]
    assert (flow.frame[columns].sum(axis=1) == flow.frame["span_ns"]).all()  # exactly, in integer ns
    assert flow.device == "gpu" and flow.uncharged_ns == 0
    # Matrix products are charged first, so their time in a span is the union of the GEMM kernels inside it.
    gemms = [(e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000) for e in h100_events
             if e.get("cat") == "kernel" and re.search(r"gemm|splitKreduce", e["name"])]
    assert {kernel_role(e["name"]) for e in h100_events if e.get("cat") == "kernel"
            and re.search(r"gemm|splitKreduce", e["name"])} == {"gemm"}
    for row in flow.frame.itertuples():
        expected = union_ns(gemms, row.span_start_ns, row.span_end_ns)
        assert row.gemm_ns == pytest.approx(expected, abs=2 * 1375)  # ns rounding of each kernel's end
    # The roles of the communication kernels: NCCL's and vLLM's custom all-reduce, never a GEMM's.
    assert kernel_role("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(vllm::RankData*)") == "communication"
    assert kernel_role("triton_poi_fused_add_all_reduce_bitwise_and_bitwise_or_embedding_0") == "elementwise"
    assert kernel_role("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(x)") == "elementwise"


def test_h100_decode_against_its_wall_and_the_findings_it_draws(h100) -> None:
    from iotrace.model_shapes import model

    shape = model("llama-3-70b")
    given = StepModel(shape.name, shape.params, 2.0, "test", layers=shape.layers, kv_heads=shape.kv_heads,
                      head_dim=shape.head_dim, hidden=shape.hidden, kv_bytes_per_value=2.0)
    machine = machine_of(h100)
    assert machine is not None and machine.tp == 4 and machine.bandwidth == 3.35e12
    report = step_report(h100, StepOptions(model=given, machine=machine, batch=1))
    prefill, decode = report.phases
    spans = report.waterfall.frame["span_ns"].to_numpy()[1:10]
    floor_ns = shape.params * 2.0 / 4 / 3.35e12 * 1e9  # identity 1 per step; no context in the trace: no KV term
    assert decode.steps == 9 and decode.tokens_per_step == 1
    assert decode.tok_s == pytest.approx(9 / (spans.sum() / 1e9))
    assert decode.pct_of_wall == pytest.approx(100 * 9 * floor_ns / spans.sum())
    assert 50 < decode.pct_of_wall < 60 and decode.wall_tok_s == pytest.approx(1e9 / floor_ns)
    assert prefill.pct_of_wall is None and "does not say how many tokens" in prefill.wall_basis
    # The gaps: the GEMMs less their byte floor (identity 1 per step), every other row whole; together they are the
    # step less its wall, so they and the share of the wall reached add to the step.
    gemm_ns = decode.categories_ns["gemm"]
    assert decode.gemm_floor_pct == pytest.approx(100 * 9 * floor_ns / gemm_ns)
    gaps = dict(decode.gaps())
    assert gaps["gemm"] == pytest.approx(gemm_ns - 9 * floor_ns, abs=1)
    assert {c: ns for c, ns in gaps.items() if c != "gemm"} == {
        c: ns for c, ns in decode.categories_ns.items() if c not in ("gemm", "attention") and ns} | {
        "attention": pytest.approx(decode.categories_ns["attention"], abs=1)}
    assert 100 * sum(gaps.values()) / decode.span_ns + decode.pct_of_wall == pytest.approx(100, abs=0.01)
    assert [c for c, _ in decode.gaps()[:2]] == ["gemm", "idle"] and prefill.gaps() == []
    rules = {(f.rule, re.search(r"of each (\w+) step", f.text).group(1)) for f in report.findings}
    # Launch overhead is 12% of a decode step (fires) and 8% of the prefill (must not).
    assert ("step-launch-overhead", "decode") in rules and ("step-launch-overhead", "prefill") not in rules
    [idle] = [f for f in report.findings if f.rule == "step-launch-overhead"]
    assert "already replay CUDA graphs" in idle.try_next and idle.gain.fraction == pytest.approx(decode.share("idle"))


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_step_faster_than_its_wall_and_a_trace_without_steps_are_one_line(corpus: Path) -> None:
    done = run_cli_in_process("report", str(corpus / H100), "--params", "1e12", "--bits", "16", "--batch", "1")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "faster than its wall" in done.stderr and "above the wall" in done.stderr
    plain = corpus / "kineto/a100_pg509_alexnet_kineto_trace.json.gz"
    assert step_report(load(plain)) is None
    done = run_cli_in_process("report", str(plain), "--model", "llama-3-8b")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no engine step found" in done.stderr
    assert "--steps REGEX" in done.stderr
    for argv, words in ((["--steps", "no-such-range"], "matches no range"), (["--steps", "("], "not a regular"),
                        (["--params", "0", "--bits", "16"], "must be positive"),
                        (["--model", "no-such-model"], "no-such-model"), (["--bits", "4"], "describe a model"),
                        (["--params", "8e9"], "--params needs --bits"), (["--batch", "0"], "--batch 0")):
        done = run_cli_in_process("report", str(corpus / H100), *argv)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, (argv, done.stderr)


def test_a_gguf_that_is_not_a_model_is_one_line(corpus: Path, tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"not a gguf at all")
    done = run_cli_in_process("report", str(corpus / H100), "--gguf", str(fake))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and str(fake) in done.stderr


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch-profiler trace of a small two-layer model on this CPU: one prefill of 6 tokens and 5 decode steps
    under iotrace/step ranges, as the runners write them (shapes recorded)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    hidden = 96
    layers = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(2))

    def forward(x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = torch.nn.functional.silu(layer(x))
            x = torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None])[0]
        return x.sum(-1).argmax()

    path = tmp_path_factory.mktemp("cpu-trace") / "steps.pt.trace.json"
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("iotrace/step prefill requests=1 tokens=6 context=6"):
            forward(torch.randn(6, hidden))
        for n in range(5):
            sum(range(2000))  # host work between steps: the scheduler's share
            with record_function(f"iotrace/step decode requests=1 tokens=1 context={7 + n}"):
                forward(torch.randn(1, hidden))
    prof.export_chrome_trace(str(path))
    return path


def test_cpu_steps_waterfall_recomputed_from_plain_json(cpu_trace: Path) -> None:
    events = json.loads(cpu_trace.read_text())["traceEvents"]
    marks = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("iotrace/step")),
                   key=lambda e: e["ts"])
    tables = load(cpu_trace)
    steps = find_steps(tables)
    assert steps.source.startswith("iotrace's runner ranges") and steps.counts == "stated"
    assert list(steps.frame["phase"]) == ["prefill"] + ["decode"] * 5
    assert list(steps.frame["context"]) == [6, 7, 8, 9, 10, 11] and steps.frame["prompt_tokens"].iloc[0] == 6
    assert len(steps) == len(marks)
    flow = waterfall(tables, steps)
    assert flow.device == "cpu"
    columns = [f"{c}_ns" for c in CATEGORIES]
    assert (flow.frame[columns].sum(axis=1) == flow.frame["span_ns"]).all()
    thread = marks[0]["tid"]
    linears = [(e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000) for e in events
               if e.get("cat") == "cpu_op" and e["name"] == "aten::linear" and e["tid"] == thread]
    attention = [(e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000) for e in events if e.get("cat") == "cpu_op"
                 and e["name"] == "aten::scaled_dot_product_attention" and e["tid"] == thread]
    for row in flow.frame.itertuples():
        assert row.gemm_ns == pytest.approx(union_ns(linears, row.span_start_ns, row.span_end_ns), abs=50)
        assert row.attention_ns == pytest.approx(union_ns(attention, row.span_start_ns, row.span_end_ns), abs=50)
        assert row.gemm_ns > 0 and row.attention_ns > 0
    assert flow.frame["host_between_ns"].iloc[:-1].gt(0).all()  # the loop between steps is charged to its step


def test_cpu_trace_report_names_the_wall_and_refuses_another_model(cpu_trace: Path) -> None:
    done = run_cli_in_process("report", str(cpu_trace), "--params", "2e4", "--bits", "32", "--bandwidth", "1")
    assert done.returncode == 0, done.stderr
    assert "no kernels in this trace: a CPU-only trace" in done.stdout
    assert "Where the tok/s went: 6 engine steps (1 prefill, 5 decode)" in done.stdout
    assert "Python and framework time outside any op" in done.stdout
    with pytest.raises(InvalidValueError, match="hidden size 4096"):
        from iotrace.model.step_model import from_key

        step_report(load(cpu_trace), StepOptions(model=from_key("llama-3-8b", 16, None)))
    report = json.loads(run_cli_in_process("report", str(cpu_trace), "--json").stdout)["steps"]
    assert [p["phase"] for p in report["phases"]] == ["prefill", "decode"]
    assert all(sum(s[f"{c}_ns"] for c in CATEGORIES) == s["span_ns"] for s in report["steps"])


def test_a_cpu_only_trace_is_said_so_and_its_note_holds_the_steps(cpu_trace: Path, tmp_path: Path) -> None:
    done = run_cli_in_process("report", str(cpu_trace))
    assert "Time per record_function range" in done.stdout and "Time per NVTX range" not in done.stdout
    out = tmp_path / "cpu.md"
    done = run_cli_in_process("note", str(cpu_trace), "-o", str(out), "--title", "CPU steps", "--no-images")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "## 1. Where the tok/s went" in text and "| decode | 5 |" in text
    assert "None: a CPU-only trace" in text and "Occupancy" not in text and "What the identities say" not in text
