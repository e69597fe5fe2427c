"""``iotrace bench --spec`` refusals through the CLI: each is one line on stderr and exit code 2, naming the value,
and none loads the model first. The CLI is called in this process (what these tests check is the command's answer,
not the process; the worker's imports are shared), but for one refusal through a real subprocess."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.conftest import run_cli_in_process as _in_process

gguf = pytest.importorskip("gguf", reason="the bench tests need iotrace[model] (make setup installs it)")



def _error(done, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _llama_gguf_with_vocab(path: Path, vocab: int) -> Path:
    """A metadata-complete Llama GGUF (one tiny layer's worth of header) whose vocabulary is ``vocab`` tokens."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_feed_forward_length(16)
    writer.add_vocab_size(vocab)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_context_length(64)
    writer.add_tensor("token_embd.weight", np.zeros((vocab, 8), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(("gamma", "needle"), [("0", "gamma 0"), ("65", "gamma 65"), ("x", "'x'")])
def test_gamma_out_of_range_is_one_line(gamma: str, needle: str) -> None:
    run = run_cli if gamma == "0" else _in_process  # one through a real process: exit 2, one line
    _error(run("bench", "--spec", "ngram", "--gamma", gamma), needle)


def test_batch_above_one_is_refused_with_the_reason() -> None:
    _error(_in_process("bench", "--spec", "ngram", "--batch", "2"), "--batch 2", "one sequence")


def test_an_unknown_draft_is_one_line() -> None:
    _error(_in_process("bench", "--spec", "medusa"), "'medusa'", "ngram, layerskip:K or draft:PATH")
    _error(_in_process("bench", "--spec", "layerskip:30"), "layerskip:30", "1 to 29")


@pytest.mark.slow
def test_a_draft_with_another_vocabulary_is_refused(tmp_path: Path) -> None:
    path = _llama_gguf_with_vocab(tmp_path / "small-vocab.gguf", 1000)
    _error(_in_process("bench", "--spec", f"draft:{path}"), "small-vocab.gguf", "1000 tokens", "49152")


@pytest.mark.parametrize(("content", "needles"), [
    (b"", ("empty",)),
    (b"  \n\t\n", ("empty",)),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", ("cannot read the prompt file",)),
    (b"text\x00with a NUL", ("not text", "NUL")),
])
def test_an_empty_or_binary_prompt_file_is_one_line(tmp_path: Path, content: bytes, needles) -> None:
    path = tmp_path / "prompt.txt"
    path.write_bytes(content)
    _error(_in_process("bench", "--spec", "ngram", "--prompt-file", str(path)), "prompt.txt", *needles)


@pytest.mark.slow
def test_a_spec_bench_file_feeds_identity_5(tmp_path: Path) -> None:
    """A real `bench --spec --json` run, then `math spec --bench` on its file: identity 5 at the file's measured α
    and γ (formula checked independently here), its measured tokens per step beside it, and greedy output equal
    to plain decoding's."""
    import json

    done = _in_process("bench", "--spec", "ngram", "--gamma", "2", "--gen-tokens", "6", "--json",
                   "--prompt", "It was the best of times, it was the worst of times, it was the best of")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    run = data["speculation"]["prompts"][0]["drafts"][0]["runs"][0]
    assert run["identical_to_plain"] is True and data["labels"] and "CPU" in data["labels"][0]
    path = tmp_path / "spec.json"
    path.write_text(done.stdout)
    worked = json.loads(_in_process("math", "spec", "--bench", str(path), "--json").stdout)
    assert len(worked) == 1
    alpha = run["full_alpha"] if run["full_alpha"] is not None else run["alpha"]
    expected = sum(alpha ** i for i in range(3))  # 1 + α + α², identity 5 at γ = 2 summed term by term
    assert abs(worked[0]["result"]["value"] - expected) < 1e-9
    assert worked[0]["inputs"][0]["value"] == alpha and "measured" in worked[0]["inputs"][0]["source"]
    _error(_in_process("math", "spec", "--bench", str(path), "--gamma", "7"), "γ = 7")
