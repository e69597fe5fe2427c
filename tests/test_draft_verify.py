"""Speculative verification: the kernel reproduces the reference token for token, the reference leaves the
target distribution unchanged (chi-square), and the mean tokens per step follow identity 5."""

from __future__ import annotations

import math

import pytest
import torch

from iotrace import identities as ident
from iotrace.errors import InvalidValueError
from iotrace.kernels.backend import interpreting
from iotrace.kernels.draft_verify import DraftVerifySpec, verify, verify_reference
from iotrace.runner import check_outputs

SPEC = DraftVerifySpec()
CONFIG = {"BLOCK_V": 256, "num_warps": 4}


def _chi2_sf(x: float, dof: int) -> float:
    """P(χ² > x) for ``dof`` degrees of freedom: the regularised upper incomplete gamma Q(dof/2, x/2), by the
    series below a + 1 and the continued fraction above it (Numerical Recipes, section 6.2, gser and gcf),
    enough for the small dof here without SciPy."""
    a, y = dof / 2, x / 2
    log_front = -y + a * math.log(y) - math.lgamma(a)
    if y < a + 1:
        term = total = 1 / a
        n = a
        while term > total * 1e-15:
            n += 1
            term *= y / n
            total += term
        return 1 - total * math.exp(log_front)
    tiny = 1e-300
    b, c, d = y + 1 - a, 1 / tiny, 1 / (y + 1 - a)
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * h


def test_chi2_sf_known_values() -> None:
    # Tables: χ²(1) > 3.841 with p = 0.05; χ²(7) > 14.067 with p = 0.05; χ²(7) > 24.322 with p = 0.001.
    assert _chi2_sf(3.841, 1) == pytest.approx(0.05, abs=1e-4)
    assert _chi2_sf(14.067, 7) == pytest.approx(0.05, abs=1e-4)
    assert _chi2_sf(24.322, 7) == pytest.approx(0.001, abs=1e-5)
    assert _chi2_sf(2.0, 7) == pytest.approx(0.9598, abs=1e-4)
    assert 0 <= _chi2_sf(1e6, 7) < 1e-300


@pytest.mark.skipif(not interpreting(), reason="interpreter checks; bench/gpu_validate.sh runs the kernel on a GPU")
@pytest.mark.parametrize("greedy", [0, 1])
@pytest.mark.parametrize("logits", [0, 1])
@pytest.mark.parametrize(("gamma", "vocab", "varlen"), [(4, 1000, 1), (1, 77, 0), (7, 333, 1)])
@pytest.mark.parametrize("block_v", [256, 1024])
def test_kernel_matches_the_reference_token_for_token(greedy: int, logits: int, gamma: int, vocab: int, varlen: int,
                                                      block_v: int) -> None:
    """Probabilities or logits (softmax fused, against the fp64 softmax of the same logits): token for token."""
    shape = SPEC.check_shape({"batch": 29, "gamma": gamma, "vocab": vocab, "greedy": greedy, "varlen": varlen,
                              "logits": logits})
    inputs = SPEC.make_inputs(shape, "fp32", "cpu", seed=gamma * 1000 + vocab + greedy)
    outputs = SPEC.make_outputs(inputs)
    for out in outputs.values():
        out.fill_(-1)
    SPEC.launch(inputs, outputs, {"BLOCK_V": block_v, "num_warps": 4})
    found = check_outputs(SPEC, "fp32", outputs, SPEC.reference(inputs))
    assert found.ok, found.where
    assert len(set(outputs["accepted"].tolist())) > 1, "the inputs should exercise accepts and rejects"


def _emitted_first(p: torch.Tensor, q: torch.Tensor, trials: int, gamma: int, seed: int) -> torch.Tensor:
    """First emitted token of `trials` verify steps with fixed rows p (γ+1, V) and q (γ, V), drafts drawn from q."""
    gen = torch.Generator().manual_seed(seed)
    draft = torch.stack([torch.multinomial(q[i], trials, replacement=True, generator=gen) for i in range(gamma)], 1)
    u = torch.rand(trials, gamma + 1, generator=gen)
    lens = torch.full((trials,), gamma)
    accepted, token = verify_reference(draft, lens, q.expand(trials, -1, -1), p.expand(trials, -1, -1), u, False)
    # The first emitted token: the first draft token when it was accepted, else the resampled one.
    return torch.where(accepted > 0, draft[:, 0], token.long())


@pytest.mark.parametrize("closeness", ["far", "close"])
def test_speculative_sampling_leaves_the_target_distribution_unchanged(closeness: str) -> None:
    gen = torch.Generator().manual_seed(2026)
    vocab, gamma, trials = 8, 3, 200_000
    p = torch.softmax(torch.randn(gamma + 1, vocab, generator=gen) * 2, -1)
    other = torch.softmax(torch.randn(gamma, vocab, generator=gen) * 2, -1)
    q = other if closeness == "far" else 0.9 * p[:gamma] + 0.1 * other
    tokens = _emitted_first(p, q, trials, gamma, seed=7)
    observed = torch.bincount(tokens, minlength=vocab).double()
    expected = p[0].double() * trials
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    # Fixed seeds make this deterministic; 1e-6 would flag a real bias in any rerun with new seeds.
    assert _chi2_sf(chi2, vocab - 1) > 1e-6, f"χ² = {chi2:.1f} over {vocab - 1} dof"
    if closeness == "far":  # the test has power: the draft's own distribution is rejected outright
        chi2_q = float(((torch.bincount(torch.multinomial(q[0], trials, True, generator=gen), minlength=vocab)
                         - expected) ** 2 / expected).sum())
        assert _chi2_sf(chi2_q, vocab - 1) < 1e-12


@pytest.mark.parametrize(("alpha", "gamma"), [(0.5, 1), (0.8, 4), (0.9, 8), (0.3, 3)])
def test_mean_tokens_per_step_follow_identity_5(alpha: float, gamma: int) -> None:
    """q always proposes token 0, p gives it probability α: each draft token is accepted independently with
    probability α, so accepted + 1 tokens come out per step, E = (1 − α^(γ+1)) / (1 − α)."""
    trials = 100_000
    p = torch.tensor([[alpha, 1 - alpha]] * (gamma + 1))
    q = torch.tensor([[1.0, 0.0]] * gamma)
    gen = torch.Generator().manual_seed(int(alpha * 100) + gamma)
    u = torch.rand(trials, gamma + 1, generator=gen)
    accepted, _ = verify_reference(torch.zeros(trials, gamma, dtype=torch.long), torch.full((trials,), gamma),
                                   q.expand(trials, -1, -1), p.expand(trials, -1, -1), u, False)
    emitted = accepted.double() + 1
    standard_error = float(emitted.std()) / math.sqrt(trials)
    assert float(emitted.mean()) == pytest.approx(ident.spec_expected_tokens(alpha, gamma), abs=5 * standard_error)


def _valid(batch: int = 2, gamma: int = 2, vocab: int = 5):
    p = torch.full((batch, gamma + 1, vocab), 1 / vocab)
    q = torch.full((batch, gamma, vocab), 1 / vocab)
    return (torch.zeros(batch, gamma, dtype=torch.int32), torch.full((batch,), gamma, dtype=torch.int32), q, p,
            torch.rand(batch, gamma + 1))


@pytest.mark.parametrize(("change", "message"), [
    (lambda d, n, q, p, u: (d, n, q[..., :4] / q[..., :4].sum(-1, keepdim=True), p, u), "vocabulary \\(4\\) differs"),
    (lambda d, n, q, p, u: (d, n, q, p * 2, u), "sum to 1"),
    (lambda d, n, q, p, u: (d, n, q, p.index_fill(2, torch.tensor([0]), math.nan), u), "NaN or infinity"),
    (lambda d, n, q, p, u: (d, n + 1, q, p, u), "draft lengths must lie in 0..2"),
    (lambda d, n, q, p, u: (d + 7, n, q, p, u), "draft tokens must lie in 0..4"),
    (lambda d, n, q, p, u: (d, n, q, p[:, :2], u), "shapes do not agree"),
])
def test_bad_inputs_are_refused(change, message: str) -> None:
    draft, lens, q, p, u = change(*_valid())
    out = torch.empty(2, dtype=torch.int32)
    with pytest.raises(InvalidValueError, match=message):
        verify(draft, lens, q, p, u, out, out.clone(), False, CONFIG)


def test_nan_logits_are_refused_and_logits_need_not_sum_to_one() -> None:
    draft, lens, q, _, u = _valid()
    logits = torch.randn(2, 3, 5) * 4
    out = torch.empty(2, dtype=torch.int32)
    verify(draft, lens, q, logits, u, out, out.clone(), False, CONFIG, logits=True)  # raw logits: accepted
    with pytest.raises(InvalidValueError, match="target logits hold NaN or infinity"):
        verify(draft, lens, q, logits.index_fill(2, torch.tensor([1]), math.nan), u, out, out.clone(), False, CONFIG,
               logits=True)
    with pytest.raises(InvalidValueError, match="or the target's logits with logits=True"):
        verify(draft, lens, q, logits, u, out, out.clone(), False, CONFIG)


def test_cost_by_hand() -> None:
    cost = SPEC.cost(SPEC.check_shape(SPEC.presets["llama-3-b64-g4"]), "fp32")
    assert cost.bytes == 64 * (2 * 128256 * 4 + 4 * 16 + 12)
    greedy = SPEC.cost(SPEC.check_shape(SPEC.presets["llama-3-b64-g4-greedy"]), "fp32")
    assert greedy.bytes == 64 * (5 * 128256 * 4 + 8 * 4 + 8)
    # Fused softmax: five logits rows and one q row, against an unfused softmax that reads and writes the five
    # rows (10·V·4) before the probability kernel's 2·V·4: 2.0x fewer bytes per sequence.
    fused = SPEC.cost(SPEC.check_shape(SPEC.presets["llama-3-b64-g4-logits"]), "fp32")
    assert fused.bytes == 64 * (6 * 128256 * 4 + 4 * 16 + 12)
    assert (cost.bytes + 64 * 10 * 128256 * 4) / fused.bytes == pytest.approx(2.0, abs=1e-3)
