"""``iotrace.model.imported``: llama-bench and vLLM bench files read into rows with the walls beside them.

The fixtures in tests/data/bench_import/ follow the real formats (their README says where each came from). The
llama-bench README's published example
(https://github.com/ggml-org/llama.cpp/blob/5a32f10adf766d67ebc31e3525a257ce57956ca2/tools/llama-bench/README.md,
build 8cf427ff (5163), RTX 4080) is copied unchanged and its values are asserted as printed there. The walls are
computed here by hand from the CardBook's figures (iotrace/data/cards.toml), not with the module's own helpers.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError, IotraceError, UnknownCardError
from iotrace.model.imported import GGML_KV_BYTES_PER_VALUE, TABLE_COLUMNS, imported_table, load_bench_file
from iotrace.model_shapes import model

DATA = Path(__file__).parent / "data" / "bench_import"
RTX3090_BW = 936e9  # cards.toml rtx3090 memory_bandwidth_gbs
RTX3090_INT8 = 284e12  # cards.toml rtx3090 int8_tensor
RTX4090_BW = 1008e9
H100_BW = 3350e9  # cards.toml h100-sxm
LLAMA3_8B_Q4KM_BYTES = 4920734720
LLAMA3_8B_PARAMS = 8030261248


def test_the_cardbook_figures_used_by_hand_are_the_cardbooks() -> None:
    assert lookup("rtx3090").bandwidth_bytes_per_s == RTX3090_BW
    assert lookup("rtx3090").peak_flop_per_s("int8_tensor") == RTX3090_INT8
    assert lookup("rtx4090").bandwidth_bytes_per_s == RTX4090_BW
    assert lookup("h100").bandwidth_bytes_per_s == H100_BW
    shape = model("llama-3-8b")
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.params) == (32, 8, 128, 8.03e9)


# --- llama-bench: the README's published example ---------------------------------------------------------------------


def test_readme_json_rows_as_published() -> None:
    runs = load_bench_file(DATA / "llama_bench_readme_b5163.json")
    assert [r.test for r in runs] == ["pp512", "tg128"]
    pp, tg = runs
    assert (pp.phase, pp.prompt_tokens, pp.gen_tokens, pp.depth, pp.batch) == ("prefill", 512, 0, 0, 1)
    assert (tg.phase, tg.prompt_tokens, tg.gen_tokens, tg.depth, tg.batch) == ("decode", 0, 128, 0, 1)
    assert pp.tokens_per_s == 7100.002165 and pp.tokens_per_s_stddev == 140.341520
    assert tg.tokens_per_s == 118.881588 and tg.tokens_per_s_stddev == 1.041811
    assert tg.latency_avg_s == pytest.approx(1.07676788)
    assert pp.weight_bytes == 4677120000 and pp.params == 7615616512
    assert pp.engine == "llama.cpp" and pp.engine_version == "8cf427ff (5163)"
    assert pp.model == "Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    assert pp.source.endswith("llama_bench_readme_b5163.json#0") and tg.source.endswith("#1")
    assert tg.kv_bytes_per_value == 2.0  # type_k = type_v = f16
    assert tg.raw["samples_ts"] == [119.03, 120.178, 119.43, 118.307, 117.464]


def test_the_readme_runs_card_is_matched_and_gets_its_walls() -> None:
    pp, tg = load_bench_file(DATA / "llama_bench_readme_b5163.json")
    assert pp.card_name == tg.card_name == "NVIDIA GeForce RTX 4080" and pp.card_key == tg.card_key == "rtx4080"
    # Identity 1: the RTX 4080's 716.8 GB/s over the model_size the file states.
    assert tg.decode_wall_tok_s == pytest.approx(716.8e9 / tg.raw["model_size"], rel=1e-9)


def test_a_card_the_cardbook_lacks_is_no_error_but_no_wall(tmp_path: Path) -> None:
    # The README run with its GPU renamed to one no card matches: the same real schema and values.
    text = (DATA / "llama_bench_readme_b5163.json").read_text().replace("NVIDIA GeForce RTX 4080", "NVIDIA Foo 9000")
    (tmp_path / "renamed.json").write_text(text)
    for run in load_bench_file(tmp_path / "renamed.json"):
        assert run.card_name == "NVIDIA Foo 9000" and run.card_key is None
        assert run.decode_wall_tok_s is None and run.prefill_wall_tok_s is None and run.fraction_of_wall is None
        assert "card 'NVIDIA Foo 9000' not in the CardBook; pass --card" in run.wall_note


def test_readme_jsonl_with_a_named_card() -> None:
    pp, tg = load_bench_file(DATA / "llama_bench_readme_b5163.jsonl", card="rtx4090")
    assert pp.source.endswith("llama_bench_readme_b5163.jsonl:1") and tg.source.endswith(":2")
    assert pp.tokens_per_s == 7263.609157 and pp.tokens_per_s_stddev == 90.940578
    assert tg.tokens_per_s == 119.844681 and tg.tokens_per_s_stddev == 0.699739
    assert tg.card_key == "rtx4090" and tg.card_name == "NVIDIA GeForce RTX 4090"
    wall = 1 * RTX4090_BW / 4677120000  # batch 1, depth 0: the weights alone
    assert tg.decode_wall_tok_s == pytest.approx(wall)
    assert tg.fraction_of_wall == pytest.approx(119.844681 / wall)
    assert pp.prefill_wall_tok_s == pytest.approx(660.6e12 / (2 * 7615616512))  # rtx4090 int8_tensor: quantized
    assert "int8_tensor" in pp.wall_note


# --- llama-bench: depth and a quantized KV cache on an RTX 3090 ------------------------------------------------------


def test_rtx3090_rows() -> None:
    runs = load_bench_file(DATA / "llama_bench_rtx3090_depth.json")
    assert [(r.test, r.phase, r.depth) for r in runs] == [
        ("pp512", "prefill", 0), ("tg128", "decode", 0), ("pp512 @ d4096", "prefill", 4096),
        ("tg128 @ d4096", "decode", 4096)]
    assert [r.tokens_per_s for r in runs] == [4836.457387, 125.299249, 4090.572148, 111.255403]
    assert [r.tokens_per_s_stddev for r in runs] == [12.253258, 0.166491, 9.488921, 0.131155]
    for run in runs:
        assert run.card_key == "rtx3090" and run.batch == 1
        assert run.weight_bytes == LLAMA3_8B_Q4KM_BYTES and run.params == LLAMA3_8B_PARAMS
        assert run.kv_bytes_per_value == 34 / 32  # q8_0: 34-byte blocks of 32 values (ggml-common.h)
        assert run.engine_version == "0104b151 (7311)"
        assert run.raw["flash_attn"] == 1


def test_decode_wall_by_hand_rtx3090() -> None:
    runs = load_bench_file(DATA / "llama_bench_rtx3090_depth.json", model="llama-3-8b")
    tg0, tg4096 = runs[1], runs[3]
    wall0 = RTX3090_BW / LLAMA3_8B_Q4KM_BYTES  # ≈ 190.2 tok/s
    assert tg0.decode_wall_tok_s == pytest.approx(wall0)
    assert tg0.fraction_of_wall == pytest.approx(125.299249 / wall0)
    assert tg0.decode_wall_tok_s == pytest.approx(190.2, abs=0.05)
    kv = 2 * 32 * 8 * 128 * 4096 * 34 / 32  # K and V · layers · KV heads · head dim · depth · q8_0 bytes
    assert kv == 285212672
    wall4096 = RTX3090_BW / (LLAMA3_8B_Q4KM_BYTES + kv)
    assert tg4096.step_bytes == LLAMA3_8B_Q4KM_BYTES + kv
    assert tg4096.decode_wall_tok_s == pytest.approx(wall4096)
    assert tg4096.fraction_of_wall == pytest.approx(111.255403 / wall4096)
    assert tg4096.wall_note is None
    assert tg0.prefill_wall_tok_s is None and tg4096.prefill_wall_tok_s is None


def test_prefill_wall_by_hand_rtx3090() -> None:
    pp0, _, pp4096, _ = load_bench_file(DATA / "llama_bench_rtx3090_depth.json")
    wall = RTX3090_INT8 / (2 * LLAMA3_8B_PARAMS)  # quantized weights: the int8 tensor peak bounds MMQ
    assert pp0.prefill_wall_tok_s == pytest.approx(wall) == pp4096.prefill_wall_tok_s
    assert pp0.fraction_of_wall == pytest.approx(4836.457387 / wall)
    assert pp0.decode_wall_tok_s is None


def test_without_a_model_shape_the_kv_cache_is_left_out_and_said() -> None:
    tg4096 = load_bench_file(DATA / "llama_bench_rtx3090_depth.json")[3]
    assert tg4096.decode_wall_tok_s == pytest.approx(RTX3090_BW / LLAMA3_8B_Q4KM_BYTES)
    assert "KV cache at depth 4096 left out" in tg4096.wall_note and "--model" in tg4096.wall_note
    unknown = load_bench_file(DATA / "llama_bench_rtx3090_depth.json", model="llama-9-8b")[3]
    assert "no model called 'llama-9-8b'" in unknown.wall_note


def test_json_and_jsonl_of_the_same_run_give_the_same_rows() -> None:
    from_json = load_bench_file(DATA / "llama_bench_rtx3090_depth.json", model="llama-3-8b")
    from_jsonl = load_bench_file(DATA / "llama_bench_rtx3090_depth.jsonl", model="llama-3-8b")
    assert len(from_json) == len(from_jsonl) == 4
    for a, b in zip(from_json, from_jsonl, strict=True):
        assert replace(a, source="") == replace(b, source="")


def test_a_json_array_rewritten_as_jsonl_reads_the_same(tmp_path: Path) -> None:
    rows = json.loads((DATA / "llama_bench_readme_b5163.json").read_text())
    lines = tmp_path / "same.jsonl"
    lines.write_text("".join(json.dumps(row) + "\n" for row in rows))
    a = load_bench_file(DATA / "llama_bench_readme_b5163.json", card="rtx4090")
    b = load_bench_file(lines, card="rtx4090")
    assert [replace(r, source="") for r in a] == [replace(r, source="") for r in b]


def test_the_extension_is_not_what_decides(tmp_path: Path) -> None:
    odd = tmp_path / "results.txt"
    odd.write_bytes((DATA / "llama_bench_rtx3090_depth.jsonl").read_bytes())
    assert len(load_bench_file(odd)) == 4


def test_mixed_kv_types_average_their_widths(tmp_path: Path) -> None:
    rows = json.loads((DATA / "llama_bench_rtx3090_depth.json").read_text())
    rows[3]["type_v"] = "q4_0"
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(rows))
    tg = load_bench_file(path, model="llama-3-8b")[3]
    assert tg.kv_bytes_per_value == (34 / 32 + 18 / 32) / 2
    kv = 32 * 8 * 128 * 4096 * (34 / 32 + 18 / 32)  # L · n_kv · d_h · S · (q_k + q_v)
    assert tg.decode_wall_tok_s == pytest.approx(RTX3090_BW / (LLAMA3_8B_Q4KM_BYTES + kv))
    assert GGML_KV_BYTES_PER_VALUE["q4_0"] == 18 / 32 and GGML_KV_BYTES_PER_VALUE["f16"] == 2.0


def test_cpu_runs_unknown_kv_types_and_two_cards(tmp_path: Path) -> None:
    rows = json.loads((DATA / "llama_bench_rtx3090_depth.json").read_text())
    cpu = dict(rows[1], n_gpu_layers=0)
    odd_kv = dict(rows[3], type_k="turbo3")
    two = dict(rows[1], gpu_info="NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 3090")
    other = dict(rows[1], gpu_info="NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 4090")
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([cpu, odd_kv, two, other]))
    cpu_run, odd_run, two_run, other_run = load_bench_file(path, model="llama-3-8b")
    assert cpu_run.decode_wall_tok_s is None and "n_gpu_layers 0" in cpu_run.wall_note
    assert odd_run.kv_bytes_per_value is None and "KV type turbo3 unknown" in odd_run.wall_note
    assert odd_run.decode_wall_tok_s == pytest.approx(RTX3090_BW / LLAMA3_8B_Q4KM_BYTES)
    assert two_run.decode_wall_tok_s == pytest.approx(RTX3090_BW / LLAMA3_8B_Q4KM_BYTES)
    assert "layer split" in two_run.wall_note
    assert other_run.decode_wall_tok_s is None and "several different GPUs" in other_run.wall_note


def test_a_named_card_overrides_the_files_and_an_unknown_one_is_an_error() -> None:
    tg = load_bench_file(DATA / "llama_bench_rtx3090_depth.json", card="4090")[1]
    assert tg.card_key == "rtx4090"
    assert tg.decode_wall_tok_s == pytest.approx(RTX4090_BW / LLAMA3_8B_Q4KM_BYTES)
    with pytest.raises(UnknownCardError, match="rtx 3091"):
        load_bench_file(DATA / "llama_bench_rtx3090_depth.json", card="rtx 3091")


def test_a_model_that_is_not_the_files_is_flagged() -> None:
    tg = load_bench_file(DATA / "llama_bench_readme_b5163.json", card="rtx4090", model="llama-3-70b")[1]
    assert "is --model right?" in tg.wall_note


def test_leading_log_lines_before_the_json_are_skipped(tmp_path: Path) -> None:
    # ggml-org/llama.cpp issue #15554: the Vulkan backend prints its device list on stdout ahead of -o json.
    path = tmp_path / "with-log.json"
    path.write_text("ggml_vulkan: Found 1 Vulkan devices:\nggml_vulkan: 0 = AMD Radeon RX 580 Series (RADV POLARIS10)\n"
                    + (DATA / "llama_bench_readme_b5163.json").read_text())
    assert [r.tokens_per_s for r in load_bench_file(path)] == [7100.002165, 118.881588]


def test_a_pg_test_is_end_to_end_without_a_single_wall(tmp_path: Path) -> None:
    row = dict(json.loads((DATA / "llama_bench_rtx3090_depth.json").read_text())[0], n_prompt=512, n_gen=128)
    path = tmp_path / "pg.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (run,) = load_bench_file(path)
    assert (run.test, run.phase, run.source.endswith("pg.jsonl:1")) == ("pp512+tg128", "end-to-end", True)
    assert run.decode_wall_tok_s is None and run.prefill_wall_tok_s is None and "pp and tg rows" in run.wall_note


# --- vLLM -------------------------------------------------------------------------------------------------------------


def test_vllm_latency_needs_the_run_arguments() -> None:
    with pytest.raises(InvalidValueError, match=r"vllm_latency\.json.*does not record") as caught:
        load_bench_file(DATA / "vllm_latency.json")
    assert "--batch" in str(caught.value) and "--input-len" in str(caught.value)
    with pytest.raises(InvalidValueError, match="--output-len") as caught:
        load_bench_file(DATA / "vllm_latency.json", batch=8, input_len=32)
    assert "--batch," not in str(caught.value)


def test_vllm_latency_row_and_decode_wall_by_hand() -> None:
    data = json.loads((DATA / "vllm_latency.json").read_text())
    (run,) = load_bench_file(DATA / "vllm_latency.json", card="h100", model="llama-3-8b", batch=8, input_len=32,
                             output_len=128)
    assert (run.engine, run.phase, run.batch, run.prompt_tokens, run.gen_tokens, run.depth) == (
        "vllm", "end-to-end", 8, 32, 128, 32)
    assert run.latency_avg_s == data["avg_latency"] == pytest.approx(0.9126023333)
    assert run.latency_p50_s == data["percentiles"]["50"]
    assert run.latency_p90_s == data["percentiles"]["90"] and run.latency_p99_s == data["percentiles"]["99"]
    assert run.tokens_per_s == pytest.approx(8 * 128 / data["avg_latency"])
    assert run.tokens_per_s_stddev == pytest.approx(statistics.stdev(8 * 128 / x for x in data["latencies"]))
    weights = 8.03e9 * 2  # bf16
    kv = 8 * 2 * 32 * 8 * 128 * 32 * 2  # batch · K and V · layers · KV heads · head dim · depth · bf16 bytes
    assert run.weight_bytes == weights and run.step_bytes == pytest.approx(weights + kv)
    wall = 8 * H100_BW / (weights + kv)
    assert run.decode_wall_tok_s == pytest.approx(wall)
    assert run.fraction_of_wall == pytest.approx(run.tokens_per_s / wall)
    assert "includes the prefill" in run.wall_note and "pass --card" not in run.wall_note


def test_vllm_latency_without_std_and_without_card_or_model() -> None:
    (run,) = load_bench_file(DATA / "vllm_latency_no_std.json", batch=1, input_len=1024, output_len=128, dtype="fp16")
    assert run.latency_avg_s == 2.7179532 and run.latency_p99_s == 2.73040508
    assert run.tokens_per_s == pytest.approx(128 / 2.7179532)
    assert run.weight_bytes is None and run.decode_wall_tok_s is None and run.card_key is None
    assert "pass --card" in run.wall_note
    (fp8,) = load_bench_file(DATA / "vllm_latency_no_std.json", batch=1, input_len=1024, output_len=128,
                             dtype="fp8e4m3", model="llama-3-8b", card="h100")
    assert fp8.weight_bytes == 8.03e9 and fp8.kv_bytes_per_value == 2.0


def test_vllm_throughput_row() -> None:
    data = json.loads((DATA / "vllm_throughput.json").read_text())
    (run,) = load_bench_file(DATA / "vllm_throughput.json", card="h100", model="llama-3-8b", input_len=128,
                             output_len=128)
    assert run.tokens_per_s == data["tokens_per_second"] == pytest.approx(256000 / 41.87215932901017)
    assert run.requests == 1000 and run.batch is None and (run.prompt_tokens, run.gen_tokens) == (128, 128)
    assert run.decode_wall_tok_s is None and run.prefill_wall_tok_s is None
    assert "no single wall" in run.wall_note and "prompt + output" in run.wall_note
    assert run.raw == data


# --- bad input ----------------------------------------------------------------------------------------------------


def test_readme_csv_row_as_published() -> None:
    """``-o csv`` quotes every cell; each is typed as llama-bench's ``test::get_field_type`` says."""
    import csv

    with (DATA / "llama_bench_readme_b5163.csv").open(newline="") as handle:
        want = list(csv.DictReader(handle))
    runs = load_bench_file(DATA / "llama_bench_readme_b5163.csv")
    assert len(runs) == len(want) == 1
    (run,), (row,) = runs, want
    assert run.tokens_per_s == float(row["avg_ts"]) and run.tokens_per_s_stddev == float(row["stddev_ts"])
    assert (run.prompt_tokens, run.gen_tokens, run.phase) == (int(row["n_prompt"]), int(row["n_gen"]), "prefill")
    assert run.weight_bytes == int(row["model_size"]) and run.params == int(row["model_n_params"])
    assert run.engine_version == f"{row['build_commit']} ({row['build_number']})" and run.card_key == "rtx4080"
    assert run.raw["no_kv_offload"] is False and run.ubatch == int(row["n_ubatch"])


@pytest.mark.parametrize(("fixture", "said"), [
    ("kineto_trace.json", "Kineto"),
    ("unrelated.json", "keys model, top1"),
    ("llama_bench_empty.json", "empty JSON array"),
    ("README.md", "not JSON"),
])
def test_bad_files_are_one_line_errors_naming_the_file(fixture: str, said: str) -> None:
    with pytest.raises(InvalidValueError) as caught:
        load_bench_file(DATA / fixture)
    message = str(caught.value)
    assert str(DATA / fixture) in message and said in message and "\n" not in message


def test_a_run_cut_short_keeps_its_finished_rows_and_names_the_cut_line() -> None:
    """``-o json`` cut before its ``]`` (its first test whole, the second cut at line 39) and ``-o jsonl`` whose third
    line is cut: the whole rows are read as in the uncut file, and a note names the cut line."""
    whole = load_bench_file(DATA / "llama_bench_readme_b5163.json")
    (first,) = load_bench_file(DATA / "llama_bench_truncated.json")
    assert (first.tokens_per_s, first.test) == (whole[0].tokens_per_s, whole[0].test) == (7100.002165, "pp512")
    assert first.source.endswith("llama_bench_truncated.json#0")
    assert len(first.read_notes) == 1 and "cut short" in first.read_notes[0] and "line 39" in first.read_notes[0]
    lines = (DATA / "llama_bench_bad_line.jsonl").read_text().splitlines()
    rows = load_bench_file(DATA / "llama_bench_bad_line.jsonl")
    assert [r.tokens_per_s for r in rows] == [json.loads(line)["avg_ts"] for line in lines[:2]]
    assert {r.read_notes for r in rows} == {rows[0].read_notes} and "(line 3: " in rows[0].read_notes[0]


def test_pasted_csv_and_json_keep_their_rows_and_note_the_lines_skipped(tmp_path: Path) -> None:
    """llama-bench ``-o csv`` and ``-o json`` as a terminal shows them: the run's log lines before the header and
    between the rows, CRLF, a second CSV row cut short, a shell prompt after; each row as in the file, one note per
    kind naming its first line and count."""
    log = "llama_model_loader: loaded meta data with 29 key-value pairs and 291 tensors from model.gguf"
    header, row = (DATA / "llama_bench_readme_b5163.csv").read_text().splitlines()[:2]
    path = tmp_path / "pasted.csv"
    path.write_bytes("\r\n".join([log, header, log, log, row, row[:40], "user@box:~/llama.cpp$ "]).encode())
    (run,) = load_bench_file(path)
    assert run.tokens_per_s == load_bench_file(DATA / "llama_bench_readme_b5163.csv")[0].tokens_per_s
    assert run.source == f"{path}:5"
    notes = "; ".join(run.read_notes)
    assert len(run.read_notes) == 4
    assert "skipped 1 log line(s) before the CSV header (line 1: llama_model_loader" in notes
    assert "skipped 2 log line(s) between the CSV rows (the first line 3: " in notes
    assert "skipped 1 row(s) cut short at the end (line 6: " in notes
    assert "skipped 1 shell prompt line(s) (line 7: user@box:~/llama.cpp$)" in notes
    lines = (DATA / "llama_bench_readme_b5163.json").read_text().split("\n")
    closing = next(i for i, line in enumerate(lines) if line.startswith("  },"))
    path = tmp_path / "pasted.json"
    path.write_text("\n".join([*lines[:closing + 1], log, f"[2025-04-24 11:58:51] {log}", *lines[closing + 1:],
                               "$ "]))
    assert [r.tokens_per_s for r in load_bench_file(path)] == [7100.002165, 118.881588]
    (note, prompt) = load_bench_file(path)[0].read_notes
    assert f"skipped 2 line(s) that are not JSON (log output) (the first line {closing + 2}: {log[:40]}" in note
    assert prompt.startswith(f"skipped 1 shell prompt line(s) (line {len(lines) + 3}: $)")


@pytest.mark.parametrize(("content", "said"), [
    (b"", "is empty"),
    (b"  \n\n", "is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "binary"),
    (b"[1, 2, 3]", "first item is int"),
    (b"[]", "empty JSON array"),
    (b"{}", "empty JSON object"),
    (b'{"avg_latency": 0.9, "latencies": [0.9], "percentiles": {"50": 0.9}', "invalid JSON at line 1"),
    (b'[{"benchmark": {"name": "vLLM benchmark"}, "metric": {"name": "latency"}, "model": {"name": "m"}}]',
     ".pytorch.json"),
    (b'{"duration": 10.0, "completed": 100, "output_throughput": 800.0, "mean_ttft_ms": 40.0}', "bench serve"),
])
def test_bad_content(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(content)
    with pytest.raises(InvalidValueError) as caught:
        load_bench_file(path)
    assert str(path) in str(caught.value) and said in str(caught.value)


def test_a_bad_row_names_its_row(tmp_path: Path) -> None:
    rows = json.loads((DATA / "llama_bench_readme_b5163.json").read_text())
    rows[1]["avg_ts"] = "fast"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(InvalidValueError, match=r"bad\.json#1: avg_ts is 'fast'"):
        load_bench_file(path)
    rows[1] = {"hello": "world"}
    path.write_text(json.dumps(rows))
    with pytest.raises(InvalidValueError, match=r"bad\.json#1 is not a llama-bench test object"):
        load_bench_file(path)
    lines = tmp_path / "bad.jsonl"
    lines.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"n_prompt": 0, "n_gen": 0, "avg_ts": 1.0}) + "\n")
    with pytest.raises(InvalidValueError, match=r"bad\.jsonl:2: n_prompt and n_gen are both 0"):
        load_bench_file(lines)


def test_missing_file_bad_dtype_and_bad_lengths(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="no such file"):
        load_bench_file(tmp_path / "absent.json")
    with pytest.raises(InvalidValueError, match="is a directory"):
        load_bench_file(tmp_path)
    with pytest.raises(InvalidValueError, match="dtype 'auto'"):
        load_bench_file(DATA / "vllm_throughput.json", dtype="auto")
    with pytest.raises(InvalidValueError, match="batch 0"):
        load_bench_file(DATA / "vllm_latency.json", batch=0, input_len=1, output_len=1)
    assert issubclass(InvalidValueError, IotraceError)


# --- the table ------------------------------------------------------------------------------------------------------


def test_the_table() -> None:
    runs = load_bench_file(DATA / "llama_bench_rtx3090_depth.json", model="llama-3-8b")
    runs += load_bench_file(DATA / "llama_bench_readme_b5163.json")
    table = imported_table(runs)
    assert tuple(table.columns) == TABLE_COLUMNS and len(table) == 6
    assert list(table["test"][:4]) == ["pp512", "tg128", "pp512 @ d4096", "tg128 @ d4096"]
    assert list(table["card"]) == ["rtx3090"] * 4 + ["rtx4080"] * 2
    assert table["decode wall tok/s"][1] == round(RTX3090_BW / LLAMA3_8B_Q4KM_BYTES, 1)
    assert table["% of wall"][1] == round(100 * 125.299249 / (RTX3090_BW / LLAMA3_8B_Q4KM_BYTES), 1)
    assert table["tok/s"].dtype.kind == "f" and table["decode wall tok/s"].isna().tolist() == [
        True, False, True, False, True, False]
    assert list(table["batch"]) == [1] * 6 and list(table["depth"]) == [0, 0, 4096, 4096, 0, 0]
    # The RTX 4080 run (llama.cpp README): avg_ts 118.881588 tok/s against 716.8 GB/s / 4,677,120,000 B.
    assert table["% of wall"][5] == round(100 * 118.881588 / (716.8e9 / 4_677_120_000), 1)
    assert list(imported_table([]).columns) == list(TABLE_COLUMNS)


def test_rows_serialise_to_json() -> None:
    (run,) = load_bench_file(DATA / "vllm_throughput.json")
    again = json.loads(json.dumps(run.to_dict()))
    assert again["tokens_per_s"] == run.tokens_per_s and again["raw"]["num_requests"] == 1000


def test_sglang_bench_one_batch_gives_a_prefill_and_a_decode_row_per_batch() -> None:
    """A static batch: its decode wall is identity 1 for ``batch_size`` sequences at ``input_len`` tokens of KV."""
    rows = [json.loads(line) for line in (DATA / "sglang_one_batch.jsonl").read_text().splitlines()]
    runs = load_bench_file(DATA / "sglang_one_batch.jsonl", card="h100", model="llama-3-8b")
    assert [(r.phase, r.batch) for r in runs] == [("prefill", 1), ("decode", 1), ("prefill", 8), ("decode", 8)]
    shape = model("llama-3-8b")
    for (prefill, decode), row in zip((runs[:2], runs[2:]), rows, strict=True):
        assert prefill.tokens_per_s == row["prefill_throughput"] and decode.tokens_per_s == row[
            "median_decode_throughput"]
        kv_per_sequence = 2 * shape.layers * shape.kv_heads * shape.head_dim * row["input_len"] * 2  # K and V, bf16
        wall = row["batch_size"] * H100_BW / (shape.params * 2 + row["batch_size"] * kv_per_sequence)
        assert decode.decode_wall_tok_s == pytest.approx(wall, rel=1e-12)
        assert decode.fraction_of_wall == pytest.approx(row["median_decode_throughput"] / wall, rel=1e-12)
        assert prefill.prefill_wall_tok_s == pytest.approx(
            lookup("h100").peak_flop_per_s("bf16_tensor") / (2 * shape.params), rel=1e-12)
        assert (decode.engine, decode.depth, decode.source.endswith(f":{rows.index(row) + 1}")) == ("sglang", 1024,
                                                                                                   True)


def test_the_llama_bench_command_above_a_markdown_table_names_its_ngl_and_is_kept(tmp_path: Path) -> None:
    """A table that hides ngl (a BLAS build) is placed by the command printed above it; a compiler line that merely
    names the binary (``-o llama-bench``) is not a command."""
    table = ["| model | size | params | backend | threads | test | t/s |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |",
             "| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA,BLAS | 16 | tg128 | 101.50 ± 0.20 |"]
    text = ["g++ -O3 main.o -o llama-bench -lcuda", "Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9",
            "$ ./build/bin/llama-bench -m llama8b.gguf -ngl 99 -t 16", *table, "", "build: 4426e298 (2824)"]
    path = tmp_path / "run.md"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    (run,) = load_bench_file(path)
    assert run.raw["command"] == "llama-bench -m llama8b.gguf -ngl 99 -t 16" and run.raw["n_gpu_layers"] == 99
    assert (run.card_key, run.machine) == ("rtx4090", "gpu") and "ngl 99 from the command" in run.wall_note
    path.write_text("\n".join(text[:2] + text[3:]) + "\n", encoding="utf-8")  # only the compiler line is left
    with pytest.raises(InvalidValueError, match="has no ngl column"):
        load_bench_file(path)
