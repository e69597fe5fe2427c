"""The CLI: answers as JSON, one-line errors with exit code 2, help everywhere. Called in this process (what these
tests check is the command's answer, not the process), but for real subprocesses where the process is the point (the
tour into a closed pipe) and one each of a JSON answer, a one-line refusal of ``occupancy``, ``math``,
``card`` and argparse itself, and ``--help``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from iotrace.cards import lookup
from tests.conftest import cli_in_process, run_cli
from tests.conftest import run_cli_in_process as _in_process


def _json(*args: str, run=_in_process) -> object:
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_occupancy_json_answer() -> None:
    out = _json("occupancy", "--cc", "8.6", "--threads", "256", "--regs", "64", "--smem-static", "0",
                "--smem-dynamic", "0", run=run_cli)  # a JSON answer through a real process
    # 64 regs x 32 = 2048 per warp; 16384 per sub-partition / 2048 = 8 warps x 4 = 32 warps = 4 blocks of 8 warps.
    assert out["active_blocks_per_sm"] == 4 and out["active_warps_per_sm"] == 32
    assert out["occupancy_pct"] == pytest.approx(200 / 3)
    assert out["limiters"] == ["registers"]
    assert out["limits"] == {"warps": 6, "registers": 4, "shared_mem": 100, "blocks": 16, "barriers": 16}


def test_occupancy_by_card_and_math_alias_agree() -> None:
    by_card = _json("occupancy", "--card", "h100", "--threads", "128", "--regs", "168", "--smem-dynamic", "98304")
    by_math = _json("math", "occupancy", "--cc", "9.0", "--threads", "128", "--regs", "168", "--smem-dynamic", "98304")
    assert by_card == by_math
    # 98304 + 1024 reserved = 99328 B per block; 228 KB / 99328 = 2 blocks.
    assert by_card["limits"]["shared_mem"] == 2 and by_card["active_blocks_per_sm"] == 2


def test_occupancy_curves_and_figure(tmp_path: Path) -> None:
    page = tmp_path / "occ.html"
    out = _json("occupancy", "--cc", "8.0", "--threads", "256", "--regs", "32", "--curves", "-o", str(page))
    registers = {p["x"]: p["active_warps_per_sm"] for p in out["curves"]["registers"]}
    assert registers[32] == 64 and registers[255] == 8 and len(out["curves"]["block_size"]) == 65
    html = page.read_text()
    assert "plotly" in html.lower() and "active warps per SM" in html


def test_decode_known_check_and_inverse() -> None:
    forward = _json("math", "decode", "--bandwidth-gbs", "936", "--params", "27e9", "--bits", "4")
    assert forward["result"]["value"] == pytest.approx(69.333, abs=1e-3)
    assert "936000000000 / (27000000000 × 0.5)".replace("936000000000", "9.36e11").replace(
        "27000000000", "2.7e10") in forward["steps"][0]
    inverse = _json("math", "decode", "--card", "rtx3090", "--params", "27B", "--tokens-per-s", "87")
    assert inverse["result"]["value"] == pytest.approx(0.398467, rel=1e-5)


def test_kv_known_check_with_model_and_card() -> None:
    out = _json("math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--bits", "16", "--card", "h200",
                "--weight-bits", "16")
    assert out["result"]["value"] == 1_073_741_824
    fits = next(q for q in out["also"] if q["symbol"] == "fits")
    # (141 GiB - 8.03e9 * 2 B) / 131072 B per token = 1,032,543 tokens.
    assert fits["value"] == (141 * 2**30 - 8.03e9 * 2) // 131072 == 1_032_543


def _kv(*args: str) -> tuple[dict, dict, str]:
    out = _json("math", "kv", *args)
    weights = next((q for q in out["inputs"] if q["symbol"] == "W"), None)
    return out, weights, out["notes"][0] if out["notes"] else ""


def test_kv_with_a_card_states_the_weights_it_counts_and_whether_the_asked_context_fits() -> None:
    """Issue 46: `math kv --card` counted the weights as 0 bytes unless told. Now: the model's 16-bit weights by
    default, said in the output and the JSON; `--weight-bits 0` counts the KV cache alone and says so; and a verdict
    on the asked tokens × sequences, weights included."""
    default, weights, verdict = _kv("--model", "llama-3-8b", "--tokens", "8k", "--card", "h200")
    told = _json("math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--card", "h200", "--weight-bits", "16")
    assert weights["value"] == 8.03e9 * 2 and weights["source"] == "assumed" and "16 bits assumed" in weights["meaning"]
    assert default["also"] == told["also"]  # the same answer as --weight-bits 16, the assumption said
    assert verdict.startswith("8192 tokens × 1 sequence fit in NVIDIA H200: 1.074 GB of KV cache + 16.06 GB of ")
    # The case, KV only: 16 × 128k tokens of llama-3-70b's cache (687.2 GB) do not fit in 80 GiB.
    alone, weights, verdict = _kv("--model", "llama-3-70b", "--tokens", "128k", "--batch", "16", "--card", "h100",
                                  "--weight-bits", "0")
    assert (weights["value"], weights["meaning"]) == (0, "weights not counted (--weight-bits 0): 'fits' is the KV "
                                                         "cache alone")
    assert next(q for q in alone["also"] if q["symbol"] == "fits")["value"] == 80 * 2**30 // (327680 * 16) == 16384
    assert verdict.startswith("131072 tokens × 16 sequences do not fit in NVIDIA H100 80GB HBM3: 687.2 GB of KV cache "
                              "+ 0 GB of weights (not counted) = 687.2 GB > 85.9 GB")
    # At 4 bits the weights (35.3 GB) fit and leave 9,651 tokens per sequence: still not the asked 131,072.
    four, weights, verdict = _kv("--model", "llama-3-70b", "--tokens", "128k", "--batch", "16", "--card", "h100",
                                 "--weight-bits", "4")
    assert weights["value"] == 70.6e9 / 2 and weights["source"] == "given"
    assert next(q for q in four["also"] if q["symbol"] == "fits")["value"] == (80 * 2**30 - 35.3e9) // (327680 * 16)
    assert "do not fit" in verdict and "+ 35.3 GB of weights = 722.5 GB > 85.9 GB" in verdict
    # A shape with no model has no parameters to size: not counted, and said.
    _, weights, _ = _kv("--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "8k", "--card", "h200")
    assert weights["value"] == 0 and "no --model to size them" in weights["meaning"]
    # Without a card there is nothing to fit into, and nothing assumed.
    bare, weights, verdict = _kv("--model", "llama-3-8b", "--tokens", "8k")
    assert (weights, verdict, len(bare["also"])) == (None, "", 1)


def test_kv_int8_with_scales_buys_context() -> None:
    fp16 = _json("math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--card", "rtx4090", "--weight-bits", "4")
    int8 = _json("math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--card", "rtx4090", "--weight-bits", "4",
                 "--bits", "8", "--scale-bytes", "8")
    assert int8["also"][0]["value"] == 32 * 8 * (2 * 128 + 8) == 67584  # bytes per token
    assert fp16["also"][1]["symbol"] == int8["also"][1]["symbol"] == "fits"
    # (24 GiB - 4.015e9 B of 4-bit weights) / bytes per token: 166,016 tokens in fp16, 321,969 in int8.
    assert (fp16["also"][1]["value"], int8["also"][1]["value"]) == ((24 * 2**30 - 4.015e9) // 131072,
                                                                   (24 * 2**30 - 4.015e9) // 67584)


def test_spec_prefill_roofline() -> None:
    assert _json("math", "spec", "--alpha", "0.8", "--gamma", "4")["result"]["value"] == pytest.approx(3.3616)
    spec = _json("math", "spec", "--alpha", "0.8", "--gamma", "4", "--draft-cost", "0.05")
    assert spec["also"][0]["value"] == pytest.approx(2.801333, rel=1e-6)
    assert spec["also"][1]["symbol"] == "best γ" and spec["also"][1]["value"] == 8
    prefill = _json("math", "prefill", "--peak-tflops", "989.4", "--params", "8.03e9", "--tokens", "2048")
    assert prefill["result"]["value"] == pytest.approx(61606.48, rel=1e-6)
    roof = _json("math", "roofline", "--card", "h100", "--flops", "1.37e11", "--bytes", "1.0e8",
                 "--precision", "fp16_tensor")
    assert roof["notes"][0].startswith("compute-bound")


def test_cards_and_card() -> None:
    cards = _json("cards")
    assert len(cards) >= 20 and {"rtx3090", "h200-sxm", "mi300x"} <= {c["key"] for c in cards}
    card = _json("card", "NVIDIA GeForce RTX 3090")
    assert card["memory_bandwidth_gbs"] == 936 and card["cc"] == "8.6"


def test_card_from_the_environment() -> None:
    result = _in_process("math", "decode", "--params", "27e9", "--bits", "4", "--json", env={"IOTRACE_CARD": "rtx3090"})
    assert result.returncode == 0 and json.loads(result.stdout)["result"]["value"] == pytest.approx(69.333, abs=1e-3)


def test_occupancy_shows_its_arithmetic() -> None:
    out = _json("occupancy", "--cc", "8.6", "--threads", "256", "--regs", "64", "--smem-static", "4000")
    assert "(65536 / 4) // 2048 = 8 warps per sub-partition × 4 // 8 = 4 blocks" in out["steps"][1]
    assert "ceil((4000 + 1024 + 0) / 128) × 128 = 5120 B per block" in out["steps"][2]
    assert out["steps"][-1].endswith("= 32 of 48 warps = 66.67 %")


def test_output_closed_early_is_not_an_error() -> None:
    import sys

    pipe = subprocess.run(f"{sys.executable} -m iotrace tour | head -1", shell=True, capture_output=True, text=True)
    assert pipe.returncode == 0 and "Traceback" not in pipe.stderr


@pytest.mark.slow
@pytest.mark.parametrize("card", ["gtx1660super", "strix-halo", "mi300x", "gb10"])
def test_tour_runs_on_any_card(card: str) -> None:
    """In process (the tour without a card below is the real subprocess): each card's sections render."""
    code, out, err = cli_in_process("tour", "--card", card)
    assert code == 0, err
    assert lookup(card).name in out and "Traceback" not in err


@pytest.mark.slow
def test_tour_runs_without_a_gpu() -> None:
    """`iotrace tour` into a pipe with no COLUMNS (a static tune compiled for the card and a decode of the pinned
    model, hence slow): its answers, every section title whole (they were cut at 100 columns in a pipe), no cell cut,
    no line past 300 characters, and the model by its clean name. In process, sharing the worker's loaded model: what
    a pipe changes is that stdout is no terminal, as a StringIO is not (`natural_output`); the tour's real process
    into a real pipe is test_output_closed_early_is_not_an_error's."""
    import contextlib
    import io
    from unittest import mock

    from iotrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {"NO_COLOR": "1"}), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        for name in ("COLUMNS", "LINES"):  # patch.dict puts them back
            os.environ.pop(name, None)
        code = main(["tour"])
    assert code == 0, err.getvalue()
    text = out.getvalue()
    for expected in ("69.33 tok/s", "1.074e9 B", "3.362 tokens", "occupancy = ", "compute-bound", "memory-bound",
                     "── 8. Autotuning starts without a GPU: a 4096³ fp16 GEMM slice compiled for NVIDIA GeForce RTX "
                     "3090 (`iotrace tune`) ──", "SmolLM2-135M-Instruct"):
        assert expected in text, f"{expected!r} missing from the tour"
    assert "…" not in text and "Smollm2 135M" not in text
    assert max(len(line) for line in text.splitlines()) <= 300


BAD_INPUT = [
    (["occupancy", "--cc", "8.6", "--threads", "1025", "--regs", "32"], "threads_per_block=1025"),
    (["occupancy", "--cc", "8.6", "--threads", "0", "--regs", "32"], "threads_per_block=0"),
    (["occupancy", "--cc", "8.6", "--threads", "-5", "--regs", "32"], "threads_per_block=-5"),
    (["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "256"], "registers_per_thread=256"),
    (["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "32", "--smem-static", "-1"], "smem_static=-1"),
    (["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "32", "--barriers", "17"], "barriers=17"),
    (["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "32", "--carveout-pct", "101"], "carveout_pct=101"),
    (["occupancy", "--cc", "6.1", "--threads", "256", "--regs", "32"], "compute capability 6.1"),
    (["occupancy", "--cc", "eight", "--threads", "256", "--regs", "32"], "'eight'"),
    (["occupancy", "--cc", "8.6", "--threads", "lots", "--regs", "32"], "'lots' is not a whole number"),
    (["occupancy", "--card", "mi300x", "--threads", "256", "--regs", "600"], "arch_vgpr=600 is out of range"),
    (["occupancy", "--card", "strix-halo", "--threads", "256", "--regs", "32"], "no CU limits for gfx target gfx1151"),
    (["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "32", "-o", "/nonexistent/dir/x.html"], "cannot write"),
    (["occupancy", "--cc", "8.6", "--threads", "256", "--regs", "32", "-o", "x.csv"],
     "iotrace occupancy cannot write a .csv file — it writes .html, .png, .svg, .json, .md, .txt"),
    (["occupancy", "--threads", "256", "--regs", "32"], "no GPU found (torch.cuda and CuPy see none)"),
    (["card", "rtx 9999"], "no card called 'rtx 9999'"),
    (["math", "decode", "--card", "nonsense-gpu", "--params", "27e9", "--bits", "4"], "no card called"),
    (["math", "decode", "--card", "rtx3090", "--params", "abc", "--bits", "4"], "'abc' is not a number"),
    (["math", "decode", "--card", "rtx3090", "--params", "0", "--bits", "4"], "params=0 must be a positive"),
    (["math", "decode", "--card", "rtx3090", "--params=-27e9", "--bits", "4"], "params=-2.7e+10 must be"),
    (["math", "decode", "--card", "rtx3090", "--params", "1e400", "--bits", "4"], "not a finite number"),
    (["math", "decode", "--card", "rtx3090", "--params", "27e9", "--bits", "0"], "outside 0 < bits <= 64"),
    (["math", "decode", "--card", "rtx3090", "--bits", "4"], "--params is missing"),
    (["math", "decode", "--params", "27e9", "--bits", "4"], "no GPU found"),
    (["math", "kv", "--model", "gpt-9", "--tokens", "8192"], "no model called 'gpt-9'"),
    (["math", "kv", "--layers", "32", "--kv-heads", "0", "--head-dim", "128", "--tokens", "8192"], "kv_heads=0"),
    (["math", "spec", "--alpha", "1.5", "--gamma", "4"], "alpha=1.5"),
    (["math", "spec", "--alpha", "0.8", "--gamma", "0"], "gamma=0"),
    (["math", "prefill", "--card", "t4", "--precision", "bf16_tensor", "--params", "8e9", "--tokens", "2k"],
     "states no bf16_tensor peak"),
    (["math", "roofline", "--card", "h100", "--flops", "1e9", "--bytes", "0"], "bytes=0 must be"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    (["occupancy", "--cc", "", "--threads", "256", "--regs", "32"], "compute capability ''"),
    (["occupancy", "--card", "", "--threads", "256", "--regs", "32"], "an empty card name"),
    (["math", "prefill", "--card", "h100", "--params", "1e308", "--tokens", "2k", "--json"], "prefill work comes out"),
    (["math", "decode", "--card", "rtx3090", "--params", "1e308", "--bits", "64"], "decode rate comes out as 0"),
    (["math", "decode", "--bandwidth-gbs", "1e300", "--params", "27e9", "--bits", "4"], "--bandwidth-gbs"),
    (["math", "kv", "--layers", "9" * 400, "--kv-heads", "8", "--head-dim", "128", "--tokens", "8"],
     "is not a whole number"),
    (["math", "kv", "--layers", str(2**60), "--kv-heads", "8", "--head-dim", "128", "--tokens", "8"],
     "larger than any real count"),
    (["math", "spec", "--alpha", "0.5", "--gamma", "100000"], "from 1 to 1024"),
    (["math", "spec", "--alpha", "nan", "--gamma", "4"], "'nan' is not a number"),
    (["math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--weight-bits", "16"], "--weight-bits needs --model"),
    (["math", "kv", "--model", "llama-3-70b", "--tokens", "8k", "--card", "rtx3090", "--weight-bits", "16"],
     "do not fit in NVIDIA GeForce RTX 3090"),
    (["math", "roofline", "--card", "mi300x", "--flops", "1e9", "--bytes", "1e6", "--precision", "fp4"],
     "precision 'fp4' is not one of"),
    (["math", "roofline", "--flops", "1e9", "--bytes", "1e6", "--peak-tflops", "100"], "no GPU found"),
    # Issue 46: 16-bit weights by default, and said; no context claimed beside weights that do not fit.
    (["math", "kv", "--model", "llama-3-70b", "--tokens", "128k", "--batch", "16", "--card", "h100"],
     "do not fit in NVIDIA H100 80GB HBM3's 80 GiB, so no context fits beside them: llama-3-70b's weights, 7.06e10 "
     "parameters × 16 bits / 8 (16 bits assumed: no --weight-bits given"),
    (["math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--card", "h200", "--weight-bits", "-1"],
     "outside 0 <= bits <= 64"),
    (["math", "kv", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "8k", "--card", "h200",
      "--weight-bits", "4"], "--weight-bits needs --model"),
]


#: Through a real process: exit 2 and one line with no traceback from occupancy, math, card and argparse itself.
REAL_PROCESS = [BAD_INPUT[0][0], BAD_INPUT[15][0], BAD_INPUT[16][0], BAD_INPUT[30][0]]


@pytest.mark.parametrize(("args", "expected"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path) -> None:
    run = run_cli if args in REAL_PROCESS else _in_process
    result = run(*args, env={"IOTRACE_CARD": ""})
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and expected in lines[0], lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize(("args", "suggested"), [
    (["math", "kv", "--model", "llama-3-7b", "--tokens", "1k"], ["llama-3-70b", "llama-3-8b"]),
    (["math", "kv", "--model", "llama3-7", "--tokens", "1k"], ["llama-3-70b", "llama-3-8b"]),
    (["card", "rtx309"], ["rtx3090", "rtx5090", "rtx4090", "rtx3080"]),
])
def test_did_you_mean_names_each_suggestion_once(args: list[str], suggested: list[str]) -> None:
    """A model matches by key, name and aliases, so two close spellings of one model were two suggestions ("did you
    mean llama-3-70b, llama-3-8b, llama-3-70b?"): each is named once."""
    result = run_cli(*args) if args[0] == "math" and "llama3-7" in args else _in_process(*args)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and f"did you mean {', '.join(suggested)}? " in line, line


def test_card_without_name_or_gpu_is_a_clear_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so `iotrace card` describes it")
    result = _in_process("card", env={"IOTRACE_CARD": ""})
    assert result.returncode == 2
    # `iotrace card` takes its card as NAME, not --card: the advice must be one the command accepts.
    assert result.stderr.strip() == ("iotrace: error: no GPU found (torch.cuda and CuPy see none) and no card was "
                                     "named — give a card name: iotrace card h100, or set IOTRACE_CARD (see "
                                     "`iotrace cards`)")


@pytest.mark.parametrize("command", [[], ["tour"], ["cards"], ["card"], ["math"], ["math", "decode"],
                                     ["math", "prefill"], ["math", "kv"], ["math", "roofline"], ["math", "spec"],
                                     ["math", "occupancy"], ["occupancy"]])
def test_every_command_has_help(command: list[str]) -> None:
    run = run_cli if command == ["math", "decode"] else _in_process  # one through a real process
    result = run(*command, "--help")
    assert result.returncode == 0 and "usage: iotrace" in result.stdout


def test_every_data_command_takes_json() -> None:
    from iotrace.cli import build_parser

    parser = build_parser()
    data_commands = ["cards", "card", "math decode", "math prefill", "math kv", "math roofline", "math spec",
                     "math occupancy", "occupancy"]
    for command in data_commands:
        sub = parser
        for word in command.split():
            sub = next(a for a in sub._actions if a.dest in ("command", "identity")).choices[word]
        assert any("--json" in a.option_strings for a in sub._actions), command


@pytest.mark.parametrize(("sent", "code", "line"), [("SIGINT", 130, "iotrace: interrupted (Ctrl-C)"),
                                                     ("SIGTERM", 143, "iotrace: terminated (SIGTERM)")])
@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_ctrl_c_and_sigterm_are_one_line_and_the_shells_exit_code(sent: str, code: int, line: str) -> None:
    """Ctrl-C, or SIGTERM from a scheduler or `timeout`, in a long command (the model bench, mid-run) ends with one
    line, not a KeyboardInterrupt traceback (nor, for SIGTERM, a silent death that skips every cleanup)."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "iotrace", "bench", "--gen-tokens", "2000", "--reps", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stderr.readline()  # the first progress line: the bench is under way
    assert first.startswith("iotrace bench ["), first
    time.sleep(1.0)
    proc.send_signal(getattr(signal, sent))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == line, err
