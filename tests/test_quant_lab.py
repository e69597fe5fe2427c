"""The quantisation lab on the real pinned model, against references no one here wrote.

- Perplexity: the evaluator's baseline perplexity against transformers' own causal-LM loss (LlamaForCausalLM from the
  same GGUF, fp32) and against torch.nn.functional.cross_entropy on the logits.
- Bytes: the 16-bit row against the weights' own byte count, the file row against the GGUF's tensor sizes as the
  ``gguf`` reader reports them; the walls against bandwidth / bytes from the CardBook.
- Quality: re-quantising the Q4_1 baseline as q4_1 gives back the same weights (so KL 0, top-1 1); int4 with 64-groups
  drifts more than int8 per channel; KL ≥ 0 and top-1 in [0, 1] everywhere.
- The CLI: --json values and bad input (exit 2, one line naming the value), in process (the worker's loaded model is
  shared), one bad input and --list-formats through a real subprocess (the exit code of the process).

The lab measures the quantisation note's formats on the note's tokens, and the tests share one load and one
measurement per process with the note and the docs' `quant` examples (xdist_group "quant-lab"; run_lab caches per
format on the pinned baseline).
"""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

pytest.importorskip("gguf", reason="the model tests need iotrace[model] (make setup installs it)")
pytest.importorskip("transformers", reason="the model tests need iotrace[model]")

from iotrace.cards import lookup
from iotrace.errors import InvalidValueError
from iotrace.model.eval_text import reference_tokens
from iotrace.model.gguf_file import fast_gguf_package, open_gguf, pinned_gguf
from iotrace.model.ops import TorchOps
from iotrace.model.quality import quality_drop, reference_text, teacher_forced_logits, text_ids
from iotrace.model.quant_formats import parse_format, parse_formats
from iotrace.model.quant_lab import load_baseline, quantise_weights, run_lab
from iotrace.notes.quantisation import NOTE_TOKENS
from tests.conftest import cli_in_process, pinned_model, run_cli

#: One worker for the tests that share the cached baseline and lab rows (tests/test_notes.py's quantisation note and
#: tests/test_docs.py's `quant` examples join it).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("quant-lab")]

#: The note's tokens (one window of them): the lab's rows are the note's, measured once per process.
TOKENS = NOTE_TOKENS
FORMATS = "q4_1,int8-channel,int4-sym-g64"


@pytest.fixture
def baseline():
    pinned_model()
    return load_baseline()  # cached per process


@pytest.fixture
def lab(baseline):
    weights, tokenizer = baseline
    result = run_lab(weights, tokenizer, parse_formats(FORMATS), ["rtx3090", "h100"], tokens=TOKENS, window=None)
    return {r.key: r for r in result.rows}, result


def test_shipped_text_is_long_enough(baseline) -> None:
    _, tokenizer = baseline
    assert len(text_ids(tokenizer)) >= 2000
    assert len(text_ids(tokenizer)) == reference_tokens()  # the length eval_text.toml states, checked before loading
    assert reference_text().startswith("It is a truth universally acknowledged")
    assert text_ids(tokenizer, tokens=10) == text_ids(tokenizer)[:10]
    with pytest.raises(InvalidValueError, match="99999 tokens"):
        text_ids(tokenizer, tokens=99999)


def test_requantising_q4_1_gives_back_the_baseline(baseline, lab) -> None:
    weights, _ = baseline
    again = quantise_weights(weights, parse_format("q4_1"))
    for ours, theirs in zip(again.layers, weights.layers, strict=True):
        for m in ("wqkv", "wo", "w_gate_up", "w_down"):
            assert torch.equal(getattr(ours, m), getattr(theirs, m)), m
    q = lab[0]["q4_1"].quality
    assert q.kl_mean == 0.0 and q.top1_agreement == 1.0 and q.ppl == q.ppl_reference


def test_int4_drifts_more_than_int8(lab) -> None:
    rows, _ = lab
    int8, int4 = rows["int8-channel"].quality, rows["int4-sym-g64"].quality
    assert 0 < int8.kl_mean < int4.kl_mean
    assert int4.top1_agreement < int8.top1_agreement <= 1.0
    assert int4.ppl_change_pct > abs(int8.ppl_change_pct)
    for r in rows.values():
        if r.quality is not None:
            assert r.quality.kl_mean >= 0 and r.quality.kl_p99 >= 0
            assert 0.0 <= r.quality.top1_agreement <= 1.0
            assert r.quality.tokens == TOKENS - 1


def test_baseline_perplexity_matches_transformers_loss(baseline, lab) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    weights, tokenizer = baseline
    ids = text_ids(tokenizer, tokens=TOKENS)
    path = pinned_gguf()
    with fast_gguf_package():  # open_gguf's reader and dequantisation inside the package: bit for bit, faster
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.inference_mode():
        loss = model(torch.tensor([ids]), labels=torch.tensor([ids])).loss  # mean NLL of ids[1:], shifted inside
    ppl = lab[0]["int8-channel"].quality.ppl_reference
    assert ppl == pytest.approx(math.exp(float(loss)), rel=1e-4)

    logits = teacher_forced_logits(weights, TorchOps(), ids)
    ce = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]))
    assert ppl == pytest.approx(math.exp(float(ce)), rel=1e-5)
    same = quality_drop(logits, logits, ids)
    assert same.kl_mean == 0.0 and same.top1_agreement == 1.0


def test_windows_start_from_an_empty_cache(baseline) -> None:
    weights, tokenizer = baseline
    ids = text_ids(tokenizer, tokens=48)
    whole = teacher_forced_logits(weights, TorchOps(), ids)
    windowed = teacher_forced_logits(weights, TorchOps(), ids, window=24)
    assert windowed.shape == whole.shape == (47, weights.config.vocab)
    assert torch.allclose(windowed[:24], whole[:24], atol=2e-3)     # the first window sees the same context
    alone = teacher_forced_logits(weights, TorchOps(), ids[24:])       # the second window is a fresh prefill
    assert torch.allclose(windowed[24:], alone, atol=2e-3)
    assert not torch.allclose(windowed[24:], whole[24:], atol=2e-3)


def test_bytes_and_walls_against_the_file_and_the_cardbook(baseline, lab) -> None:
    weights, _ = baseline
    rows, result = lab
    assert rows["16-bit"].weight_bytes_per_token == weights.weight_bytes / 2   # fp32 weights: 4 bytes each
    gguf = open_gguf(pinned_gguf())
    stored = sum(int(t.n_bytes) for t in gguf.reader.tensors if t.tensor_type.name in ("Q4_1", "Q8_0"))
    norms = sum(t.numel() for layer in weights.layers for t in (layer.attn_norm, layer.ffn_norm)) + weights.norm.numel()
    assert rows["gguf file"].weight_bytes_per_token == stored + 2 * norms
    assert rows["q4_1"].weight_bytes_per_token == rows["gguf file"].weight_bytes_per_token
    assert result.params == sum(int(t.n_elements) for t in gguf.reader.tensors)  # all stream; the head is tied
    for r in rows.values():
        for key in ("rtx3090", "h100-sxm"):
            assert r.decode_tok_s[key] == pytest.approx(lookup(key).bandwidth_bytes_per_s / r.weight_bytes_per_token)


# --- the command line --------------------------------------------------------------------------------------------


def test_cli_json(baseline) -> None:
    code, out, err = cli_in_process("quant", "--format", "q4_1,int8-channel", "--tokens", "32", "--window", "16",
                                    "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == "iotrace.quant/1" and "dequantised Q4_1 file" in data["baseline"]
    assert data["tokens"] == 32 and data["window"] == 16
    rows = {r["key"]: r for r in data["rows"]}
    assert list(rows) == ["16-bit", "gguf file", "q4_1", "int8-channel"]  # in the order asked: not a ranking
    assert rows["q4_1"]["quality"]["kl_mean"] == 0.0 and rows["q4_1"]["bits_per_weight"] == 5.0
    assert rows["int8-channel"]["quality"]["kl_mean"] > 0 and rows["16-bit"]["quality"] is None


def test_cli_markdown_header_names_the_baseline(baseline) -> None:
    code, out, err = cli_in_process("quant", "--format", "q8_0", "--tokens", "16", "--window", "16", "--markdown")
    assert code == 0, err
    assert out.startswith("Baseline: ") and "dequantised Q4_1 file" in out.splitlines()[0]
    assert "| q8_0 | 8.500 |" in out


@pytest.mark.parametrize(("args", "named", "process"), [
    (["--format", "int4-sym-g128"], "block of 128 does not divide", False),
    (["--format", "int4-asym-g100"], "block of 100", False),
    (["--format", "q5_9"], "'q5_9'", False),
    (["--card", "no-such-card"], "no-such-card", False),
    (["--format", "q8_0", "--tokens", "99999"], "--tokens 99999: the evaluation text has 3669 tokens", True),
])
def test_cli_bad_input_exits_2_with_one_line(args: list[str], named: str, process: bool) -> None:
    if process:
        done = run_cli("quant", *args)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        code, out, err = cli_in_process("quant", *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], err


@pytest.mark.parametrize("args", [["--tokens", "1e9"], ["--kv", "--tokens", "5000"]], ids=["formats", "kv"])
def test_tokens_past_the_text_are_refused_before_the_model_loads(args: list[str]) -> None:
    """``--tokens 1e9`` was refused after 30 s on a cold cache (the tokenizer built, the text tokenized), though the
    docs say "before the model loads": now from the text's stated length, before torch is imported."""
    import time

    started = time.monotonic()
    done = run_cli("quant", *args)
    elapsed = time.monotonic() - started
    tokens = 1_000_000_000 if "1e9" in args else 5000
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr == (f"iotrace: error: --tokens {tokens}: the evaluation text has 3669 tokens — pass --tokens "
                           "3669 or fewer\n")
    assert elapsed < 20, f"{elapsed:.1f} s"  # a hang guard, not a speed check: it takes a fraction of a second


def test_cli_list_formats_json() -> None:
    done = run_cli("quant", "--list-formats", "--json")
    assert done.returncode == 0, done.stderr
    keys = [f["key"] for f in json.loads(done.stdout)]
    assert {"q4_0", "q4_1", "q8_0", "mxfp4", "nvfp4", "fp8-tensor", "fp8-channel", "int8-channel",
            "int4-sym-gN", "int4-asym-gN"} <= set(keys)
