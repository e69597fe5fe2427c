"""The speculative decoding loop (batch 1) and plain decoding beside it, each timed.

One speculative step (Leviathan, Kalman, Matias 2023, Algorithm 1): the draft proposes n ≤ γ tokens; the target
runs the token it emitted last plus the n draft tokens in one prefill-shaped forward
(:meth:`~iotrace.model.decoder.Decoder.extend`), giving p for each draft position and one more; the
``draft-verify`` op accepts a prefix of a tokens and emits one token of the target's (greedy: argmax; sampling: the
residual max(0, p − q) after a rejection, p for the bonus), so each step emits a + 1 tokens; the target's KV cache
is rolled back over the n − a rejected tokens. Greedy speculative output equals plain greedy decoding token for
token; sampled output follows the target's distribution (Theorem 3.5 of the paper).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from iotrace.model.decoder import Decoder
    from iotrace.model.drafts import Draft

__all__ = ["PlainRun", "SpecRun", "SpecStep", "plain_generate", "speculative_generate"]


@dataclass(frozen=True)
class SpecStep:
    """One target step: draft tokens proposed (n) and accepted (a ≤ n); it emitted a + 1 tokens."""

    proposed: int
    accepted: int
    draft_s: float
    target_s: float


@dataclass
class SpecRun:
    tokens: list[int]
    steps: list[SpecStep] = field(default_factory=list)
    #: wall time after the target's prefill until the last token (draft prefill, drafting, verifying, rollback)
    wall_s: float = 0.0


@dataclass
class PlainRun:
    tokens: list[int]
    #: per decode step (the tokens after the first, which the prefill emits)
    step_s: list[float]
    wall_s: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(logits.argmax(-1))
    return int(torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=generator))


def plain_generate(target: Decoder, prompt: list[int], count: int, temperature: float = 0.0,
                   generator: torch.Generator | None = None) -> PlainRun:
    """``count`` tokens by plain decoding: the prefill emits the first, one decode step each after it."""
    device = target.w.device
    target.reset()
    logits = target.prefill(torch.tensor([prompt], dtype=torch.int64))[0]
    tokens = [_pick(logits, temperature, generator)]
    steps = []
    _sync(device)
    start = time.perf_counter()
    for _ in range(count - 1):
        t0 = time.perf_counter()
        logits = target.decode(torch.tensor([tokens[-1]], device=device))[0]
        tokens.append(_pick(logits, temperature, generator))  # reading the token synchronises
        steps.append(time.perf_counter() - t0)
    return PlainRun(tokens, steps, time.perf_counter() - start)


def speculative_generate(target: Decoder, draft: Draft, prompt: list[int], count: int, gamma: int,
                         temperature: float = 0.0, generator: torch.Generator | None = None) -> SpecRun:
    """``count`` tokens by speculative decoding with ``draft`` proposing up to ``gamma`` tokens a step."""
    device = target.w.device
    greedy = temperature <= 0
    target.reset()
    logits = target.prefill(torch.tensor([prompt], dtype=torch.int64))[0]
    run = SpecRun([_pick(logits, temperature, generator)])
    _sync(device)
    start = time.perf_counter()
    while len(run.tokens) < count:
        t0 = time.perf_counter()
        context = prompt + run.tokens
        proposal = draft.propose(context, min(gamma, count - len(run.tokens)), temperature, generator)
        n = len(proposal.tokens)
        _sync(device)
        t1 = time.perf_counter()
        before = int(target.lens[0])
        ids = torch.tensor([[run.tokens[-1], *proposal.tokens]], dtype=torch.int64)
        logits = target.extend(ids)                                       # (1, n + 1, V)
        # Greedy verification takes the argmax of the logits themselves (a softmax in fp32 can round two close
        # logits to one probability and move the argmax off plain decoding's).
        p = logits.float() if greedy else torch.softmax(logits.float() / temperature, -1)
        u = torch.zeros((1, n + 1), device=device) if greedy or n == 0 else \
            torch.rand((1, n + 1), generator=generator, device=device)
        if n == 0:  # nothing proposed (an n-gram miss): a plain step, the target's own token
            accepted, token = 0, _pick(logits[0, 0], temperature, generator)
        else:
            draft_ids = torch.tensor([proposal.tokens], dtype=torch.int64, device=device)
            accepted_t, token_t = target.ops.verify(draft_ids, torch.tensor([n], device=device),
                                                    proposal.q.to(device)[None], p, u, greedy)
            accepted, token = int(accepted_t[0]), int(token_t[0])
        target.rollback(before + 1 + accepted)  # the last emitted token and the accepted drafts stay
        run.tokens.extend([*proposal.tokens[:accepted], token])
        t2 = time.perf_counter()
        run.steps.append(SpecStep(n, accepted, t1 - t0, t2 - t1))
    run.wall_s = time.perf_counter() - start
    run.tokens = run.tokens[:count]
    return run
