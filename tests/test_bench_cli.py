"""``iotrace bench`` as a user runs it: a real subprocess on the pinned model, and every bad input a one-line error.

The pinned model's figures here are CPU figures of the torch path, and the JSON says so. The other runs call the CLI
in this process (what they check is the command's output, not the process; the worker's imports are shared), but for
one bad request and `bench import` through a real subprocess too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from iotrace.cards import lookup
from tests.conftest import pinned_model, run_cli
from tests.conftest import run_cli_in_process as _in_process

gguf = pytest.importorskip("gguf", reason="the bench needs iotrace[model] (make setup installs it)")



def _error(result, *needles: str) -> None:
    """Exit 2 and one error line, after the progress lines of the phases that ran before it."""
    assert result.returncode == 2, result.stdout + result.stderr
    *progress, error = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and error.startswith("iotrace: error: "), result.stderr
    assert all(line.startswith("iotrace bench [") for line in progress), result.stderr
    for needle in needles:
        assert needle in error, error


@pytest.mark.slow
def test_pinned_model_bench_json_holds_every_figure() -> None:
    """A real subprocess into a pipe: stdout is the whole JSON, stderr a progress line per phase."""
    result = run_cli("bench", "--gen-tokens", "4", "--reps", "2", "--depth", "0,8", "--card", "rtx3090", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    # Not a spinner (which prints nothing into a pipe): one line per phase, in order, each with its start time.
    phases = [line.split("] ", 1)[1] for line in result.stderr.splitlines()]
    assert all(line.startswith("iotrace bench [") and " s] " in line for line in result.stderr.splitlines())
    assert phases == ["loading: reading SmolLM2-135M-Instruct.Q4_1.gguf (metadata and tensor index)",
                      "loading: the tokenizer", "loading: dequantising Q4_1+Q8_0 to fp32",
                      "measuring the CPU memory bandwidth with a copy loop",
                      "depth 0: warm-up", "depth 0: repetition 1 of 2", "depth 0: repetition 2 of 2",
                      "depth 0: one decode step taken apart (the breakdown)",
                      "depth 8: warm-up", "depth 8: repetition 1 of 2", "depth 8: repetition 2 of 2",
                      "the manifest (versions, git, clocks)", "done"]
    # What the model said: the shipped prompt tokenised by the GGUF's own vocabulary, and its greedy continuation
    # (" Paris." is what transformers' LlamaForCausalLM says on the same weights: tests/test_model_decoder.py).
    assert data["prompt"]["ids"] == [504, 3575, 282, 4649, 314]
    assert data["generated"]["ids"][0][:2] == [7042, 30] and len(data["generated"]["ids"][0]) == 5
    assert data["generated"]["text"][0].startswith(" Paris.")
    assert data["device"].startswith("cpu") and data["labels"][0].startswith("CPU figures of the torch path")
    assert [d["depth"] for d in data["decode"]] == [0, 8]
    assert [d["context_start"] for d in data["decode"]] == [5, 13]
    for d in data["decode"]:
        rate = d["decode_tok_s"]
        assert rate["mean"] > 0 and len(rate["values"]) == 2
        assert d["itl_ms"]["p50"] <= d["itl_ms"]["p90"] <= d["itl_ms"]["p99"]
        own, card = d["walls"]
        assert d["decode_wall"] == own and own["bandwidth_source"] == "measured copy (this run, CPU)"
        # Identity 1 by hand at fp32, the run's dtype: the weights plus the KV read (2 · L · n_kv · d_h · 4 bytes a
        # token) at the mean context of the timed steps, over the CPU's copy bandwidth measured in the run.
        kv = 2 * 30 * 3 * 64 * 4 * (d["context_start"] + 2)
        assert d["bytes_per_step"] == own["bytes_per_step"] == pytest.approx(data["model"]["weight_bytes"] + kv)
        assert own["bandwidth_gbs"] > 0 and own["dtype"] == "fp32"
        assert own["tok_s"] == pytest.approx(own["bandwidth_gbs"] * 1e9 / d["bytes_per_step"], rel=1e-9)
        assert own["fraction"] == pytest.approx(rate["mean"] / own["tok_s"]) and own["no_fraction"] is None
        # The RTX 3090's wall at bf16 (what it would run, not the CPU's fp32): 936 GB/s over half the bytes.
        assert card["bandwidth_source"] == "CardBook rtx3090" and card["dtype"] == "bf16"
        assert card["weight_bytes"] == data["model"]["weight_bytes"] / 2
        assert card["tok_s"] == pytest.approx(936e9 / (data["model"]["weight_bytes"] / 2 + kv / 2), rel=1e-9)
        assert card["fraction"] is None and card["no_fraction"] == "a CPU run is not a fraction of a GPU's wall"
    pre = data["prefill"]
    assert pre["tok_s"]["mean"] > 0 and pre["ttft_ms"]["mean"] > 0
    # Identity 2 by hand: the RTX 3090's dense bf16 tensor peak (CardBook: 71 TFLOP/s with fp32 accumulate) over
    # 2 · N; no fraction of it from a CPU.
    peak = lookup("rtx3090").peak_tflops["bf16_tensor"]
    assert pre["prefill_wall"]["precision"] == "bf16_tensor" and peak == 71
    assert pre["prefill_wall"]["tok_s"] == pytest.approx(peak * 1e12 / (2 * data["model"]["params"]), rel=1e-9)
    assert pre["prefill_wall"]["fraction"] is None and "not a fraction" in pre["prefill_wall"]["no_fraction"]
    assert data["memory"]["peak_allocated_bytes"] is None and "no GPU" in data["memory"]["note"]
    breakdown = data["breakdown"]
    launches = {row["kernel"]: row["launches"] for row in breakdown["kernels"]}
    # The first norm, then per layer QKV, RoPE, attention, O, add+norm, gate/up (SwiGLU fused), down, add+norm (the
    # last one the final norm); and the LM head.
    assert launches == {"rmsnorm": 61, "gemm-decode": 121, "rope": 30, "attention-decode": 30}
    assert breakdown["floor_sum_us"] > 0 and breakdown["card"] == "rtx3090" and breakdown["floor_dtype"] == "bf16"
    assert breakdown["gap_us"] is None  # a CPU step less a GPU's floors is no gap
    assert data["manifest"]["argv"][-1] == "--json" and data["manifest"]["versions"]["torch"]


@pytest.mark.slow
def test_random_weights_jsonl_and_markdown(tmp_path: Path) -> None:
    args = ("bench", "--random-weights", "smollm2-135m", "--prompt-tokens", "6", "--gen-tokens", "2", "--reps", "1")
    lines = _in_process(*args, "--depth", "0,4", "--jsonl")
    assert lines.returncode == 0, lines.stderr
    rows = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [r["depth"] for r in rows] == [0, 4] and all(r["model"]["quality"] == "n/a (random weights)" for r in rows)
    markdown = _in_process(*args, "--markdown")
    assert markdown.returncode == 0, markdown.stderr
    head, rule, row = markdown.stdout.strip().splitlines()
    assert head.startswith("| card | device | model |") and rule.startswith("|---|")
    assert row.count("|") == head.count("|") and "random" in row
    assert "± n/a" in row and "± 0.0" not in row  # one repetition has no spread


def test_one_repetition_has_no_spread() -> None:
    """``--reps 1``: the ± of a figure is n/a (a sample standard deviation needs two values), not 0.0, in the bench's
    table and in the engine comparison's; two repetitions print theirs."""
    from dataclasses import asdict

    from iotrace.model.measure import Spread
    from iotrace.render import bench, engines

    for pm in (bench._pm, engines._pm):
        assert pm(asdict(Spread.of([41.26]))) == "41.3 ± n/a"
        assert pm(asdict(Spread.of([40.0, 42.0]))) == "41.0 ± 1.4"


@pytest.mark.slow
def test_sampling_is_seeded() -> None:
    args = ("bench", "--random-weights", "smollm2-135m", "--prompt-tokens", "4", "--gen-tokens", "6", "--reps", "1",
            "--temperature", "1.0", "--json")
    runs = [json.loads(_in_process(*args, "--seed", seed).stdout)["generated"]["ids"][0] for seed in ("1", "1", "2")]
    assert runs[0] == runs[1] != runs[2] and all(0 <= t < 49152 for t in runs[0]) and len(runs[0]) == 7


def _gguf_of_architecture(path: Path, arch: str) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", __import__("numpy").zeros((4, 8), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(("make", "needles"), [
    (lambda tmp: tmp / "missing.gguf", ("no GGUF file at", "missing.gguf")),
    (lambda tmp: _gguf_of_architecture(tmp / "gpt2.gguf", "gpt2"), ("holds a 'gpt2' model", "Llama")),
    (lambda tmp: (tmp / "text.gguf").write_text("{}") and tmp / "text.gguf", ("is not a readable GGUF file",)),
])
def test_bad_gguf_files_are_one_line_errors(tmp_path: Path, make, needles) -> None:
    path = make(tmp_path)
    _error(_in_process("bench", "--gguf", str(path)), str(path.name), *needles)


def test_a_truncated_gguf_is_refused_before_loading(tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    with pinned_model().open("rb") as src:
        cut.write_bytes(src.read(40_000_000))  # the header and the first tensors, not the rest
    _error(_in_process("bench", "--gguf", str(cut)), "cut.gguf", "truncated")


@pytest.mark.parametrize(("args", "needles"), [
    (("--random-weights", "llama-3-70b"), ("exceeds 90% of the", "GB of available host memory", "--depth")),
    (("--random-weights", "llama-3-8b", "--prompt", "hi"), ("random weights have no tokenizer", "--prompt-tokens")),
    (("--random-weights", "llama-9"), ("llama-9",)),
    (("--model", "gpt-4"), ("is not the pinned model",)),
    (("--kv", "int8"), ("--kv int8 is not wired into the timed model bench", "iotrace quant --kv")),
    (("--dtype", "fp32", "--kv", "fp16"), ("--kv fp16 with --dtype fp32",)),
    (("--depth", "-3"), ("depth",)),
    (("--gen-tokens", "0"), ("--gen-tokens",)),
    (("--temperature", "-1"), ("temperature", ">= 0")),
])
def test_bad_requests_are_one_line_errors(args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    run = run_cli if args == ("--random-weights", "llama-9") else _in_process  # one through a real process
    _error(run("bench", *args), *needles)


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_is_refused() -> None:
    pinned_model()
    _error(_in_process("bench", "--prompt-tokens", "9000"), "9000", "context of 8192")


@pytest.mark.parametrize("prompt", ["", "  "])
def test_an_empty_prompt_is_refused_before_the_model_loads(prompt: str) -> None:
    """``--prompt ""`` failed after 32 s (the model and its tokenizer loaded, then "the prompt encodes to no
    tokens"): now one line naming the flag and what to do, exit 2, before torch is imported."""
    started = time.monotonic()
    done = run_cli("bench", "--prompt", prompt)
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr == (f"iotrace: error: --prompt {prompt!r} is empty — give the prompt text, leave --prompt out "
                           "for the shipped prompt, or pass --prompt-tokens N\n")
    assert elapsed < 20, f"{elapsed:.1f} s"  # a hang guard, not a speed check: it takes a fraction of a second


def test_a_prompt_file_that_is_missing_or_empty(tmp_path: Path) -> None:
    _error(_in_process("bench", "--prompt-file", str(tmp_path / "nope.txt")), "nope.txt")
    (tmp_path / "empty.txt").write_text("  \n")
    _error(_in_process("bench", "--prompt-file", str(tmp_path / "empty.txt")), "empty.txt", "is empty")


def test_nvml_refusing_is_a_clear_error() -> None:
    """On a machine without an NVIDIA driver, NVML (the real library) refuses; the bench says so in one line."""
    import torch

    from iotrace.model.power import NvmlUnavailableError, PowerMeter

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: NVML works")
    with pytest.raises(NvmlUnavailableError, match="--no-power"):
        PowerMeter(0)


def test_bench_import_of_another_tools_file_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [], "schemaVersion": 1}))
    _error(_in_process("bench", "import", str(trace)), "trace.json")


def test_bench_import_reads_llama_bench_json() -> None:
    fixture = Path(__file__).parent / "data" / "bench_import" / "llama_bench_readme_b5163.json"
    result = run_cli("bench", "import", str(fixture), "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows and all(r["engine"] == "llama.cpp" for r in rows)
    table = _in_process("bench", "import", str(fixture), "--wide")
    assert table.returncode == 0 and "Qwen2.5-7B-Instruct-Q4_K_M.gguf" in table.stdout
