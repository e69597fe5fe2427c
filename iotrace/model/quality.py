"""How much a changed model (quantised weights, an INT8 KV cache) drifts from a reference, over a shipped text.

The text (``iotrace/data/eval_text.toml``: chapters 1-3 of Jane Austen's *Pride and Prejudice*, public domain) is
scored teacher-forced: the model sees the true tokens and each position's next-token distribution is compared
with the reference model's at the same position. Three figures, as llama.cpp's ``llama-perplexity
--kl-divergence`` reports them (tools/perplexity/README.md): the mean (and 99th percentile) KL divergence
KL(reference ‖ candidate) in nats, the share of positions whose argmax agrees ("same top p"), and the perplexity
exp(mean −log p(next token)) of each model with its relative change.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from iotrace.errors import InvalidValueError
from iotrace.model.eval_text import EVAL_TEXT_SOURCE, reference_text

if TYPE_CHECKING:
    from iotrace.model.ops import Ops
    from iotrace.model.weights import LlamaWeights

__all__ = ["EVAL_TEXT_SOURCE", "QualityDrop", "quality_drop", "reference_text", "teacher_forced_logits", "text_ids"]

#: Rows of logits compared at once: 256 × 49,152 fp32 is 50 MB per temporary, so a 3,000-token comparison never
#: holds more than a few hundred MB beyond the two logit tensors themselves.
_CHUNK_ROWS = 256


def text_ids(tokenizer: Any, text: str | None = None, tokens: int | None = None) -> list[int]:
    """``text`` (default: :func:`reference_text`) as token ids without special tokens; ``tokens`` keeps the first N."""
    ids = list(tokenizer.encode(reference_text() if text is None else text, add_special_tokens=False))
    if tokens is None:
        return ids
    if tokens < 2:
        raise InvalidValueError(f"{tokens} tokens: scoring needs at least 2 (one prediction)",
                                "pass --tokens 2 or more")
    if tokens > len(ids):
        raise InvalidValueError(f"{tokens} tokens asked for, the evaluation text has {len(ids)}",
                                f"pass --tokens {len(ids)} or fewer")
    return ids[:tokens]


@torch.inference_mode()
def teacher_forced_logits(weights: LlamaWeights, ops: Ops, ids: list[int], window: int | None = None) -> torch.Tensor:
    """fp32 logits (len(ids) − 1, V): row t predicts ids[t + 1] from ids[:t + 1] within its window.

    ``window`` None scores the whole sequence as one context; otherwise the ids are cut into non-overlapping
    windows of ``window`` tokens, each prefilled into a fresh cache (as ``llama-perplexity`` scores chunks of
    ``-c`` tokens), so the first position of each window sees no earlier text.
    """
    from iotrace.model.decoder import Decoder

    if len(ids) < 2:
        raise InvalidValueError(f"{len(ids)} token ids: scoring needs at least 2", "pass a longer text")
    span = len(ids) if window is None else window
    if span < 1:
        raise InvalidValueError(f"window {window}: must be at least 1 token", "pass --window 1 or more, e.g. 512")
    span = min(span, len(ids))
    if span > weights.config.context_length:
        raise InvalidValueError(f"a window of {span} tokens exceeds {weights.config.name}'s context of "
                                f"{weights.config.context_length}", f"pass --window {weights.config.context_length}"
                                                                    " or fewer")
    decoder = Decoder(weights, ops, batch=1, capacity=span)
    device = weights.device
    out = torch.empty(len(ids), weights.config.vocab, dtype=torch.float32)
    for start in range(0, len(ids), span):
        chunk = torch.tensor([ids[start:start + span]], dtype=torch.int64, device=device)
        decoder.reset()
        logits = decoder.prefill(chunk, all_logits=True)[0]
        out[start:start + chunk.shape[1]] = logits.float().cpu()
    return out[:-1]  # the last position predicts a token the text does not have


@dataclass(frozen=True)
class QualityDrop:
    """A candidate's next-token distributions against a reference's over the same ``tokens`` positions."""

    #: positions compared (len(ids) − 1: every id but the first is predicted once)
    tokens: int
    #: mean over positions of KL(reference ‖ candidate) in nats
    kl_mean: float
    #: 99th percentile of the per-position KL (nats): the tail a mean hides
    kl_p99: float
    #: fraction of positions where both models' most likely next token is the same
    top1_agreement: float
    #: perplexity exp(mean −log p) of the true next tokens under the reference and under the candidate
    ppl_reference: float
    ppl: float
    #: 100 · (ppl / ppl_reference − 1)
    ppl_change_pct: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@torch.inference_mode()
def quality_drop(reference_logits: torch.Tensor, logits: torch.Tensor, ids: list[int]) -> QualityDrop:
    """Compare two (len(ids) − 1, V) logit tensors from :func:`teacher_forced_logits` on the same ``ids``."""
    rows = len(ids) - 1
    if reference_logits.shape != logits.shape or reference_logits.shape[0] != rows:
        raise InvalidValueError(f"logits of shapes {tuple(reference_logits.shape)} and {tuple(logits.shape)} for "
                                f"{len(ids)} ids", "score both models on the same ids (rows = len(ids) - 1)")
    targets = torch.tensor(ids[1:], dtype=torch.int64)
    kl = torch.empty(rows, dtype=torch.float64)
    nll_ref = nll = 0.0
    same = 0
    for start in range(0, rows, _CHUNK_ROWS):
        end = min(start + _CHUNK_ROWS, rows)
        log_p = torch.log_softmax(reference_logits[start:end].float(), dim=-1)
        log_q = torch.log_softmax(logits[start:end].float(), dim=-1)
        # KL(P ‖ Q) = Σ p (log p − log q); terms with p = 0 contribute 0 (exp(-inf) · finite = 0). KL ≥ 0 (Gibbs'
        # inequality); rounding of identical distributions gives about −1e-8, clamped to 0.
        kl[start:end] = (log_p.exp() * (log_p - log_q)).sum(-1).double().clamp_min(0.0)
        t = targets[start:end, None]
        nll_ref -= float(log_p.gather(1, t).double().sum())
        nll -= float(log_q.gather(1, t).double().sum())
        same += int((log_p.argmax(-1) == log_q.argmax(-1)).sum())
    ppl_ref, ppl = math.exp(nll_ref / rows), math.exp(nll / rows)
    return QualityDrop(tokens=rows, kl_mean=float(kl.mean()), kl_p99=float(torch.quantile(kl, 0.99)),
                       top1_agreement=same / rows, ppl_reference=ppl_ref, ppl=ppl,
                       ppl_change_pct=100.0 * (ppl / ppl_ref - 1.0))
