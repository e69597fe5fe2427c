"""Every bench output of the corpus (tests/conftest.py::corpus_bench_results) pasted as people paste it.

Each file is perturbed here the way a terminal paste changes it (issue 45 item 4): the run's log lines between a
table's header and its rows and between rows (for JSON, around the document), CRLF line ends, a shell prompt after
the output (on its own line, and glued to a file that ends without a newline, as ``cat`` shows it), an infinite
request rate written as vLLM writes it (``"inf"``), as SGLang does (``Infinity``) or by hand (``"infinity"``), the
extra columns or keys newer versions write, and the output cut mid-row at the end. Each perturbed file is either
read with the original's figures for every row that survived, with a note naming what was skipped and its line, or
refused by ``iotrace bench import FILE`` in one line with exit 2: which of the two is stated for each case.

The original's figures are read here with plain str / json parsing; the rows of the original file through
``load_bench_file`` are the reference for the walls. The 3 MB serving JSON is perturbed once per case (string edits
of its text, never a parse and dump per row).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from iotrace.cli import main
from iotrace.model.imported import ImportedRun, load_bench_file
from tests.conftest import CORPUS, corpus_bench_results

#: What each corpus file's run used and its file does not say (PROVENANCE.md), as `iotrace bench import` options.
OPTIONS: dict[str, dict] = {
    "l40s_epyc9534_llama-bench_cpu_gpu_b7199.md": {"ngl": (0, 10, 99)},
    "8xmi300x_vllm0.6.3_benchmark_serving_llama3.1-405b-fp8_32qps.json":
        {"card": "mi300x", "gpus": 8, "model": "llama-3.1-405b", "dtype": "fp8"},
    "8xmi300x_vllm0.6.4_benchmark_throughput_405b-fp8-kv.json":
        {"card": "mi300x", "gpus": 8, "model": "llama-3.1-405b", "dtype": "fp8"},
    "4xh200_sglang_bench_serving_llama3.3-70b_offline.jsonl": {"card": "h200", "gpus": 4, "model": "llama-3.3-70b"},
}
# Log lines as runs print them: SYCL's (the issue's paste), llama.cpp's model loader, vLLM's and SGLang's loggers.
MEMORY_WARNING = ("get_memory_info: [warning] ext_intel_free_memory is not supported (export/set ZES_ENABLE_SYSMAN=1 "
                  "to support), use total memory as free memory")
LOADER = "llama_model_loader: loaded meta data with 29 key-value pairs and 291 tensors from model.gguf (version GGUF)"
VLLM_LOG = "INFO 11-20 12:24:28 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Running: 12 reqs"
SGLANG_LOG = "[2024-12-10 10:00:00] INFO:     127.0.0.1:51234 - \"POST /generate HTTP/1.1\" 200 OK"
PROMPT = "user@gpu-node:~/bench$ "
# Every figure of a row that a paste must not change (wall_note is left out: it quotes device lines by line number).
FIGURES = ("engine", "engine_version", "model", "card_key", "machine", "test", "phase", "prompt_tokens", "gen_tokens",
           "depth", "tokens_per_s", "tokens_per_s_stddev", "requests", "output_tokens_per_s", "request_rate",
           "ttft_median_s", "weight_bytes", "step_bytes", "decode_wall_tok_s", "prefill_wall_tok_s",
           "fraction_of_wall", "quant", "ubatch", "gpus")


# --- the original files, read here by hand -------------------------------------------------------------------------


def kind_of(text: str) -> str:
    """"json" (one document), "jsonl" or "md", told with plain json and str."""
    try:
        json.loads(text)
        return "json"
    except json.JSONDecodeError:
        return "jsonl" if text.lstrip().startswith("{") else "md"


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def is_llama_header(line: str) -> bool:
    return line.startswith("|") and {"model", "size", "params", "backend", "test", "t/s"} <= set(cells(line))


def md_row_lines(lines: list[str]) -> list[int]:
    """Indices of the rows of every llama-bench table: the | lines after a header and its separator."""
    out, inside = [], False
    for i, line in enumerate(lines):
        if is_llama_header(line):
            inside = True
        elif inside and line.startswith("|"):
            if not set(line.strip()) <= set("|-: "):
                out.append(i)
        else:
            inside = False
    return out


def serving_rate(obj: dict) -> float:
    """One stream's rate as the serving reader states it: 1 / median TPOT, else 1 / median ITL (ms)."""
    return 1000 / (obj.get("median_tpot_ms") or obj["median_itl_ms"])


def plain_figures(text: str) -> list[float]:
    """Each row's tok/s in the original file, read with plain json / str."""
    kind = kind_of(text)
    if kind == "json":
        doc = json.loads(text)
        return [serving_rate(doc) if "request_rate" in doc else doc["tokens_per_second"]]
    if kind == "jsonl":
        objs = [json.loads(line) for line in text.splitlines() if line.strip()]
        return [obj["avg_ts"] if "avg_ts" in obj else serving_rate(obj) for obj in objs]
    lines = text.split("\n")
    return [float(cells(lines[i])[-1].split("±")[0]) for i in md_row_lines(lines)]


@cache
def original(path: Path) -> tuple[str, list[ImportedRun]]:
    return path.read_text(), load_bench_file(path, **OPTIONS.get(path.name, {}))


# --- the perturbations ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A perturbed text and what reading it must give: ``kept`` rows (the original's first ones), and the notes,
    each as (its words, the line it names, how many lines it counts), or a refusal's words."""

    text: str
    kept: int | None = None                       # None: refused
    notes: tuple[tuple[str, int, int], ...] = ()
    refused: str = ""
    rate: float | None = None                     # the request rate every row must then have


def _insert(lines: list[str], at: list[tuple[int, list[str]]]) -> tuple[list[str], list[int]]:
    """``lines`` with each (index, new lines) inserted before that index; the 1-based numbers of the new lines."""
    where: dict[int, list[str]] = {}
    for index, new in at:
        where.setdefault(index, []).extend(new)
    out: list[str] = []
    numbers: list[int] = []
    for index in range(len(lines) + 1):
        for new in where.get(index, []):
            out.append(new)
            numbers.append(len(out))
        if index < len(lines):
            out.append(lines[index])
    return out, numbers


def interleaved(text: str, rows: int) -> Case:
    kind, lines = kind_of(text), text.split("\n")
    if kind == "md":
        # three warnings between each table's separator and its first row (the issue's paste), one between the
        # last table's first two rows
        headers = [i for i, line in enumerate(lines) if is_llama_header(line)]
        row_lines = md_row_lines(lines)
        at = [(h + 2, [f"{MEMORY_WARNING} #{k}" for k in range(3)]) for h in headers]
        at.append((row_lines[-1], [LOADER]))
        kind_words = "log line(s) inside a table"
    elif kind == "jsonl":
        objects = [i for i, line in enumerate(lines) if line.strip()]
        at = [(0, [VLLM_LOG, SGLANG_LOG, LOADER]), (objects[1], [SGLANG_LOG]), (objects[len(objects) // 2], [VLLM_LOG])]
        kind_words = "line(s) that are not JSON"
    else:  # one JSON document: a log before it and after it
        at = [(0, [VLLM_LOG, SGLANG_LOG, LOADER]), (len(lines), ["", VLLM_LOG])]
        kind_words = "line(s) that are not JSON"
    out, numbers = _insert(lines, at)
    return Case("\n".join(out), kept=rows, notes=((kind_words, numbers[0], len([n for n in numbers
                                                                                 if out[n - 1]])),))


def crlf(text: str, rows: int) -> Case:
    return Case(text.replace("\n", "\r\n"), kept=rows)


def prompt_line(text: str, rows: int) -> Case:
    out = text.rstrip("\n") + "\n" + PROMPT + "\n"
    return Case(out, kept=rows, notes=(("shell prompt line(s)", out.count("\n"), 1),))


def prompt_as_cat_shows(text: str, rows: int) -> Case:
    """The prompt where the terminal prints it: on the line the output ends (a file without a final newline)."""
    out = text + PROMPT
    return Case(out, kept=rows, notes=(("shell prompt line(s)", out.count("\n") + 1, 1),))


def _rate(value: str) -> Callable[[str, int], Case | None]:
    def perturb(text: str, rows: int) -> Case | None:
        if '"request_rate": ' not in text:
            return None  # not a serving result
        out = re.sub(r'"request_rate": [^,}]+', f'"request_rate": {value}', text)
        return Case(out, kept=rows, rate=math.inf)
    return perturb


def extra_columns(text: str, rows: int) -> Case:
    kind = kind_of(text)
    if kind == "md":
        # newer llama-bench builds' columns (get_field_display_name: fa, dev, fitt) before test, by header name
        lines = text.split("\n")
        row_lines, inside = set(md_row_lines(lines)), False
        for i, line in enumerate(lines):
            if is_llama_header(line):
                lines[i] = line.replace("|            test |", "| fa | dev          | fitt |            test |")
                lines[i + 1] = lines[i + 1].replace("| --------------: |",
                                                    "| -: | ------------ | ---: | --------------: |")
                inside = True
            elif i in row_lines and inside:
                parts = line.rsplit("|", 3)  # ..., test, t/s, ""
                lines[i] = f"{parts[0]}|  1 | CUDA0        | 1024 |{parts[1]}|{parts[2]}|{parts[3]}"
        return Case("\n".join(lines), kept=rows)
    extra = '"failed": 0, "label": null, "a_future_field": [1, 2], '  # vllm/benchmarks/serve.py's newer keys
    if kind == "jsonl":
        return Case("\n".join("{" + extra + line[1:] if line.startswith("{") else line for line in text.split("\n")),
                    kept=rows)
    return Case("{" + extra + text.lstrip()[1:], kept=rows)


def cut_at_end(text: str, rows: int) -> Case:
    kind, lines = kind_of(text), text.split("\n")
    if kind == "json":  # one document cut in half: nothing whole to read
        return Case(text[: len(text) // 2], refused="invalid JSON")
    # JSON lines: the last line cut; Markdown: inside the t/s cell of the last row (the cells still count right,
    # only the closing | is gone)
    last = max(i for i, line in enumerate(lines) if line.strip()) if kind == "jsonl" else md_row_lines(lines)[-1]
    cut = [*lines[:last], lines[last][: len(lines[last]) - 4]]
    return Case("\n".join(cut), kept=rows - 1, notes=(("cut short", last + 1, 1),))


PERTURBATIONS: dict[str, Callable[[str, int], Case | None]] = {
    "interleaved_log_lines": interleaved, "crlf": crlf, "prompt_line": prompt_line,
    "prompt_as_cat_shows": prompt_as_cat_shows, "rate_inf_string": _rate('"inf"'), "rate_Infinity": _rate("Infinity"),
    "rate_infinity_string": _rate('"infinity"'), "extra_columns": extra_columns, "cut_at_end": cut_at_end,
}
FILES = corpus_bench_results(CORPUS) if CORPUS.is_dir() else []


def _applies(path: Path, name: str) -> bool:
    """A request-rate case only for a serving result (its key is in the first record's head)."""
    if not name.startswith("rate_"):
        return True
    with path.open("rb") as handle:
        return b'"request_rate": ' in handle.read(4096)


CASES = [(path, name) for path in FILES for name in PERTURBATIONS if _applies(path, name)]


# --- the checks -----------------------------------------------------------------------------------------------------


def cli_refusal(path: Path, options: dict, capsys: pytest.CaptureFixture[str]) -> str:
    """`iotrace bench import PATH …` as the command line runs it: exit 2 and one line on stderr naming the file."""
    argv = ["bench", "import", str(path)]
    for key, value in options.items():
        argv += [f"--{key}", ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err
    return err


def note_counts(notes: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """note -> (lines counted, first line named), parsed from "skipped N … (the first line L: …)"."""
    out = {}
    for note in notes:
        found = re.match(r"skipped (\d+) .*?\((?:the first )?line (\d+): ", note)
        assert found, note
        out[note] = (int(found.group(1)), int(found.group(2)))
    return out


@pytest.mark.parametrize(("path", "name"), CASES or [(None, "")],
                         ids=[f"{p.name}-{n}" for p, n in CASES] or ["no-corpus"])
def test_a_pasted_bench_output_is_read_with_the_originals_figures_or_refused_in_one_line(
        path: Path | None, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if path is None:
        pytest.skip(f"real-data corpus not found at {CORPUS}")
    text, rows = original(path)
    figures = plain_figures(text)
    assert [r.tokens_per_s for r in rows] == pytest.approx(figures, rel=1e-12) and rows
    case = PERTURBATIONS[name](text, len(rows))
    assert case is not None
    perturbed = tmp_path / path.name
    perturbed.write_bytes(case.text.encode())
    options = OPTIONS.get(path.name, {})
    if case.kept is None:
        assert case.refused in cli_refusal(perturbed, options, capsys)
        return
    read = load_bench_file(perturbed, **options)
    assert len(read) == case.kept, [r.source for r in read]
    assert [r.tokens_per_s for r in read] == pytest.approx(figures[: case.kept], rel=1e-12)
    for got, want in zip(read, rows, strict=False):
        for name_ in FIGURES:
            expected = getattr(want, name_)
            if case.rate is not None and name_ in ("request_rate", "test"):
                expected = case.rate if name_ == "request_rate" else re.sub(r"[\d.]+ req/s", "all at once", expected)
            if name == "cut_at_end" and name_ == "engine_version" and getattr(got, name_) is None:
                continue  # the cut took the build line printed after the last table
            assert getattr(got, name_) == expected, (got.source, name_)
        assert got.source.startswith(str(perturbed))
    # the notes: the same on every row, one per kind, each naming its first line and counting its lines
    assert {r.read_notes for r in read} == {read[0].read_notes}
    counts = note_counts(read[0].read_notes)
    assert len(counts) == len(case.notes), read[0].read_notes
    for words, line, count in case.notes:
        (note,) = [n for n in counts if words in n]
        assert counts[note] == (count, line), note


def test_the_issues_paste_seven_good_tables_and_one_with_memory_warnings(tmp_path: Path) -> None:
    """The issue's file, built from the L40S tables: eight tables (Test 3's table pasted eight times, each with its
    build line), three ``get_memory_info: [warning]`` lines between the header and the rows of one of them. Every
    table is read (16 rows, each with Test 3's figures), and one note counts the three lines and names the first."""
    if not CORPUS.is_dir():
        pytest.skip(f"real-data corpus not found at {CORPUS}")
    path = CORPUS / "bench-outputs" / "l40s_epyc9534_llama-bench_cpu_gpu_b7199.md"
    lines = path.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("## Test 3"))
    block = lines[start + 3: start + 13]  # the ggml_cuda_init lines, the table, the build line
    assert block[4].startswith("| model") and block[-1].startswith("build: ")
    tables = [list(block) for _ in range(8)]
    tables[5][6:6] = [MEMORY_WARNING] * 3
    out = tmp_path / "eight_tables.md"
    text = "\n\n".join("\n".join(t) for t in tables) + "\n"
    out.write_text(text)
    rows = load_bench_file(out, ngl=(99,) * 8)
    assert [(r.test, r.tokens_per_s, r.tokens_per_s_stddev, r.card_key, r.machine) for r in rows] == [
        ("pp512", 7698.65, 45.68, "l40s", "gpu"), ("tg128", 104.61, 0.03, "l40s", "gpu")] * 8
    first = text.split("\n").index(MEMORY_WARNING) + 1
    (note,) = rows[0].read_notes
    assert note_counts(rows[0].read_notes)[note] == (3, first) and "get_memory_info: [warning]" in note


def test_a_file_with_no_readable_table_is_refused_in_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Only a header, its separator and log lines: refused, the message naming the file and what it holds."""
    path = tmp_path / "header_only.md"
    path.write_text("| model | size | params | backend | ngl | test | t/s |\n"
                    "| --- | ---: | ---: | --- | --: | ---: | ---: |\n"
                    f"{MEMORY_WARNING}\n{PROMPT}\n")
    err = cli_refusal(path, {}, capsys)
    assert "1 llama-bench table header(s) and no row that can be read" in err and "no rows" in err
