"""Engines side by side (``iotrace bench --engine``): the request protocol, agreement, bad inputs, and the pinned
model through iotrace, transformers, vLLM (CPU) and llama.cpp (CPU), each in its own venv (``make engines``)."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from pathlib import Path

import pytest

from iotrace.engines.compare import NEAR_TIE_LOGITS, QUANTISED_ACTIVATIONS, agreement, engine_figures
from iotrace.engines.launch import EngineSpec, engines_dir, interpreter, parse_engine, run_engine
from iotrace.errors import InvalidValueError
from tests.conftest import run_cli, run_cli_in_process

#: The prompt of the agreement check: SmolLM2's chat turn, on which greedy decoding is confident (the shipped default
#: prompt's 5 tokens leave near-ties within a few steps, where llama.cpp's 8-bit activations legitimately differ).
CHAT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def _venv(name: str) -> Path:
    python = interpreter(EngineSpec(name))
    if not python.exists():
        pytest.skip(f"no {name} engine venv at {python}: `make engines` builds it (`make test` does, unless ENGINES=0)")
    return python


def _gguf() -> Path:
    from iotrace.model.gguf_file import pinned_gguf

    return pinned_gguf()


def _request(**extra) -> dict:
    return {"gguf": str(_gguf()), "prompt_ids": [1, 504, 3458, 314, 260], "gen_tokens": 2, "reps": 1, **extra}


def test_engine_names_and_interpreters_are_parsed() -> None:
    assert parse_engine("vllm") == EngineSpec("vllm")
    assert parse_engine("llama-cpp") == EngineSpec("llama.cpp")
    assert parse_engine("LLAMA.CPP=/opt/venv/bin/python") == EngineSpec("llama.cpp", Path("/opt/venv/bin/python"))
    assert interpreter(EngineSpec("transformers")) == Path(sys.executable)
    assert interpreter(EngineSpec("vllm")) == engines_dir() / "vllm" / "bin" / "python"
    with pytest.raises(InvalidValueError, match=r"unknown engine 'sglang'.*use one of iotrace, transformers, vllm"):
        parse_engine("sglang")
    with pytest.raises(InvalidValueError, match="names no interpreter after '='"):
        parse_engine("vllm=")


def test_agreement_reads_the_divergence_against_the_margins_before_it() -> None:
    ref = [5, 6, 7, 8]
    # [id1, logit1, id2, logit2] per position; margins 2.0, 1.0, 0.3, 0.04
    ref_top2 = [[5, 10.0, 9, 8.0], [6, 9.0, 1, 8.0], [7, 5.0, 3, 4.7], [8, 4.0, 2, 3.96]]
    assert agreement(ref, ref, ref_top2, ref_top2)["verdict"] == "identical"
    near = agreement([5, 6, 7, 2], ref, ref_top2, ref_top2)
    assert (near["identical_prefix"], near["diverged_at"], near["margin"]) == (3, 3, pytest.approx(0.04))
    assert near["verdict"].startswith(f"diverged at a near-tie (margin 0.040 <= {NEAR_TIE_LOGITS}")
    # The engine's own margins differed from the reference's by 2.0-1.6 = 0.4 and 1.0-0.9 = 0.1 before position 2,
    # so a divergence at a margin of 0.3 is within what its arithmetic moved: not a bug.
    own = [[5, 10.0, 9, 8.4], [6, 9.0, 1, 8.1], [3, 4.9, 7, 4.8]]
    within = agreement([5, 6, 3, 8], ref, ref_top2, own)
    assert within["spread_before"] == pytest.approx(0.4)
    assert "within the 0.400" in within["verdict"] and "not a bug" in within["verdict"]
    tight = [[5, 10.0, 9, 8.05], [6, 9.0, 1, 8.0]]  # spread 0.05: a 0.3 margin is beyond it
    beyond = agreement([5, 6, 3, 8], ref, ref_top2, tight)["verdict"]
    assert beyond.endswith("(0.050) with the reference's own weights and dtype: not a tie, a bug to find"), beyond
    # The same divergence from an engine whose arithmetic differs (llama.cpp's 8-bit activations) is named, not a bug:
    # the two positions before it sample that arithmetic too thinly to call a 0.3-logit margin impossible.
    quantised = agreement([5, 6, 3, 8], ref, ref_top2, tight, QUANTISED_ACTIVATIONS)
    assert "beyond the spread measured before it (0.050 over 2 positions) but not a bug" in quantised["verdict"]
    assert "quantised to 8 bits" in quantised["verdict"] and "a bug to find" not in quantised["verdict"]
    from iotrace.render.engines import _agreement

    assert _agreement({"agreement": quantised}) == "same 2/4, then beyond spread, 8-bit activations (margin 0.300)"
    assert _agreement({"agreement": agreement([5, 6, 3, 8], ref, ref_top2, tight)}).endswith("NOT a tie (margin 0.300)")
    assert _agreement({"agreement": within}).endswith("within spread 0.400 (margin 0.300)")
    assert agreement([5, 6, 7], ref, ref_top2, ref_top2)["diverged_at"] == 3  # shorter: diverges where it ends


def test_a_run_on_a_busy_machine_says_so() -> None:
    """Issue 46: llama.cpp at 3.8 tok/s for a 135M model on a loaded machine gave no hint. The one-minute load average
    before the run (proc(5)) against the cores says whether other work competed."""
    from iotrace.engines.machine_load import MachineLoad, machine_load

    busy = MachineLoad(1.5, 2)
    assert busy.busy and busy.label().startswith("the machine was busy before this run: load average 1.50 on 2 cores")
    assert busy.to_dict() == {"load_1min": 1.5, "cores": 2, "busy": True}
    assert MachineLoad(0.99, 2).label() is None and MachineLoad(1.0, 2).busy  # from half the cores
    assert MachineLoad(None, 2).label() is None  # no load average on this platform: nothing is claimed
    here = machine_load()
    assert here.cores == os.cpu_count() and here.load_1min == pytest.approx(os.getloadavg()[0], abs=2.0)


@pytest.mark.parametrize(("omp", "threads"), [("1", 1), ("3", 3), (" 2 ", 2), ("0", None), ("", None), ("four", None),
                                              (None, None)])
def test_engines_get_omp_num_threads_where_it_is_set_else_every_core(omp: str | None, threads: int | None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes that each take every core oversubscribe them: iotrace's engine took 22 s for 4 tokens inside
    the suite (each xdist worker runs with OMP_NUM_THREADS=1) against 3 s alone."""
    from iotrace.engines.builtins import llama_cpp_argv
    from iotrace.engines.engine_def import ServeArgs
    from iotrace.engines.machine_load import engine_threads

    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    expected = threads or os.cpu_count()
    assert engine_threads() == expected
    argv = llama_cpp_argv(ServeArgs(python=Path(sys.executable), gguf=Path("m.gguf"), model_dir=None, port=1))
    assert argv[argv.index("--n_threads") + 1] == str(expected)
    # the prompt's threads too: llama-cpp-python's server gives them every core by default (a 32-token prefill took
    # 2-15 s with OMP_NUM_THREADS=1 on two busy cores, 0.1 s with one thread)
    assert argv[argv.index("--n_threads_batch") + 1] == str(expected)


def test_figures_come_from_llama_cpp_counters_where_present_else_the_runner_clock() -> None:
    clock = {"reps": [{"prefill_s": 0.5, "step_s": [0.1, 0.3], "counters": {}},
                      {"prefill_s": 0.25, "step_s": [0.2, 0.2], "counters": {}}], "timing": {"decode": "runner"}}
    f = engine_figures(clock, prompt_tokens=10)
    assert list(f["prefill_tok_s"]["values"]) == [20.0, 40.0]
    assert list(f["decode_tok_s"]["values"]) == [pytest.approx(5.0), pytest.approx(5.0)]
    assert f["ttft_ms"]["mean"] == pytest.approx(375.0)
    # ITL over the 4 steps [100, 300, 200, 200] ms, linear interpolation between closest ranks
    assert f["itl_ms"] == {"p50": pytest.approx(200.0), "p90": pytest.approx(270.0), "p99": pytest.approx(297.0)}
    counted = {"reps": [{"prefill_s": 0.5, "step_s": [0.1, 0.3],
                         "counters": {"t_p_eval_ms": 50.0, "n_p_eval": 10, "t_eval_ms": 250.0, "n_eval": 2}}]}
    g = engine_figures(counted, prompt_tokens=10)
    assert (g["prefill_tok_s"]["mean"], g["decode_tok_s"]["mean"]) == (200.0, 8.0)


def test_a_missing_interpreter_one_without_the_engine_and_a_crash_are_one_line_each(tmp_path: Path) -> None:
    missing = run_engine(EngineSpec("vllm", tmp_path / "nowhere" / "python"), _request())
    assert missing.error == (f"the interpreter {tmp_path / 'nowhere' / 'python'} does not exist: pass "
                             "--engine vllm=PATH to an existing python")
    # iotrace's own interpreter holds no vLLM: the runner's import fails in the child and says so.
    without = run_engine(EngineSpec("vllm", Path(sys.executable)), _request(hf_folder=str(tmp_path)))
    assert without.error.startswith("import: this interpreter cannot import vllm (ModuleNotFoundError")
    # An interpreter that dies of a signal mid-run (after reading its request, as a native crash would).
    crasher = tmp_path / "python"
    crasher.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import os, signal, sys; sys.stdin.read(); "
                       "print(\"loading the model\", file=sys.stderr, flush=True); os.kill(os.getpid(), "
                       "signal.SIGSEGV)' \"$@\"\n")
    crasher.chmod(crasher.stat().st_mode | stat.S_IXUSR)
    crashed = run_engine(EngineSpec("llama.cpp", crasher), _request())
    assert crashed.error == "crashed (SIGSEGV) before its result; its last words: loading the model"


def test_a_model_the_engine_cannot_read_is_the_engines_load_error(tmp_path: Path) -> None:
    python = _venv("llama.cpp")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(_gguf().read_bytes()[: 1 << 20])
    run = run_engine(EngineSpec("llama.cpp", python), _request(gguf=str(truncated)))
    assert run.error.startswith(f"load: llama.cpp cannot load {truncated}: ValueError")


@pytest.mark.parametrize(("args", "message"), [
    (("--engine", "sglang"), "argument --engine: --engine 'sglang': unknown engine 'sglang'"),
    (("--engine", "vllm", "--engine", "llama.cpp", "--concurrency", "2"),
     "--concurrency 2 with llama.cpp: only vllm takes concurrent requests here"),
    (("--engine", "vllm", "--engine", "vllm"), "--engine names one engine twice (vllm, vllm)"),
    (("--engine", "llama.cpp", "--spec", "ngram"), "--spec with --engine: the engine comparison runs plain greedy"),
    (("--engine", "llama.cpp", "--depth", "8"), "--batch, --depth and --temperature with --engine"),
])
def test_options_an_engine_comparison_cannot_take_are_refused(args: tuple[str, ...], message: str) -> None:
    done = run_cli_in_process("bench", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("iotrace: error: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_failed_engine_is_one_line_and_exit_2_with_the_others_printed() -> None:
    """Also the reference run, which compare makes when transformers is not among the engines: its tokens and margins
    only, one generation without a warm-up."""
    _venv("llama.cpp")
    # An interpreter that exists but holds no vLLM (this one): the engine fails in its child, after llama.cpp ran. (A
    # missing interpreter is refused before any engine runs: the next test.)
    python = sys.executable
    done = run_cli_in_process("bench", "--engine", "llama.cpp", "--engine", f"vllm={python}", "--gen-tokens", "3",
                              "--reps", "1", "--json")
    assert done.returncode == 2
    data = json.loads(done.stdout)  # the result is whole JSON on stdout, the failure on stderr
    rows = {row["engine"]: row for row in data["engines"]}
    assert rows["llama.cpp"]["ok"] and rows["llama.cpp"]["decode_tok_s"]["mean"] > 0
    assert not rows["vllm"]["ok"] and rows["vllm"]["error"].startswith("import: this interpreter cannot import vllm")
    errors = [line for line in done.stderr.splitlines() if line.startswith("iotrace: error:")]
    assert errors == [f"iotrace: error: engine vllm ({python}): {rows['vllm']['error']}"]
    assert re.search(r"^iotrace bench --engine \[ *[\d.]+ s\] llama.cpp: loading and running", done.stderr, re.M)
    reference = data["reference"]
    assert reference["ok"] and len(reference["tokens"]) == 4 and len(reference["top2"]) == 4
    assert rows["llama.cpp"]["agreement"]["of"] == 4
    assert "transformers: the reference tokens and logit margins" in done.stderr


@pytest.mark.parametrize(("given", "says"), [
    ("/nope/python", "the interpreter /nope/python does not exist — pass --engine vllm=PATH to an existing python"),
    ("/", "the interpreter / is a folder — pass --engine vllm=PATH to a python executable (a venv's bin/python)"),
    (__file__, f"the interpreter {__file__} is not executable — pass --engine vllm=PATH to a python executable"),
], ids=["missing", "a-folder", "not-executable"])
def test_an_interpreter_that_cannot_start_is_refused_before_any_engine_runs(given: str, says: str) -> None:
    """``--engine vllm=/nope/python`` failed after 56 s (the model converted, the tokenizer loaded, the other engines
    run): now one line naming the engine, the path and what to do, exit 2, before any of that."""
    started = time.monotonic()
    done = run_cli("bench", "--engine", f"vllm={given}", "--gen-tokens", "2", "--reps", "1")
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"iotrace: error: --engine vllm={given}: {says}"), done.stderr
    assert done.stderr.count("\n") == 1
    assert elapsed < 20, f"{elapsed:.1f} s"  # a hang guard, not a speed check: it takes a fraction of a second


@pytest.mark.slow  # vLLM's CPU engine loads in 35-55 s on two cores; the four engines take about 90 s together
def test_the_pinned_model_through_four_engines_agrees_with_transformers() -> None:
    from gguf import GGUFReader

    from iotrace.model.gguf_file import open_gguf

    for name in ("vllm", "llama.cpp"):
        _venv(name)
    done = run_cli_in_process("bench", "--engine", "iotrace", "--engine", "transformers", "--engine", "vllm",
                              "--engine", "llama.cpp", "--prompt", CHAT, "--gen-tokens", "31", "--reps", "1",
                              "--card", "rtx4090", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    rows = {row["engine"]: row for row in data["engines"]}
    assert list(rows) == ["iotrace", "transformers", "vllm", "llama.cpp"]
    config = open_gguf(_gguf()).config
    stored = sum(int(t.n_bytes) for t in GGUFReader(str(_gguf())).tensors)  # the GGUF's tensors as stored
    cpu_gbs = data["bandwidth_gbs"]["cpu"]
    assert cpu_gbs > 0
    for name, row in rows.items():
        assert row["ok"], row["error"]
        assert len(row["tokens"]) == 32 and row["device"] == "cpu"
        a = row["agreement"]
        assert a["identical_prefix"] >= 24 or a["margin"] <= NEAR_TIE_LOGITS, (name, a)
        for figure in ("prefill_tok_s", "decode_tok_s", "ttft_ms"):
            assert row[figure]["mean"] > 0, (name, figure)
        assert 0 < row["itl_ms"]["p50"] <= row["itl_ms"]["p90"] <= row["itl_ms"]["p99"]
        # identity 1 by hand: the weights as this engine read them once, plus the KV cache at the mean context
        weights = stored if name == "llama.cpp" else config.params * 4
        kv_element = 2 if name == "llama.cpp" else 4
        context = len(data["prompt"]["ids"]) + 31 // 2
        step = weights + 2 * config.layers * config.kv_heads * config.head_dim * context * kv_element
        walls = row["walls"]
        assert walls["bytes_per_step"] == pytest.approx(step, rel=1e-9), name
        assert walls["here"]["tok_s"] == pytest.approx(cpu_gbs * 1e9 / step)
        assert walls["here"]["fraction"] == pytest.approx(row["decode_tok_s"]["mean"] / walls["here"]["tok_s"])
        # the card's wall for the same bytes, never a fraction for a CPU run
        assert walls["card"]["tok_s"] == pytest.approx(1008e9 / step)  # RTX 4090: 1008 GB/s (CardBook)
        assert walls["card"]["fraction"] is None and "a CPU run is not a fraction" in walls["card"]["no_fraction"]
    assert rows["iotrace"]["agreement"]["verdict"] == "identical"  # the same fp32 weights and arithmetic
    load = data["machine_load"]  # sampled before the engines started; a busy machine is said above the table
    assert load["cores"] == os.cpu_count()
    assert any(label.startswith("the machine was busy") for label in data["labels"]) == load["busy"]
    assert rows["llama.cpp"]["weights"]["format"].endswith("as stored")
    assert rows["vllm"]["build"]["version"] == "0.32.0" and rows["vllm"]["build"]["platform"] == "CpuPlatform"
    assert rows["llama.cpp"]["build"]["version"] == "llama-cpp-python 0.3.36"
    # its prompt too on the threads it was given (left unset, llama-cpp-python prefills on every core)
    build = rows["llama.cpp"]["build"]
    assert build["threads"] == build["threads_batch"] == data["work"]["threads"]
    assert "llama.cpp perf context" in rows["llama.cpp"]["timing"]["decode"]
    for row in rows.values():  # each engine's interpreter and pinned environment
        assert len(row["environment"]["freeze_sha256"]) == 64 and Path(row["python"]).exists()
    assert os.path.basename(rows["vllm"]["python"]) == "python" and "vllm" in rows["vllm"]["python"]
