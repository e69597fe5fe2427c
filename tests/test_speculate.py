"""Speculative decoding on the real pinned model (SmolLM2-135M Q4_1, fp32, the torch path).

References no one here wrote: plain greedy decoding of the same model (speculative greedy output must equal it
token for token, Leviathan et al. 2023 section 2.3), the target's own softmax (sampled output must follow it:
Theorem 3.5, checked by a chi-square test), prefill's logits (extend and rollback must reproduce them), and the
pinned model as its own draft (it must accept every draft token).
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("gguf", reason="the model tests need iotrace[model] (make setup installs it)")
pytest.importorskip("transformers", reason="the model tests need iotrace[model]")

from iotrace.model.decoder import Decoder
from iotrace.model.drafts import ModelDraft, NgramDraft, layerskip_weights, make_draft, ngram_lookup
from iotrace.model.gguf_file import open_gguf
from iotrace.model.ops import TorchOps
from iotrace.model.spec_bench import acceptance_figures, spec_prompts
from iotrace.model.speculate import plain_generate, speculative_generate
from iotrace.model.weights import from_gguf
from tests.conftest import pinned_model

pytestmark = pytest.mark.slow

#: Tokens per greedy comparison: short, so every prompt at every γ for two drafts fits the time budget.
TOKENS = 6
#: Every γ that runs differently at TOKENS: speculative_generate caps each proposal at the tokens still to come
#: (TOKENS − 1 after the prefill's), so γ = 5, 6, 7 and 8 ran the very same steps; 8 stays, for the cap itself.
#: 1..8 took 31 s and 19 s of CPU for the two drafts.
GAMMAS = (1, 2, 3, 4, 5, 8)
#: A small layer-skipping draft: cheap on the CPU, and wrong often enough that rejections and rollbacks happen.
SMALL_LAYERSKIP = 4


@pytest.fixture(scope="module")
def weights():
    return from_gguf(open_gguf(pinned_model()), torch.float32, "cpu")


@pytest.fixture(scope="module")
def prompts() -> dict[str, list[int]]:
    from iotrace.model.tokenizer import gguf_tokenizer

    tokenizer = gguf_tokenizer(pinned_model())
    return {p.key: list(tokenizer.encode(p.text, add_special_tokens=False)) for p in spec_prompts()}


def _capacity(prompts: dict[str, list[int]]) -> int:
    return max(len(p) for p in prompts.values()) + TOKENS + max(GAMMAS) + 2


def test_ngram_lookup_takes_the_most_recent_longest_match() -> None:
    context = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert ngram_lookup(context, 2, max_n=3, min_n=2) == [7, 8]   # "2 3" last seen before 7 8, not before 9 9
    assert ngram_lookup([5, 1, 2, 3, 4, 6, 1, 2, 3], 3, max_n=4) == [4, 6, 1]  # "1 2 3" matches at n = 3
    assert ngram_lookup([1, 2, 3, 4], 4) == []


def test_extend_then_rollback_then_decode_equals_plain_decoding(weights, prompts) -> None:
    """K and V written by a rejected extension must be invisible: decode after rollback gives the logits of a decoder
    that never saw the rejected tokens, and extend's logits at each position are prefill's."""
    ids = prompts["prose"]
    plain = Decoder(weights, TorchOps(), 1, len(ids) + 8)
    reference = plain.prefill(torch.tensor([[*ids, 11, 12, 13]]), all_logits=True)[0]
    spec = Decoder(weights, TorchOps(), 1, len(ids) + 8)
    spec.prefill(torch.tensor([ids]))
    extended = spec.extend(torch.tensor([[11, 12, 13]]))[0]
    torch.testing.assert_close(extended, reference[-3:], atol=2e-3, rtol=0)
    spec.rollback(len(ids) + 1)                                   # keep 11, forget 12 and 13
    after = spec.decode(torch.tensor([42]))[0].clone()
    plain.prefill(torch.tensor([[*ids, 11]]))
    expected = plain.decode(torch.tensor([42]))[0]
    torch.testing.assert_close(after, expected, atol=2e-3, rtol=0)
    assert int(spec.lens[0]) == int(plain.lens[0]) == len(ids) + 2


@pytest.mark.parametrize("draft_name", ["ngram", f"layerskip:{SMALL_LAYERSKIP}"])
def test_greedy_speculation_is_token_identical_for_every_prompt_and_gamma(weights, prompts, draft_name) -> None:
    ops = TorchOps()
    target = Decoder(weights, ops, 1, _capacity(prompts))
    draft = make_draft(draft_name, weights, None, ops, _capacity(prompts))
    pooled: dict[int, list[tuple[int, int]]] = {}
    for key, ids in prompts.items():
        plain = plain_generate(target, ids, TOKENS).tokens
        for gamma in GAMMAS:
            run = speculative_generate(target, draft, ids, TOKENS, gamma)
            assert run.tokens == plain, f"{key}, {draft_name}, γ = {gamma}"
            assert sum(s.accepted + 1 for s in run.steps) >= TOKENS - 1
            pooled.setdefault(gamma, []).extend((s.proposed, s.accepted) for s in run.steps)
    # Something was proposed and something rejected, so acceptance and rollback both ran.
    steps = [s for rows in pooled.values() for s in rows]
    assert any(n > 0 for n, _ in steps) and any(a < n for n, a in steps)


def test_the_target_as_its_own_draft_accepts_every_token(weights, prompts) -> None:
    """draft:PATH with the pinned GGUF itself: q = p, so greedy verification accepts all γ every step (the draft
    loads its own copy of the weights from PATH; the target is the module's)."""
    path = pinned_model()
    ops = TorchOps()
    target = Decoder(weights, ops, 1, _capacity(prompts))
    draft = make_draft(f"draft:{path}", weights, path, ops, _capacity(prompts))
    ids = prompts["chat"]
    count = 1 + 2 * 5  # the prefill's token, then two steps of γ = 4 accepted tokens and the bonus
    run = speculative_generate(target, draft, ids, count, 4)
    assert run.tokens == plain_generate(target, ids, count).tokens
    figures = acceptance_figures([(s.proposed, s.accepted) for s in run.steps], 4)
    assert figures["alpha"] == 1.0 and figures["tokens_per_step"] == 5.0 and len(run.steps) == 2


def _chi_square_p_value(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson's statistic and its upper-tail probability, Q(k/2, x/2) with k = bins − 1 (the regularised upper
    incomplete gamma function: scipy is not a dependency)."""
    statistic = float(((counts - expected) ** 2 / expected).sum())
    dof = counts.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(statistic / 2, dtype=torch.float64)))


#: (prompt, draft layers) where the layer-skipping draft's q overlaps the target's p by Σ min(p, q) ≈ 0.33 and 0.07
#: (measured): both the acceptance and the residual path run often.
CHI_SQUARE_CASES = [("code", 16), ("prose", 28)]


@pytest.mark.parametrize(("prompt_key", "layers"), CHI_SQUARE_CASES)
def test_sampled_speculation_emits_the_targets_distribution(weights, prompts, prompt_key, layers) -> None:
    """At a fixed position of the real model: p from the target, q from a layer-skipping draft (far from p, so
    both the accept and the residual paths run), a draft token x ~ q and the verify rule on N copies with fresh
    uniforms; the first emitted token must follow p (chi-square over the tokens expected ≥ 5 times, the rest
    pooled)."""
    ids = prompts[prompt_key]
    target = Decoder(weights, TorchOps(), 1, len(ids) + 2)
    p = torch.softmax(target.prefill(torch.tensor([ids]))[0].double(), -1)
    small = Decoder(layerskip_weights(weights, layers), TorchOps(), 1, len(ids) + 2)
    q = torch.softmax(small.prefill(torch.tensor([ids]))[0].double(), -1)
    gen = torch.Generator().manual_seed(1234)
    copies, chunk, vocab = 4000, 500, p.shape[0]
    emitted, accepted_total = [], 0
    for _ in range(copies // chunk):
        draft = torch.multinomial(q.float(), chunk, replacement=True, generator=gen)[:, None]  # (N, 1)
        u = torch.rand(chunk, 2, generator=gen, dtype=torch.float64)
        pp = torch.stack([p, p])[None].expand(chunk, 2, vocab)
        qq = q[None, None].expand(chunk, 1, vocab)
        accepted, token = TorchOps().verify(draft, torch.ones(chunk, dtype=torch.long), qq, pp, u, greedy=False)
        first = torch.where(accepted == 1, draft[:, 0], token.long())
        emitted.append(first)
        accepted_total += int(accepted.sum())
    emitted_all = torch.cat(emitted)
    rate = accepted_total / copies
    overlap = float(torch.minimum(p, q).sum())  # P(accept) = Σ min(p, q) (Leviathan et al. 2023, Lemma 3.3)
    assert 0.04 < rate < 0.95 and abs(rate - overlap) < 4 * math.sqrt(overlap * (1 - overlap) / copies)
    frequent = torch.nonzero(p * copies >= 5).flatten()
    counts = torch.bincount(emitted_all, minlength=vocab).double()
    observed = torch.cat([counts[frequent], (counts.sum() - counts[frequent].sum())[None]])
    expected = torch.cat([p[frequent], (1 - p[frequent].sum())[None]]) * copies
    assert frequent.numel() >= 3
    assert _chi_square_p_value(observed, expected) > 1e-3


def test_identity_5_holds_where_acceptance_is_iid() -> None:
    """acceptance_figures against identity 5 on step records drawn i.i.d. at α = 0.6 (the formula's own case),
    and the estimator on a hand-counted case."""
    gen = torch.Generator().manual_seed(7)
    gamma, alpha = 4, 0.6
    steps = []
    for _ in range(2000):
        a = 0
        while a < gamma and float(torch.rand(1, generator=gen)) < alpha:
            a += 1
        steps.append((gamma, a))
    figures = acceptance_figures(steps, gamma)
    assert abs(figures["alpha"] - alpha) < 0.02 and figures["identity5_within_3se"]
    assert all(abs(c["p"] - alpha) < 0.05 for c in figures["curve"])
    hand = acceptance_figures([(4, 4), (4, 1), (2, 0), (0, 0)], 4)
    # accepted 5 of attempted 4 + 2 + 1 + 0 = 7 positions; position 1 reached by 3 steps, accepted by 2
    assert hand["alpha"] == 5 / 7 and hand["curve"][0] == {"position": 1, "reached": 3, "accepted": 2, "p": 2 / 3}
    assert hand["tokens_per_step"] == (5 + 2 + 1 + 1) / 4 and hand["full_steps"] == 2


def test_model_draft_rolls_its_cache_back_to_the_shared_prefix(weights, prompts) -> None:
    ids = prompts["code"]
    draft = ModelDraft("layerskip", layerskip_weights(weights, SMALL_LAYERSKIP), TorchOps(), len(ids) + 16)
    first = draft.propose(ids, 3, 0.0, None)
    again = draft.propose(ids, 3, 0.0, None)               # same context after a rejection of everything
    assert first.tokens == again.tokens and int(draft.decoder.lens[0]) == len(ids) + 2
    assert NgramDraft(weights.config.vocab, "cpu").propose(ids + ids[:3], 4, 0.0, None).tokens == ids[3:7]


def test_the_triton_path_extends_and_verifies_like_the_torch_path_under_the_interpreter() -> None:
    """The GPU path of one speculative step, run by the Triton interpreter on a tiny random Llama: ``extend`` through
    the prefill kernel with fewer queries than keys (its causal mask aligned bottom-right, one sequence and two),
    a rollback and a second extend, and the draft-verify kernel's greedy decision, against the torch path."""
    from iotrace.cards import lookup
    from iotrace.kernels.backend import interpreting
    from iotrace.model.gguf_file import LlamaConfig
    from iotrace.model.ops import TritonOps
    from iotrace.model.weights import random_weights

    if not interpreting():
        pytest.skip("runs the Triton interpreter on a CPU; on a GPU `iotrace selfcheck` step 6 runs --spec")
    config = LlamaConfig(name="tiny", layers=1, hidden=128, heads=2, kv_heads=1, head_dim=64, intermediate=96,
                         vocab=128, rope_theta=10000.0, rms_eps=1e-5, context_length=64, tied_embeddings=False,
                         rope_interleaved=False)
    w32 = random_weights(config, torch.float32, "cpu", seed=7)
    w16 = _in_dtype(w32, torch.float16)
    gen = torch.Generator().manual_seed(11)
    for batch in (1, 2):
        prompt = torch.randint(0, config.vocab, (batch, 6), generator=gen)
        new = torch.randint(0, config.vocab, (batch, 4), generator=gen)
        ref, tri = Decoder(w32, TorchOps(), batch, 16), Decoder(w16, TritonOps(lookup("h100"), nvtx=False), batch, 16)
        ref.prefill(prompt)
        tri.prefill(prompt)
        expected, got = ref.extend(new), tri.extend(new).float()
        scale = expected.abs().max().item()
        assert (got - expected).abs().max().item() < 2e-2 * scale, f"batch {batch}: extend"
        ref.rollback(7)
        tri.rollback(7)
        expected, got = ref.extend(new[:, 1:3]), tri.extend(new[:, 1:3]).float()
        assert (got - expected).abs().max().item() < 2e-2 * scale, f"batch {batch}: extend after a rollback"
    # Greedy verification of γ = 1 from the last extend's two rows (the draft row and the bonus row): the first
    # sequence's draft is the target's argmax (accepted), the second's is not (rejected); kernel and reference agree.
    p = torch.softmax(expected.double(), -1).float()
    best = p[:, 0].argmax(-1)
    draft = torch.stack([best[0], (best[1] + 1) % config.vocab]).view(2, 1)
    q = torch.full((2, 1, config.vocab), 1.0 / config.vocab)
    u = torch.rand(2, 2, generator=gen)
    lens = torch.ones(2, dtype=torch.int64)
    accepted, token = TritonOps(lookup("h100"), nvtx=False).verify(draft, lens, q, p, u, greedy=True)
    want_accepted, want_token = TorchOps().verify(draft, lens, q, p, u, greedy=True)
    assert accepted.tolist() == want_accepted.tolist() == [1, 0]
    assert token.tolist() == want_token.tolist() == [int(p[0, 1].argmax()), int(best[1])]


def _in_dtype(weights, dtype: torch.dtype):
    """The same weights in another dtype (the Triton path runs fp16)."""
    import dataclasses

    cast = {name: getattr(weights, name).to(dtype) for name in ("embed", "norm", "lm_head")}
    layers = [dataclasses.replace(layer, **{k: v.to(dtype) for k, v in vars(layer).items()})
              for layer in weights.layers]
    return dataclasses.replace(weights, layers=layers, **cast)
