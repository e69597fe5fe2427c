"""``iotrace bench --engine … --profile [DIR]``: the runners' step ranges, the folder of traces and its manifest, the
profiler's cost, and the pinned model through iotrace, transformers, vLLM (CPU) and llama.cpp with the profiler on,
each trace read back with plain ``gzip`` + ``json``."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from iotrace.engines.launch import RUNNER, EngineSpec, interpreter
from iotrace.errors import InvalidValueError
from tests.conftest import run_cli_in_process, union_ns


def _runner_module(name: str):
    """A module of the standalone runner (they import each other as top-level modules, as main.py runs them); vLLM
    itself is imported only inside engine_vllm's run()."""
    import importlib

    sys.path.insert(0, str(RUNNER.parent))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(RUNNER.parent))


engine_common = _runner_module("engine_common")
engine_vllm = _runner_module("engine_vllm")

GEN = 4
#: The step range's format, written out here from the brief (not imported from the runner it checks).
STEP = re.compile(r"^iotrace/step (prefill|decode|mixed) requests=(\d+) tokens=(\d+) context=(\d+)$")
VLLM_STEP = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")


def test_a_step_range_is_named_in_the_format_the_trace_reader_parses() -> None:
    from iotrace.trace.reports.steps import IOTRACE_STEP

    name = engine_common.step_range_name("prefill", 1, 5, 5)
    assert name == "iotrace/step prefill requests=1 tokens=5 context=5"
    assert engine_common.STEP_RANGE == "iotrace/step" and STEP.match(name) and IOTRACE_STEP.match(name)
    assert IOTRACE_STEP.match(engine_common.step_range_name("mixed", 3, 12, 40))
    with pytest.raises(ValueError, match="step phase 'verify' is not one of prefill, decode, mixed"):
        engine_common.step_range_name("verify", 1, 1, 1)


def test_step_ranges_are_entered_only_while_a_profiler_records() -> None:
    steps = engine_common.StepRanges(torch)
    with steps("decode", 1, 1, 6):  # no profiler: nothing entered, nothing counted
        pass
    assert steps.run() == {"prefill": 0, "decode": 0}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with steps("prefill", 1, 5, 5):
            torch.ones(2) + 1
        with steps("decode", 1, 1, 6):
            torch.ones(2) + 1
    names = [e.name for e in prof.events() if e.name.startswith("iotrace/step")]
    assert names == ["iotrace/step prefill requests=1 tokens=5 context=5",
                     "iotrace/step decode requests=1 tokens=1 context=6"]
    assert steps.run() == {"prefill": 1, "decode": 1}
    steps.reset()
    assert steps.run() == {"prefill": 0, "decode": 0}


def test_vllm_steps_are_named_by_the_schedulers_rule() -> None:
    plan = engine_vllm._next_step({"a": 0, "b": 0}, prompt=5, budget=2048)
    assert plan == {"a": 5, "b": 5}
    assert engine_vllm._step_label(plan, {"a": 0, "b": 0}, 5) == ("prefill", 2, 10, 5)
    decode = {"a": 6, "b": 6}  # both prefilled and one token decoded: the next step decodes one token each
    assert engine_vllm._step_label(engine_vllm._next_step(decode, 5, 2048), decode, 5) == ("decode", 2, 2, 7)
    # A prompt longer than the step's token budget is chunked, after the running requests' decode tokens.
    live = {"a": 300, "b": 0}
    plan = engine_vllm._next_step(live, prompt=300, budget=256)
    assert plan == {"a": 1, "b": 255}
    assert engine_vllm._step_label(plan, live, 300) == ("mixed", 2, 256, 301)


def test_the_profilers_cost_and_the_result_it_makes() -> None:
    from iotrace.engines.profiling import profile_cost

    timed = [engine_common.Rep(0.1, [0.1, 0.1]), engine_common.Rep(0.1, [0.2, 0.2])]  # 10 and 5 tok/s
    profiled = [engine_common.Rep(0.1, [0.125, 0.125, 0.125, 0.125])]  # 8 tok/s
    assert engine_common.decode_tok_s(timed) == pytest.approx(7.5)
    steps = engine_common.StepRanges(torch)
    result = engine_common.profile_result("/x/vllm.pt.trace.json.gz", timed, profiled, steps, "torch")
    assert (result["reps"], result["decode_tok_s_profiled"]) == (engine_common.PROFILED_REPS, pytest.approx(8.0))
    cost = profile_cost(result)
    assert cost["change_pct"] == pytest.approx(100 * (8.0 / 7.5 - 1)) and cost["noise_pct"] is None
    # against the timed steps (0.1, 0.1, 0.2, 0.2 s: mean 0.15, variance 0.01/3) the profiled ones (0.125 s each) are
    # within two standard errors of the difference of the means: 2 * sqrt(0.01/3/4 + 0) = 0.0577 s, 38% of 0.15 s
    cost = profile_cost(result, [r.to_dict() for r in timed])
    assert cost["noise_pct"] == pytest.approx(100 * 2 * (0.01 / 3 / 4) ** 0.5 / 0.15) and cost["within_noise"]
    assert profile_cost({"skipped": "no torch"}) is None


@pytest.mark.parametrize(("args", "message"), [
    (("--profile", "{file}"), "--profile {file} is a file, not a folder"),
    (("--profile", "{file}/sub"), "--profile {file}/sub: cannot write there (Not a directory)"),
])
def test_a_profile_folder_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                                                       message: str) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    done = run_cli_in_process("bench", "--engine", "transformers", *(a.format(file=file) for a in args))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("iotrace: error: ") and message.format(file=file) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_profile_needs_engines_and_is_documented_in_help() -> None:
    done = run_cli_in_process("bench", "--profile", "--gen-tokens", "2")
    assert done.returncode == 2
    assert done.stderr.strip() == ("iotrace: error: --profile records the engines' traces: it needs --engine — add "
                                   "--engine iotrace (iotrace's own decoder) or the engines to trace")
    helped = run_cli_in_process("bench", "--help")
    assert helped.returncode == 0 and "--profile [DIR]" in helped.stdout
    assert "iotrace-profile-<timestamp>" in " ".join(helped.stdout.split())


def test_the_default_profile_folder_is_new_and_timestamped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from iotrace.cli.bench_engines import profile_folder

    monkeypatch.chdir(tmp_path)
    assert profile_folder(None) is None
    folder = profile_folder("")
    assert folder.is_dir() and folder.parent == tmp_path and re.fullmatch(r"iotrace-profile-\d{8}-\d{6}", folder.name)
    with pytest.raises(InvalidValueError):
        profile_folder(str(tmp_path / "nope" / "\0"))


def test_an_engine_trace_the_reader_refuses_or_finds_no_step_in_keeps_the_bench_figures(tmp_path: Path) -> None:
    """The row's waterfall is one error line for a file the reader refuses, None for a trace without steps: the bench's
    own figures stand either way."""
    from iotrace.cli.bench_engines import engine_waterfall

    broken = tmp_path / "vllm.pt.trace.json.gz"
    broken.write_bytes(b"not a trace")
    refused = engine_waterfall(broken)
    assert set(refused) == {"error"} and str(broken) in refused["error"] and "\n" not in refused["error"]
    plain = tmp_path / "plain.pt.trace.json"
    plain.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2,
                                                  "pid": 1, "tid": 1}]}))
    assert engine_waterfall(plain) is None


def test_the_table_shows_each_traces_cost_and_its_waterfall() -> None:
    from iotrace.render.engines import engines_text

    row = {"engine": "vllm", "ok": True, "device": "cpu", "weights": {"format": "fp32 (dequantised)"},
           "walls": {"bytes_per_step": 5.4e8, "here": {"tok_s": 30.0, "fraction": 0.25}, "card": None},
           "decode_tok_s": {"mean": 7.5, "stddev": 0.1}, "prefill_tok_s": {"mean": 50.0, "stddev": 1.0},
           "ttft_ms": {"mean": 100.0, "stddev": 1.0}, "itl_ms": {"p50": 130.0, "p90": 140.0, "p99": 150.0},
           "agreement": None, "build": {"engine": "vllm"}, "timing": {}, "tokens_stable": True, "load_s": 1.0,
           "rerun": "echo", "python": "python",
           "environment": {"python": "python", "python_version": "3.11", "distributions": 1, "freeze_sha256": "0" * 64},
           "profile": {"trace": "/p/vllm.pt.trace.json.gz", "reps": 1, "steps_run": {"prefill": 1, "decode": 4},
                       "cost": {"decode_tok_s_unprofiled": 7.5, "decode_tok_s_profiled": 6.0, "change_pct": -20.0,
                                "noise_pct": 8.4, "within_noise": False}},
           "waterfall": {"categories": {"idle": "Python and framework time outside any op", "gemm": "GEMM",
                                        "host_between": "host between steps", "elementwise": "norm"},
                         "phases": [{"phase": "decode", "pct_of_wall": 24.6, "span_ns": 1000, "gemm_floor_pct": 80.0,
                                     "categories_ns": {"gemm": 500, "idle": 300, "host_between": 150,
                                                      "elementwise": 50}}]}}
    skipped = {**row, "engine": "llama.cpp", "waterfall": None, "profile": {"skipped": "llama.cpp runs ggml"}}
    data = {"labels": [], "model": {"name": "m", "file_type": "Q4_1", "params": 1.3e8},
            "prompt": {"tokens": 5, "source": "x"}, "work": {"gen_tokens": 4, "reps": 3, "threads": 2},
            "bandwidth_gbs": {"cpu": 16.0}, "reference": {"ok": True}, "engines": [row, skipped],
            "profile": {"folder": "/p", "manifest": "/p/manifest.json"}}
    text = engines_text(data)
    assert ("  vllm: /p/vllm.pt.trace.json.gz · profiler cost: decode 7.5 tok/s without, 6.0 with (-20%, noise ±8%); 1 "
            "profiled repetition(s) after 3 without · steps run: prefill 1, decode 4") in text
    assert "  llama.cpp: no trace: llama.cpp runs ggml" in text
    head, vllm_line = [line for line in text.splitlines() if line.startswith(("engine ", "vllm "))][:2]
    assert head.rstrip().endswith("trace % of wall  largest gaps (decode)")
    # the GEMMs' 500 ns at 80% of their floor leave a gap of 100 ns (10%): below the idle and host rows
    assert re.search(r"  25% +Python and framework time outside any op 30%, host between steps 15%$", vllm_line)
    row["waterfall"]["phases"][0]["gemm_floor_pct"] = 20.0  # now 400 ns of the GEMMs are beyond their floor
    vllm_line = next(line for line in engines_text(data).splitlines() if line.startswith("vllm "))
    assert re.search(r"  25% +GEMM 40%, Python and framework time outside any op 30%$", vllm_line)


# --- the pinned model through the engines, profiled (one run shared by the tests below) --------------------------


def _built(name: str) -> bool:
    return interpreter(EngineSpec(name)).exists()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One ``bench --engine … --profile DIR --gen-tokens 4 --reps 1 --json`` of every engine built here."""
    folder = tmp_path_factory.mktemp("profile")
    engines = ["iotrace", "transformers", *(n for n in ("vllm", "llama.cpp") if _built(n))]
    done = run_cli_in_process("bench", *(a for n in engines for a in ("--engine", n)), "--profile", str(folder),
                              "--gen-tokens", str(GEN), "--reps", "1", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), folder


def _row(data: dict, name: str) -> dict:
    if name in ("vllm", "llama.cpp") and not _built(name):
        pytest.skip(f"no {name} engine venv at {interpreter(EngineSpec(name))}: `make engines` builds it (`make test` "
                    "does, unless ENGINES=0)")
    row = next(r for r in data["engines"] if r["engine"] == name)
    assert row["ok"], row["error"]
    return row


def _annotations(path: Path) -> list[dict]:
    """The trace's user annotations (record_function ranges), in time order, read with plain gzip + json."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"),
                  key=lambda e: e["ts"])


slow_engines = pytest.mark.slow  # real engine runs: ~2.5 min for the four on two loaded cores (vLLM loads in 35-55 s)


@slow_engines
@pytest.mark.parametrize("name", ["iotrace", "transformers", "vllm"])
def test_each_traced_engine_writes_one_range_per_step_it_ran(profiled: tuple[dict, Path], name: str) -> None:
    data, folder = profiled
    row = _row(data, name)
    prompt = data["prompt"]["tokens"]
    profile = row["profile"]
    trace = folder / f"{name}.pt.trace.json.gz"
    assert profile["trace"] == str(trace) and trace.is_file()
    ranges = [e for e in _annotations(trace) if e["name"].startswith("iotrace/step ")]
    parsed = [STEP.match(e["name"]).groups() for e in ranges]
    # one profiled repetition: the prefill, then GEN decode steps, the context growing by one a step
    assert parsed == [("prefill", "1", str(prompt), str(prompt)),
                      *[("decode", "1", "1", str(prompt + k)) for k in range(1, GEN + 1)]]
    assert profile["steps_run"] == {"prefill": 1, "decode": GEN} and profile["reps"] == 1
    cost = profile["cost"]
    assert cost["decode_tok_s_unprofiled"] > 0 and cost["decode_tok_s_profiled"] > 0
    assert cost["decode_tok_s_unprofiled"] == pytest.approx(row["decode_tok_s"]["mean"])
    assert cost["change_pct"] == pytest.approx(100 * (cost["decode_tok_s_profiled"] / cost["decode_tok_s_unprofiled"]
                                                      - 1))
    # the profiled repetition made the same tokens as the timed one
    assert row["tokens_stable"]
    # and the trace reader finds the steps the runner ran (vLLM's: from its own annotations, which win)
    from iotrace.trace.loader import load
    from iotrace.trace.reports.steps import find_steps

    found = find_steps(load(trace))
    assert found is not None and found.phases() == profile["steps_run"]


@slow_engines
def test_vllms_own_step_annotations_lie_inside_the_runners_ranges(profiled: tuple[dict, Path]) -> None:
    data, folder = profiled
    _row(data, "vllm")
    prompt = data["prompt"]["tokens"]
    events = _annotations(folder / "vllm.pt.trace.json.gz")
    ours = [e for e in events if e["name"].startswith("iotrace/step ")]
    theirs = [e for e in events if VLLM_STEP.match(e["name"])]
    assert [e["name"] for e in theirs] == [f"execute_context_1({prompt})_generation_0(0)",
                                          *["execute_context_0(0)_generation_1(1)"] * GEN]
    for mine, vllm in zip(ours, theirs, strict=True):  # each engine step inside the runner's range around step()
        assert mine["ts"] <= vllm["ts"] and vllm["ts"] + vllm["dur"] <= mine["ts"] + mine["dur"]
    assert not list(folder.glob(".vllm-profile-*"))  # vLLM's own file names are gone: one trace, named by engine


@slow_engines
def test_the_manifest_beside_the_traces_holds_the_model_and_the_bandwidth(profiled: tuple[dict, Path]) -> None:
    from iotrace.model.gguf_file import open_gguf, pinned_gguf
    from iotrace.model.step_model import from_manifest

    data, folder = profiled
    manifest = json.loads((folder / "manifest.json").read_text())
    config = open_gguf(pinned_gguf()).config
    wall = manifest["wall"]
    assert (wall["params"], wall["layers"], wall["kv_heads"], wall["head_dim"]) == (
        config.params, config.layers, config.kv_heads, config.head_dim)
    assert (wall["bytes_per_weight"], wall["bits"], wall["kv_bytes_per_value"]) == (4.0, 32.0, 4)  # fp32 on a CPU
    assert wall["weight_bytes"] == pytest.approx(4 * config.params, rel=1e-3)
    assert wall["bandwidth_bytes_per_s"] == pytest.approx(data["bandwidth_gbs"]["cpu"] * 1e9) and \
        wall["bandwidth_bytes_per_s"] > 0
    assert manifest["argv"] and manifest["versions"]["torch"] and manifest["request"]["profile"] == str(folder)
    assert {"iotrace", "transformers"} <= set(manifest["engines"])
    assert manifest["engines"]["transformers"]["trace"] == "transformers.pt.trace.json.gz"
    model, bandwidth, _ = from_manifest(folder / "manifest.json")  # what `iotrace report TRACE` reads of it
    assert model.params == config.params and bandwidth == wall["bandwidth_bytes_per_s"]
    assert json.loads((folder / "bench-engines.json").read_text())["engines"][0]["engine"] == "iotrace"
    assert data["profile"] == {"folder": str(folder), "manifest": str(folder / "manifest.json")}


@slow_engines
def test_llama_cpp_says_in_one_line_why_it_has_no_trace(profiled: tuple[dict, Path]) -> None:
    data, folder = profiled
    row = _row(data, "llama.cpp")
    assert set(row["profile"]) == {"skipped", "cost"} and row["profile"]["cost"] is None
    assert "no torch profiler trace" in row["profile"]["skipped"] and "\n" not in row["profile"]["skipped"]
    assert not list(folder.glob("llama*"))


@slow_engines
@pytest.mark.parametrize("name", ["iotrace", "transformers", "vllm"])
def test_each_engines_waterfall_sums_to_its_steps_against_the_runs_own_wall(profiled: tuple[dict, Path],
                                                                             name: str) -> None:
    """Issue 43's checks on the real engines: the steps found are the steps run, every waterfall sums to its step, the
    matrix products' time is recomputed from the trace with plain json (the union of the outermost aten::linear/mm ops
    on the step's thread within its span), and % of wall uses the same run's copy-loop bandwidth."""
    from iotrace.trace.reports.step_roles import CATEGORIES

    data, folder = profiled
    row = _row(data, name)
    flow = row["waterfall"]
    assert flow is not None and "error" not in flow, flow
    assert {p["phase"]: p["steps"] for p in flow["phases"]} == row["profile"]["steps_run"]
    for step in flow["steps"]:
        assert sum(step[f"{c}_ns"] for c in CATEGORIES) == step["span_ns"]
    manifest = json.loads((folder / "manifest.json").read_text())
    wall = manifest["engines"][name]["wall"]
    assert flow["machine"]["bandwidth"] == pytest.approx(wall["bandwidth_bytes_per_s"])
    assert flow["machine"]["source"].startswith("copy loop in")
    decode = next(p for p in flow["phases"] if p["phase"] == "decode")
    floor_s = wall["bytes_per_weight"] * wall["params"] / wall["bandwidth_bytes_per_s"]
    spans = [s["span_ns"] for s in flow["steps"] if s["phase"] == "decode"]
    assert all(s["context"] for s in flow["steps"])  # vLLM's annotations state no context: the runner's ranges do
    kv = sum(2 * wall["layers"] * wall["kv_heads"] * wall["head_dim"] * s["context"] * wall["kv_bytes_per_value"]
             / wall["bandwidth_bytes_per_s"] for s in flow["steps"] if s["phase"] == "decode")
    assert decode["pct_of_wall"] == pytest.approx(100 * (len(spans) * floor_s + kv) / (sum(spans) / 1e9), rel=1e-6)
    assert 0 < decode["pct_of_wall"] < 100
    with gzip.open(folder / f"{name}.pt.trace.json.gz", "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    threads = {(s["process"], s["thread"]) for s in flow["steps"]}
    # The weight matrix products as each engine calls them: ATen's, vLLM CPU's oneDNN op (_C::onednn_mm); iotrace's
    # torch path names its attention (record_function iotrace/attention-*), whose matmuls are attention's.
    gemm_names = {"aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm", "_C::onednn_mm"}
    attention = [(e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000) for e in events
                 if (e.get("cat") == "user_annotation" and e["name"].startswith("iotrace/attention"))
                 or (e.get("cat") == "cpu_op" and "attention" in e["name"] and (e["pid"], e["tid"]) in threads)]
    # iotrace's torch path names its weight GEMMs too (iotrace/gemm, iotrace/gemm-decode): the range is the GEMM's.
    gemm_names |= {"iotrace/gemm", "iotrace/gemm-decode"}
    ops = sorted(((e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000, e["name"]) for e in events
                  if e.get("cat") in ("cpu_op", "user_annotation") and (e["pid"], e["tid"]) in threads),
                 key=lambda o: (o[0], -o[1]))
    outermost, end = [], -1.0
    for lo, hi, op in ops:  # an op inside a GEMM op is that GEMM's time, not another
        if lo >= end and op in gemm_names and not any(a <= lo and hi <= b for a, b in attention):
            outermost.append((lo, hi))
            end = hi
    for step in flow["steps"]:
        expected = union_ns(outermost, step["span_start_ns"], step["span_end_ns"])
        assert step["gemm_ns"] == pytest.approx(expected, rel=0.01, abs=2000), (name, step["step"])
