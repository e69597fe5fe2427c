"""``iotrace bench --spec`` refusals through the CLI: each is one line on stderr and exit code 2, naming the value,
and none loads the model first. The CLI is called in this process (what these tests check is the command's answer,
not the process; the worker's imports are shared), but for one refusal through a real subprocess."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from iotrace.errors import InvalidValueError
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
    to plain decoding's. One repetition: the speedup cannot be told, so the file carries none."""
    import json

    from iotrace.render.speculation import speculation_text

    done = _in_process("bench", "--spec", "ngram", "--gamma", "2", "--gen-tokens", "6", "--json", "--reps", "1",
                       "--prompt", "It was the best of times, it was the worst of times, it was the best of")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    run = data["speculation"]["prompts"][0]["drafts"][0]["runs"][0]
    assert run["identical_to_plain"] is True and data["labels"] and "CPU" in data["labels"][0]
    interval = run["speedup_interval"]
    assert run["proposed"] > 0 and interval["verdict"] == "cannot tell (one repetition)" and run["speedup"] is None
    assert interval["low"] is None and interval["high"] is None and len(interval["values"]) == 1
    assert interval["values"][0] == pytest.approx(interval["plain_wall_s"][0] / interval["spec_wall_s"][0])
    assert "one repetition: cannot tell" in speculation_text(data)
    path = tmp_path / "spec.json"
    path.write_text(done.stdout)
    worked = json.loads(_in_process("math", "spec", "--bench", str(path), "--json").stdout)
    assert len(worked) == 1
    alpha = run["full_alpha"] if run["full_alpha"] is not None else run["alpha"]
    expected = sum(alpha ** i for i in range(3))  # 1 + α + α², identity 5 at γ = 2 summed term by term
    assert abs(worked[0]["result"]["value"] - expected) < 1e-9
    assert worked[0]["inputs"][0]["value"] == alpha and "measured" in worked[0]["inputs"][0]["source"]
    _error(_in_process("math", "spec", "--bench", str(path), "--gamma", "7"), "γ = 7")


#: A prompt on which prompt lookup finds no earlier occurrence of any 2-to-4-token suffix in 8 greedy tokens of the
#: pinned model (" Paris.\n\nThe answer is:"): the draft proposes nothing, every step is the target's own.
NOTHING_TO_LOOK_UP = "The capital of France is"


@pytest.mark.slow
def test_a_draft_that_proposes_nothing_reports_plain_decoding_not_a_speedup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32: with nothing proposed, speculative decoding is plain decoding: no speedup (null) with the reason, in
    the JSON and the table, and no best γ; the repetitions alternate plain and speculative runs (the progress names
    each repetition), and greedy tokens are checked in every one."""
    import json

    from iotrace.model import spec_bench
    from iotrace.render.speculation import speculation_text

    said: list[str] = []
    original = spec_bench.run_spec_bench

    def recording(request, card=None, progress=lambda _: None):
        def both(text: str) -> None:
            said.append(text)
            progress(text)
        return original(request, card, progress=both)

    monkeypatch.setattr(spec_bench, "run_spec_bench", recording)
    done = _in_process("bench", "--spec", "ngram", "--gamma", "1,2", "--gen-tokens", "8", "--reps", "2", "--json",
                       "--prompt", NOTHING_TO_LOOK_UP)
    assert done.returncode == 0, done.stderr
    assert said == ["loading the model", *(f"prompt, rep {rep} of 2: {what}" for rep in (1, 2)
                                           for what in ("plain decoding", "ngram, γ = 1", "ngram, γ = 2"))]
    data = json.loads(done.stdout)
    prompt = data["speculation"]["prompts"][0]
    assert data["speculation"]["reps"] == 2 and data["manifest"]["request"]["reps"] == 2
    assert prompt["plain"]["identical_across_reps"] is True and len(prompt["plain"]["wall_s_reps"]) == 2
    draft = prompt["drafts"][0]
    for run in draft["runs"]:
        interval = run["speedup_interval"]
        assert run["proposed"] == 0 and run["steps"] == 7 and run["speedup"] is None and run["draft_cost"] is None
        assert (interval["verdict"], interval["reason"]) == ("no draft tokens proposed",
                                                             "no draft tokens proposed: this was plain decoding")
        assert interval["mean"] is None and interval["values"] == [] and len(interval["spec_wall_s"]) == 2
        assert interval["plain_wall_s"] == prompt["plain"]["wall_s_reps"]
        assert run["identical_to_plain"] is True and run["identical_to_plain_reps"] == [True, True]
    best = draft["best_gamma"]
    assert best["measured"] is None and best["gains"] == []
    assert best["measured_reason"] == "no draft tokens proposed at any γ: this was plain decoding"
    text = speculation_text(data)
    assert text.count("no draft tokens proposed: this was plain decoding") == 2  # the speedup cell of both rows
    assert "best γ measured 1" not in text and "best γ measured 2" not in text
    assert "prompt / ngram: no best γ measured (no draft tokens proposed at any γ: this was plain decoding)" in text


def test_reps_below_one_is_refused_before_the_model_loads() -> None:
    from iotrace.model.spec_bench import SpecRequest, run_spec_bench, spec_prompts

    with pytest.raises(InvalidValueError, match="--reps 0"):
        run_spec_bench(SpecRequest(drafts=("ngram",), gammas=(2,), prompts=spec_prompts()[:1], reps=0))
    _error(_in_process("bench", "--spec", "ngram", "--reps", "0"), "--reps")
