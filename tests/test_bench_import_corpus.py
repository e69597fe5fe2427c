"""``load_bench_file`` on the real bench results in ../shared/corpus/bench-outputs/ (PROVENANCE.md, section "AMD
profiler outputs (rocprof/) and LLM benchmark outputs (bench-outputs/)"), plus a notebook and bad inputs made here.

Every expected value is read from the file by this test with plain str / json parsing (never iotrace's readers), and
every wall is recomputed by hand from the CardBook's ``bandwidth_bytes_per_s`` and ``peak_flop_per_s``. The corpus
files are read in place, never copied into the project; the tests skip (saying why) where ../shared/corpus is absent.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.model.imported import load_bench_file

L40S_MD = "l40s_epyc9534_llama-bench_cpu_gpu_b7199.md"
R9700_JSONL = "r9700_gfx1201_llama-bench_rocm_b7981.jsonl"
VLLM_SERVE = "8xmi300x_vllm0.6.3_benchmark_serving_llama3.1-405b-fp8_32qps.json"
VLLM_THROUGHPUT = "8xmi300x_vllm0.6.4_benchmark_throughput_405b-fp8-kv.json"
SGLANG = "4xh200_sglang_bench_serving_llama3.3-70b_offline.jsonl"
#: What each file's run used and its file does not say (PROVENANCE.md): the options `iotrace bench import` gets.
OPTIONS: dict[str, dict] = {
    L40S_MD: {"ngl": (0, 10, 99)},
    R9700_JSONL: {},
    VLLM_SERVE: {"card": "mi300x", "gpus": 8, "model": "llama-3.1-405b", "dtype": "fp8"},
    VLLM_THROUGHPUT: {"card": "mi300x", "gpus": 8, "model": "llama-3.1-405b", "dtype": "fp8"},
    SGLANG: {"card": "h200", "gpus": 4, "model": "llama-3.3-70b"},
}
EXACT = 1e-9  # relative: the library rounds a Markdown size to whole bytes; these figures do not


@pytest.fixture
def bench(corpus: Path) -> Path:
    return corpus / "bench-outputs"


def one_line_error(path: Path, **options) -> str:
    """The refusal of ``path``: one line that names the file."""
    with pytest.raises(InvalidValueError) as caught:
        load_bench_file(path, **options)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    return message


def md_rows(text: str, prefix: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each Markdown table line starting with ``prefix``, read here by hand."""
    return [(n, [c.strip() for c in line.strip().strip("|").split("|")])
            for n, line in enumerate(text.splitlines(), start=1) if line.startswith(prefix)]


def rate(cell: str) -> tuple[float, float]:
    mean, spread = cell.split("±")
    return float(mean), float(spread)


def gib(cell: str) -> float:
    number, unit = cell.split()
    assert unit == "GiB"
    return float(number) * 2 ** 30


# --- 1. llama-bench Markdown without an ngl column (L40S, CPU / partial / full offload) ------------------------------


def test_l40s_markdown_needs_ngl_and_names_the_first_row_it_cannot_place(bench: Path) -> None:
    """Test 2's table (header line 66) has no ngl column and a working CUDA device: its first row, line 68, is
    refused, and the message says to pass --ngl (Test 1 is placed on the CPU by its failed ggml_cuda_init line)."""
    message = one_line_error(bench / L40S_MD)
    assert f"{bench / L40S_MD}:68:" in message and "--ngl" in message


def test_l40s_markdown_rows_with_ngl(bench: Path) -> None:
    """With --ngl 0,10,99: the six rows in file order, their t/s cells, placement (cpu / partial / gpu), the L40S
    walls of the full offload by hand, the build and the weight format."""
    path = bench / L40S_MD
    text = path.read_text()
    expected = md_rows(text, "| qwen3 8B")
    rows = load_bench_file(path, ngl=(0, 10, 99))
    assert len(rows) == len(expected) == 6
    for row, (number, cells) in zip(rows, expected, strict=True):
        assert row.source == f"{path}:{number}"
        assert row.test == cells[5]
        assert (row.tokens_per_s, row.tokens_per_s_stddev) == rate(cells[6])
        assert row.engine_version == "8c32d9d96 (7199)"
        assert row.quant == "Q5_K - Medium"
    failure = next(line for line in text.splitlines() if "ggml_cuda_init: failed" in line)
    for row in rows[:2]:
        assert (row.machine, row.card_key, row.card_name) == ("cpu", None, "CPU")
        assert row.decode_wall_tok_s is row.prefill_wall_tok_s is row.fraction_of_wall is None
        assert failure in row.wall_note
    for row in rows[2:4]:
        assert (row.machine, row.card_key) == ("partial", "l40s")
        assert row.decode_wall_tok_s is row.prefill_wall_tok_s is row.fraction_of_wall is None
    assert [(r.machine, r.card_key) for r in rows[4:]] == [("gpu", "l40s")] * 2
    l40s = lookup("l40s")
    size, params = gib(expected[5][1][1]), float(expected[5][1][2].split()[0]) * 1e9
    assert size == 5.44 * 2 ** 30
    decode_wall = l40s.bandwidth_bytes_per_s / size
    assert rows[5].decode_wall_tok_s == pytest.approx(decode_wall, rel=EXACT)
    assert rows[5].fraction_of_wall == pytest.approx(104.61 / decode_wall, rel=EXACT)
    # pp512 at the default n_ubatch 512: quantized weights are bounded by the int8 tensor peak (compute-bound here)
    prefill_wall = min(l40s.peak_flop_per_s("int8_tensor") / (2 * params), 512 * l40s.bandwidth_bytes_per_s / size)
    assert rows[4].prefill_wall_tok_s == pytest.approx(prefill_wall, rel=EXACT)
    assert rows[4].fraction_of_wall == pytest.approx(7698.65 / prefill_wall, rel=EXACT)


# --- 2. llama-bench JSONL (R9700, n_ubatch sweep) ---------------------------------------------------------------------


def test_r9700_jsonl_ubatch_sweep_walls_by_hand(bench: Path) -> None:
    """100 pp512 rows: each line's avg_ts, n_ubatch and card, and its prefill wall = the lower of the int8 compute
    wall and n_ubatch micro-batches each reading every weight once; no fraction above 1."""
    path = bench / R9700_JSONL
    lines = path.read_text().splitlines()
    rows = load_bench_file(path)
    assert len(rows) == len(lines) == 100
    r9700 = lookup("r9700")
    for number, (row, line) in enumerate(zip(rows, lines, strict=True), start=1):
        obj = json.loads(line)
        assert row.source == f"{path}:{number}"
        assert row.tokens_per_s == obj["avg_ts"]
        assert row.ubatch == obj["n_ubatch"]
        assert row.test == f"pp{obj['n_prompt']}"
        assert (row.card_key, row.phase) == ("r9700", "prefill")
        assert "F16" not in obj["model_type"].upper().split()  # quantized weights: the int8 tensor peak applies
        wall = min(r9700.peak_flop_per_s("int8_tensor") / (2 * obj["model_n_params"]),
                   min(obj["n_ubatch"], obj["n_prompt"]) * r9700.bandwidth_bytes_per_s / obj["model_size"])
        assert row.prefill_wall_tok_s == pytest.approx(wall, rel=EXACT)
        assert row.fraction_of_wall == pytest.approx(obj["avg_ts"] / wall, rel=EXACT)
        assert 0 < row.fraction_of_wall <= 1


# --- 3-5. vLLM serve / throughput, SGLang bench_serving -------------------------------------------------------------


def test_vllm_serve_row_and_tensor_parallel_decode_wall(bench: Path) -> None:
    """One serving row: 1 / median TPOT per stream, the file's TTFTs and throughput, and the decode wall of eight
    MI300X's summed bandwidth over 405e9 fp8 weights (1 byte each); without --card no wall and a note saying so."""
    path = bench / VLLM_SERVE
    obj = json.loads(path.read_text())
    (row,) = load_bench_file(path, **OPTIONS[VLLM_SERVE])
    assert (row.phase, row.source, row.gpus, row.model) == ("serving", f"{path}:1", 8, obj["model_id"])
    assert row.tokens_per_s == pytest.approx(1000 / obj["median_tpot_ms"], rel=EXACT)
    assert row.output_tokens_per_s == obj["output_throughput"]
    assert row.ttft_median_s == pytest.approx(obj["median_ttft_ms"] / 1000, rel=EXACT)
    assert row.ttft_p99_s == pytest.approx(obj["p99_ttft_ms"] / 1000, rel=EXACT)
    assert row.requests == obj["completed"]
    assert row.prompt_tokens == round(obj["total_input_tokens"] / obj["completed"])
    assert row.request_rate == 32.0 == obj["request_rate"]
    wall = 8 * lookup("mi300x").bandwidth_bytes_per_s / (405e9 * 1.0)
    assert row.decode_wall_tok_s == pytest.approx(wall, rel=EXACT)
    assert row.fraction_of_wall == pytest.approx(row.tokens_per_s / wall, rel=EXACT)
    (bare,) = load_bench_file(path, gpus=8, model="llama-3.1-405b", dtype="fp8")
    assert bare.decode_wall_tok_s is None and bare.fraction_of_wall is None and bare.card_key is None
    assert "pass --card" in bare.wall_note
    assert bare.tokens_per_s == row.tokens_per_s


def test_vllm_throughput_row_has_no_wall(bench: Path) -> None:
    """tokens_per_second (prompt + output) and num_requests as the file has them; interleaved phases: no wall."""
    path = bench / VLLM_THROUGHPUT
    obj = json.loads(path.read_text())
    (row,) = load_bench_file(path, **OPTIONS[VLLM_THROUGHPUT])
    assert row.tokens_per_s == obj["tokens_per_second"]
    assert row.requests == obj["num_requests"]
    assert row.decode_wall_tok_s is row.prefill_wall_tok_s is row.fraction_of_wall is None
    assert row.wall_note


def test_sglang_offline_rows_with_infinite_request_rate(bench: Path) -> None:
    """Seven rows whose request_rate is the bare token Infinity: math.inf, "all at once"; 1 / median ITL per stream
    (no TPOT in this schema) against four H200s' decode wall over 70.6e9 bf16 weights."""
    path = bench / SGLANG
    lines = path.read_text().splitlines()
    rows = load_bench_file(path, **OPTIONS[SGLANG])
    assert len(rows) == len(lines) == 7
    wall = 4 * lookup("h200").bandwidth_bytes_per_s / (70.6e9 * 2)
    for number, (row, line) in enumerate(zip(rows, lines, strict=True), start=1):
        obj = json.loads(line)  # Python's json reads the bare Infinity
        assert row.source == f"{path}:{number}"
        assert row.request_rate == math.inf == obj["request_rate"]
        assert row.tokens_per_s == pytest.approx(1000 / obj["median_itl_ms"], rel=EXACT)
        assert row.output_tokens_per_s == obj["output_throughput"]
        assert "all at once" in row.test and obj["dataset_name"] in row.test
        assert row.requests == obj["completed"]
        assert row.decode_wall_tok_s == pytest.approx(wall, rel=EXACT)
        assert row.fraction_of_wall == pytest.approx(row.tokens_per_s / wall, rel=EXACT)


# --- 6. a Jupyter notebook that printed a llama-bench table ---------------------------------------------------------

NOTEBOOK_LINES = [
    "ggml_cuda_init: found 1 CUDA devices:",
    "  Device 0: \x1b[32mNVIDIA GeForce RTX 4090\x1b[0m, compute capability 8.9, VMM: yes",
    "| model | size | params | backend | ngl | test | t/s |",
    "| --- | ---: | ---: | --- | --: | ---: | ---: |",
    "| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA | 99 | pp512 | 7138.99 ± 14.96 |",
    "| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA | 99 | tg128 | 130.58 ± 0.66 |",
    "",
    "build: \x1b[1m4426e298\x1b[0m (2824)",
]


def test_notebook_stream_output_rows_name_their_cell_and_line(tmp_path: Path) -> None:
    """ANSI colour codes are stripped (the GPU name and the build hash are read through them); each row's source is
    "cell 2, line N" counted within the cell's output; the RTX 4090 walls by hand."""
    path = tmp_path / "bench.ipynb"
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": ["!./llama-bench -m llama8b.gguf"],
            "outputs": [{"output_type": "stream", "name": "stdout",
                         "text": [line + "\n" for line in NOTEBOOK_LINES]}]}
    smi = {"cell_type": "code", "execution_count": 0, "metadata": {}, "source": ["!nvidia-smi"],
           "outputs": [{"output_type": "stream", "name": "stdout", "text": [
               "| NVIDIA-SMI 535.161.08             Driver Version: 535.161.08   CUDA Version: 12.2     |\n"]}]}
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [smi, cell]}))
    rows = load_bench_file(path)
    # nvidia-smi's banner in an earlier cell names the machine's driver for every table after it
    assert {r.raw["driver"] for r in rows} == {"driver 535.161.08, CUDA 12.2 (nvidia-smi)"}
    assert [r.source for r in rows] == [f"{path} (cell 2, line 5)", f"{path} (cell 2, line 6)"]
    assert [(r.test, r.phase) for r in rows] == [("pp512", "prefill"), ("tg128", "decode")]
    assert [(r.tokens_per_s, r.tokens_per_s_stddev) for r in rows] == [(7138.99, 14.96), (130.58, 0.66)]
    assert {(r.card_key, r.machine, r.engine_version, r.quant) for r in rows} == {
        ("rtx4090", "gpu", "4426e298 (2824)", "Q4_K - Medium")}
    rtx4090, size = lookup("rtx4090"), 4.58 * 2 ** 30
    decode_wall = rtx4090.bandwidth_bytes_per_s / size
    assert rows[1].decode_wall_tok_s == pytest.approx(decode_wall, rel=EXACT)
    prefill_wall = min(rtx4090.peak_flop_per_s("int8_tensor") / (2 * 8.03e9),
                       512 * rtx4090.bandwidth_bytes_per_s / size)
    assert rows[0].prefill_wall_tok_s == pytest.approx(prefill_wall, rel=EXACT)
    assert rows[0].fraction_of_wall == pytest.approx(7138.99 / prefill_wall, rel=EXACT)


# --- 7. bad input: one line naming the file and the line ------------------------------------------------------------


def test_a_table_whose_header_lost_its_params_column_is_skipped_the_others_read(bench: Path, tmp_path: Path) -> None:
    """A llama-bench header that lost its params column (line 51 of an edited copy): that table (Test 1) is skipped
    with a note naming its line, Tests 2 and 3 are read; a file holding only that table is refused in one line."""
    text = (bench / L40S_MD).read_text()
    lines = text.splitlines(keepends=True)
    assert "|     params |" in lines[50]
    lines[50] = lines[50].replace("|     params |", "|     weight |")
    path = tmp_path / "no_params.md"
    path.write_text("".join(lines))
    rows = load_bench_file(path, ngl=(0, 10, 99))
    expected = md_rows(text, "| qwen3 8B")[2:]
    assert [(r.source, r.tokens_per_s) for r in rows] == [(f"{path}:{n}", rate(c[6])[0]) for n, c in expected]
    (note,) = rows[0].read_notes
    assert "line 51: no params column" in note
    alone = tmp_path / "only_no_params.md"
    alone.write_text("".join(lines[49:55]))
    message = one_line_error(alone, ngl=(0,))
    assert "no row that can be read" in message and "no params column" in message


def test_two_gpus_above_one_table_need_card(tmp_path: Path) -> None:
    """Two different Device lines above one table: the first row (line 6) is refused, saying to pass --card; with
    --card the rows are filed under that card."""
    path = tmp_path / "two_gpus.md"
    path.write_text("\n".join(["ggml_cuda_init: found 2 CUDA devices:",
                               "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes",
                               "  Device 1: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes",
                               *NOTEBOOK_LINES[2:6]]) + "\n")
    message = one_line_error(path)
    assert f"{path}:6:" in message and "pass --card" in message
    assert {r.card_key for r in load_bench_file(path, card="rtx4090")} == {"rtx4090"}


def test_a_row_with_a_size_in_an_unknown_unit_is_skipped_at_its_line(bench: Path, tmp_path: Path) -> None:
    """"5.44 GB" (llama-bench prints GiB or MiB) on the first qwen3 row, line 53: that row is skipped with a note
    naming its line and cell, the other five read."""
    path = tmp_path / "gb.md"
    path.write_text((bench / L40S_MD).read_text().replace("5.44 GiB", "5.44 GB", 1))
    rows = load_bench_file(path, ngl=(0, 10, 99))
    assert [r.source for r in rows] == [f"{path}:{n}" for n in (54, 68, 69, 83, 84)]
    (note,) = rows[0].read_notes
    assert "line 53: size '5.44 GB' is not in MiB or GiB" in note


def test_ngl_with_too_few_values_for_the_tables(bench: Path) -> None:
    """--ngl 0,99 for a file of three tables: refused, naming both counts."""
    message = one_line_error(bench / L40S_MD, ngl=(0, 99))
    assert "2 values for 3 tables" in message


def test_a_jsonl_row_on_a_card_the_cardbook_lacks_is_kept_without_walls(bench: Path, tmp_path: Path) -> None:
    """A row whose gpu_info the CardBook lacks is kept, card_key None and no walls, its note saying why; the row
    beside it on a known card keeps its walls."""
    first = json.loads((bench / R9700_JSONL).read_text().splitlines()[0])
    name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    path = tmp_path / "unknown_card.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps({**first, "gpu_info": name}) + "\n")
    known, unknown = load_bench_file(path)
    assert known.card_key == "r9700" and known.prefill_wall_tok_s is not None
    assert unknown.source == f"{path}:2" and unknown.tokens_per_s == first["avg_ts"]
    assert (unknown.card_key, unknown.card_name) == (None, name)
    assert unknown.prefill_wall_tok_s is unknown.decode_wall_tok_s is unknown.fraction_of_wall is None
    assert "not in the CardBook" in unknown.wall_note


def test_an_sglang_row_with_no_completed_request_is_refused_at_its_line(bench: Path, tmp_path: Path) -> None:
    """completed 0 on line 2 of an SGLang file: nothing was measured."""
    lines = (bench / SGLANG).read_text().splitlines()
    assert '"completed": 4000' in lines[1]
    path = tmp_path / "none_completed.jsonl"
    path.write_text(lines[0] + "\n" + lines[1].replace('"completed": 4000', '"completed": 0') + "\n")
    message = one_line_error(path, **OPTIONS[SGLANG])
    assert f"{path}:2:" in message and "completed is 0" in message


def test_a_serve_json_with_a_request_rate_that_is_no_number(bench: Path, tmp_path: Path) -> None:
    """request_rate "abc" in a vLLM serve result (its per-request lists dropped to keep the copy small)."""
    obj = {k: v for k, v in json.loads((bench / VLLM_SERVE).read_text()).items() if not isinstance(v, list)}
    path = tmp_path / "bad_rate.json"
    path.write_text(json.dumps({**obj, "request_rate": "abc"}))
    message = one_line_error(path, **OPTIONS[VLLM_SERVE])
    assert f"{path}:1:" in message and "request_rate is 'abc'" in message


def test_a_newer_serve_json_with_inf_rate_and_e2el_latencies(bench: Path, tmp_path: Path) -> None:
    """vllm/benchmarks/serve.py's save-result: request_rate "inf" (an infinite rate: all requests at once), its
    newer keys (failed, label, max_concurrency null) and the end-to-end latencies as mean_e2el_ms / median_e2el_ms."""
    obj = {k: v for k, v in json.loads((bench / VLLM_SERVE).read_text()).items() if not isinstance(v, list)}
    path = tmp_path / "inf_rate.json"
    path.write_text(json.dumps({**obj, "request_rate": "inf", "failed": 0, "label": None, "max_concurrency": None,
                                "mean_e2el_ms": 23456.5, "median_e2el_ms": 21000.25}))
    (row,) = load_bench_file(path, **OPTIONS[VLLM_SERVE])
    assert row.request_rate == math.inf and "all at once" in row.test and row.max_concurrency is None
    assert (row.latency_avg_s, row.latency_p50_s) == (23.4565, 21.00025)
    assert row.tokens_per_s == pytest.approx(1000 / obj["median_tpot_ms"], rel=EXACT)


# --- 8. the whole corpus ----------------------------------------------------------------------------------------------


def test_every_corpus_bench_file_keeps_fractions_under_their_walls(bench: Path) -> None:
    """Every file in bench-outputs/ (with its run's options): a fraction is only given beside the wall of the row's
    phase, equals the rate over that wall, and is never above 1. A file added to the folder is swept too."""
    files = sorted(p for p in bench.iterdir() if p.is_file())
    assert {p.name for p in files} >= set(OPTIONS)
    for path in files:
        rows = load_bench_file(path, **OPTIONS.get(path.name, {}))
        assert rows, path
        for row in rows:
            if row.fraction_of_wall is None:
                continue
            wall = row.prefill_wall_tok_s if row.phase == "prefill" else row.decode_wall_tok_s
            assert wall is not None, row.source
            assert row.fraction_of_wall == pytest.approx(row.tokens_per_s / wall, rel=EXACT), row.source
            assert 0 < row.fraction_of_wall <= 1, row.source
