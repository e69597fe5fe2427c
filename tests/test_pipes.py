"""Every command's text into a pipe or a file: whole and readable. No cell cut with "…", no line over
:data:`MAX_LINE` characters (the kernel-name list under a table aside: one full name a line), no row padded to the
longest demangled name, and one error prefix, ``iotrace: error:``, for every usage error.

What a pipe gets is drawn in process with stdout not a terminal and ``COLUMNS`` unset (:func:`_piped`), which is all
the CLI looks at; one real pipe (a subprocess) checks that boundary.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from tests.conftest import CORPUS, cli_parsers

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "bench" / "sweeps" / "gemm-h100-sxm-square-4096-BLOCK_K64-synth.json"
LLAMA_BENCH = ROOT / "tests" / "data" / "bench_import" / "llama_bench_readme_b5163.json"

#: The longest line a pipe may get, outside the kernel-name list.
MAX_LINE = 300
#: A line of the kernel-name list: "  [3] void cutlass::Kernel<...>(Params)".
LISTED = re.compile(r"^\s*(?:- )?\\?\[(\d+)\\?\] ")

CUTLASS = "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep"  # one 8,078-character CUTLASS name
SGEMM = "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep"  # templated names of 100-150 characters
TENSORRT = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"  # 36 kernels, a timeline
RESNET = "kineto/v100_dgxs_resnet50_tbplugin_kineto.json.gz"  # at::native names, ops, a timeline

OCCUPANCY = ["--cc", "8.6", "--threads", "256", "--regs", "64", "--smem-static", "4000"]

#: Each command's text in a pipe: its argv (paths relative to the corpus start with "corpus:"), or why it is not run
#: here (and where it is checked instead).
PIPED: dict[str, list[list[str]] | str] = {
    "cards": [["cards"]],
    "card": [["card", "rtx3090"], ["card", "h100"]],
    "math decode": [["math", "decode", "--card", "rtx3090", "--params", "27e9", "--bits", "4"]],
    "math prefill": [["math", "prefill", "--card", "h100", "--params", "8e9", "--tokens", "2k"]],
    "math kv": [["math", "kv", "--model", "llama-3-8b", "--tokens", "8k", "--card", "h200", "--weight-bits", "16"]],
    "math roofline": [["math", "roofline", "--card", "h100", "--flops", "1.37e11", "--bytes", "1e8"]],
    "math spec": [["math", "spec", "--alpha", "0.8", "--gamma", "4", "--draft-cost", "0.05"]],
    "math occupancy": [["math", "occupancy", *OCCUPANCY]],
    "occupancy": [["occupancy", *OCCUPANCY]],
    "kernels": [["kernels"]],
    "run": "compiles and interprets a GEMM (~25 s): tests/test_cli_output.py::test_run_into_a_file_keeps_the_config_"
           "whole_and_names_both_spill_counts pipes it into a file and checks it the same way",
    "tune": [["tune", "gemm", "--replay", str(SWEEP), "--strategy", "model", "--budget", "27"]],
    "bench import": [["bench", "import", str(LLAMA_BENCH)]],
    "bench serve": "starts the engines' servers; its table read from a pipe is checked in tests/test_bench_serve.py",
    "recipes": [["recipes", "--card", "l40s"], ["recipes", "--engine", "sglang"], ["recipes", "--card", "rtx4090"]],
    "recipes predict": [["recipes", "predict", "--model", "llama 8B", "--quant", "Q4_K"]],
    "recipes add": "writes recipe files; its stdout is one line per file: tests/test_recipes.py",
    "bench": "decodes the pinned model (tens of seconds on a CPU): the tour decodes it too, into a pipe, checked the "
             "same way (tests/test_cli.py::test_tour_runs_without_a_gpu, slow)",
    "quant": [["quant", "--list-formats"]],  # the lab itself takes ~40 s: its footer is test_quant_timing_is_labelled
    # The CUTLASS and sgemm files (the longest names) are checked the same way in the tests of their names below.
    "info": [["info", f"corpus:{name}"] for name in (TENSORRT, RESNET)],
    "report": [["report", f"corpus:{name}"] for name in (TENSORRT, RESNET)] + [["report", "corpus:kineto-ranks"]],
    "diff": [["diff", f"corpus:{SGEMM}", f"corpus:{SGEMM}"]],
    "tour": "compiles a GEMM slice and decodes the pinned model (70 s on two cores): a real pipe in "
            "tests/test_cli.py::test_tour_runs_without_a_gpu (slow)",
    "selfcheck": "runs every kernel and the tuner (minutes): its results table is rendered by print_selfcheck in "
                 "tests/test_selfcheck.py",
    "note": "writes a Markdown file, its stdout is one 'wrote' line: tests/test_output_files.py",
    "notes rebuild": "rebuilds the published notes (minutes): tests/test_notes.py",
    "notes check": "rebuilds every note to compare (minutes): tests/test_notes.py",
}


def _commands() -> set[str]:
    """Every leaf command of the CLI ("math decode", "bench import", "cards"), and every command with subcommands that
    also runs alone (``bench``)."""
    found: set[str] = set()
    for path, parser in cli_parsers():
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if path and (not subs or not subs[0].required):
            found.add(" ".join(path))
    return found


def _resolve(argv: list[str]) -> list[str]:
    if any(a.startswith("corpus:") for a in argv) and not CORPUS.is_dir():
        pytest.skip(f"real-data corpus not found at {CORPUS}: this clone has no ../shared/corpus beside it")
    return [str(CORPUS / a.removeprefix("corpus:")) if a.startswith("corpus:") else a for a in argv]


def _piped(*args: str) -> tuple[int, str, str]:
    """``iotrace ARGS | cat``, in process: stdout is not a terminal and COLUMNS is unset."""
    from iotrace.cli import main

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def _check_whole(text: str, where: str) -> None:
    """No "…" (a cut cell, name or title), and no line over MAX_LINE characters but the kernel-name list's."""
    assert text.strip(), f"{where}: no output"
    for number, line in enumerate(text.splitlines(), 1):
        assert "…" not in line, f"{where}, line {number}: cut: {line[:200]!r}"
        if not LISTED.match(line):
            assert len(line) <= MAX_LINE, f"{where}, line {number}: {len(line)} characters: {line[:120]!r}…"


def test_the_table_covers_every_command() -> None:
    """A new command must say how its text is checked in a pipe (or why not here)."""
    assert set(PIPED) == _commands()


CASES = [(name, argv) for name, runs in PIPED.items() if isinstance(runs, list) for argv in runs]


@pytest.mark.parametrize(("name", "argv"), CASES, ids=[" ".join(a).replace("corpus:", "") for _, a in CASES])
def test_every_command_into_a_pipe_is_whole(name: str, argv: list[str]) -> None:
    code, out, err = _piped(*_resolve(argv))
    assert code == 0, err
    _check_whole(out, " ".join(argv))


def _listed(text: str) -> dict[int, str]:
    """The kernel-name list: key -> full name."""
    found = {}
    for line in text.splitlines():
        match = LISTED.match(line)
        if match:
            found[int(match.group(1))] = line[match.end():]
    return found


def test_a_long_name_is_its_base_name_in_the_table_and_listed_once_in_full() -> None:
    """The 8,078-character CUTLASS name: no row padded to it (every table column sat ~8,000 columns right), the table
    shows cutlass::Kernel and a key, the name is listed once in full, and --names full keeps it inline instead."""
    trace = _resolve([f"corpus:{CUTLASS}"])[0]
    code, out, err = _piped("report", trace)
    assert code == 0, err
    _check_whole(out, "report CUTLASS")
    (name,) = _listed(out).values()
    assert len(name) > 8000 and name.startswith("void cutlass::Kernel<cutlass::gemm::kernel::B2bGemm<")
    assert out.count(name) == 1 and _listed(out) == {1: name}
    row = next(line for line in out.splitlines() if line.startswith("0 "))
    assert row.split()[:3] == ["0", "cutlass::Kernel", "[1]"] and len(row) < 120, row
    assert "#0 cutlass::Kernel [1] (100% of kernel time)" in out  # the findings name it the same way
    code, full, err = _piped("report", trace, "--names", "full")
    assert code == 0, err
    assert not _listed(full) and any(line.startswith(f"0 {name} ") for line in full.splitlines())


def test_templated_names_keep_distinct_keys_and_every_table_agrees() -> None:
    """Four sgemm variants: each row its base name and own key, each full name listed once (in the findings' list or
    the table's, whichever shows it first); info lists the same names the same way."""
    trace = _resolve([f"corpus:{SGEMM}"])[0]
    code, out, _ = _piped("report", trace)
    assert code == 0
    _check_whole(out, "report sgemm")
    listed = _listed(out)
    assert len(listed) == 4 and len(set(listed.values())) == 4
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines() if re.match(r"^[0-3] \w", line)}
    assert len(rows) == 4
    for base, key in rows.values():
        name = listed[int(key.strip("[]"))]
        assert name.startswith(f"void {base}<") and name.endswith(")"), (base, name)
    code, info, _ = _piped("info", trace)
    assert code == 0
    _check_whole(info, "info sgemm")
    assert sorted(_listed(info).values()) == sorted(listed.values())


def test_a_real_pipe_gets_the_same_whole_text() -> None:
    """One real `iotrace report FILE | cat`: the process boundary (isatty, COLUMNS unset) gives the same text."""
    trace = _resolve([f"corpus:{SGEMM}"])[0]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    done = subprocess.run([sys.executable, "-m", "iotrace", "report", trace], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    _check_whole(done.stdout, "iotrace report | cat")
    assert done.stdout == _piped("report", trace)[1]


def test_kernels_lists_every_preset_in_a_pipe() -> None:
    code, out, err = _piped("kernels")
    assert code == 0, err
    data = json.loads(_piped("kernels", "--json")[1])
    flat = " ".join(out.split())
    for row in data:
        for preset in row["presets"]:
            assert preset in flat, (row["name"], preset)


def test_a_long_rule_title_is_whole_in_a_pipe() -> None:
    """The tour's section titles are rules: at natural width a rule is as wide as its title needs (it was cut at 100
    columns: "…compiled for NVIDIA GeForce RTX 309…")."""
    from rich.rule import Rule

    from iotrace.render.console import make_console

    title = ("8. Autotuning starts without a GPU: a 4096³ fp16 GEMM slice compiled for NVIDIA GeForce RTX 3090 "
             "(`iotrace tune`)")
    console = make_console(file=io.StringIO(), record=True)
    console.print(Rule(title))
    console.print(Rule("short"))
    long_line, short_line = console.export_text().splitlines()
    assert title in long_line and "…" not in long_line and long_line.startswith("─") and long_line.endswith("─")
    assert len(short_line) == 100


def test_quant_timing_is_labelled() -> None:
    """quant's last line said a bare "37.9 s."; every timing now says what it times."""
    from iotrace.render.quant import print_quant, quant_markdown

    quality = {"kl_mean": 0.01, "kl_p99": 0.1, "top1_agreement": 0.9, "ppl": 10.0, "ppl_change_pct": 1.0,
               "ppl_reference": 9.9}
    data = {"window": 512, "include_head": False, "baseline": "Q4_1 dequantised", "model": "SmolLM2-135M-Instruct",
            "params": 134.5e6, "tokens": 100, "text": "a text", "cards": [{"key": "rtx3090"}], "seconds": 37.94,
            "rows": [{"key": "q8_0", "bits_per_weight": 8.5, "head_bits": 8.5, "weight_bytes_per_token": 1.4e8,
                      "decode_tok_s": {"rtx3090": 6500.0}, "quality": quality}]}
    from iotrace.render.console import make_console

    console = make_console(file=io.StringIO(), record=True)
    print_quant(console, data)
    last = console.export_text().strip().splitlines()[-1]
    assert last.startswith("quant took 37.9 s (wall time") and not re.fullmatch(r"[\d.]+ s\.", last), last
    assert quant_markdown(data).strip().splitlines()[-1] == last


def _gguf(path: Path, **metadata: str) -> Path:
    """A tiny Llama-architecture GGUF with this general.* metadata (name, basename, size_label)."""
    import numpy as np

    gguf = pytest.importorskip("gguf", reason="the gguf package reads model files: pip install 'iotrace[model]'")
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in metadata.items():
        writer.add_string(f"general.{key}", value)
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(4)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(("file", "metadata", "shown"), [
    # The pinned file: general.name is the converter's title-cased folder name; base name and size agree with the
    # file's name, which gives the spelling and the variant.
    ("SmolLM2-135M-Instruct.Q4_1.gguf", {"name": "Smollm2 135M 8k Lc100K Mix1 Ep2", "basename": "smollm2",
                                         "size_label": "135M"}, "SmolLM2-135M-Instruct"),
    ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", {"name": "Meta Llama 3.1 8B Instruct", "basename": "Meta-Llama-3.1",
                                                "size_label": "8B"}, "Meta-Llama-3.1-8B-Instruct"),
    # A renamed file cannot override the metadata: base name and size.
    ("model.gguf", {"name": "Smollm2 135M 8k Lc100K Mix1 Ep2", "basename": "smollm2", "size_label": "135M"},
     "smollm2-135M"),
    ("tiny.gguf", {"name": "Tiny Thing"}, "Tiny Thing"),  # no base name: general.name
    ("bare.f16.gguf", {}, "bare"),  # nothing: the file's name, less its encoding
])
def test_a_model_is_shown_by_a_clean_name(file: str, metadata: dict[str, str], shown: str, tmp_path: Path) -> None:
    from iotrace.model.gguf_file import open_gguf

    assert open_gguf(_gguf(tmp_path / file, **metadata)).config.name == shown


# Usage errors: one prefix for every command.


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    return [(" ".join(("iotrace", *path)), parser) for path, parser in cli_parsers()]


def test_every_parser_has_the_same_error_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """Each (sub)command's own usage error: ``iotrace: error: ... (see `iotrace CMD --help`)``, exit 2, one line
    (argparse's subparsers said "iotrace bench: error:")."""
    parsers = _parsers()
    assert len(parsers) > 20
    for prog, parser in parsers:
        with pytest.raises(SystemExit) as ended:
            parser.parse_args(["--no-such-flag"])
        assert ended.value.code == 2, prog
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("iotrace: error: "), (prog, err)
        assert err.rstrip().endswith(f"(see `{prog} --help`)"), (prog, err)


@pytest.mark.parametrize(("argv", "message", "help_of"), [
    (["bench", "--bogus"], "unrecognized arguments: --bogus", "iotrace bench"),
    (["bench", "import"], "the following arguments are required: FILE", "iotrace bench import"),
    (["math", "decode", "--bits", "x"], "argument --bits: 'x' is not a number", "iotrace math decode"),
    (["occupancy", "--cc", "8.6"], "the following arguments are required: --threads, --regs", "iotrace occupancy"),
    (["report"], "the following arguments are required: TRACE", "iotrace report"),
    (["notes", "purge"], "argument ACTION: invalid choice: 'purge'", "iotrace notes"),
    (["nonsense"], "argument COMMAND: invalid choice: 'nonsense'", "iotrace"),
])
def test_a_usage_error_in_each_command_family_is_iotrace_error(argv: list[str], message: str, help_of: str) -> None:
    code, out, err = _piped(*argv)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"iotrace: error: {message}") and line.endswith(f"(see `{help_of} --help`)"), line


def test_bench_usage_shows_bench_alone_as_valid() -> None:
    """`bench --help` drew `import ...` after the options as if a subcommand were required."""
    from iotrace.cli import build_parser

    parser = dict(_parsers())["iotrace bench"]
    usage = parser.format_usage()
    first, second = usage.split("\n", 1)[0], usage.strip().splitlines()[-1]
    assert first.startswith("usage: iotrace bench [-h] [--model KEY") and "import" not in usage.split("\n       ")[0]
    assert second.strip().startswith("iotrace bench serve --engine NAME")
    assert "iotrace bench import FILE" in usage.strip().splitlines()[-2]
    assert build_parser().parse_args(["bench", "--gen-tokens", "4"]).bench_command is None
