"""The drafts of speculative decoding: who proposes the γ tokens the target then verifies in one forward.

- ``ngram``: prompt lookup (Saxena 2023, github.com/apoorvumang/prompt-lookup-decoding; vLLM's ``ngram``
  speculative method, docs.vllm.ai "Speculative Decoding", n-gram matching): the last n tokens of the context are
  looked up at their most recent earlier occurrence, n from :data:`NGRAM_MAX` down to :data:`NGRAM_MIN`, and the
  tokens that followed it are proposed. No model: the proposal is deterministic (q is one-hot).
- ``layerskip:K``: self-speculation by early exit (Elhoushi et al. 2024, "LayerSkip", arXiv:2404.16710): the
  target's first K layers, its final norm and its LM head, with a KV cache of their own.
- ``draft:PATH``: a second GGUF model with the target's vocabulary (Leviathan et al. 2023's setting).

A model draft keeps the tokens its cache holds; each proposal rolls the cache back to the longest prefix it shares
with the context, runs the rest in one :meth:`~iotrace.model.decoder.Decoder.extend`, then decodes γ − 1 more.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from iotrace.errors import InvalidValueError

if TYPE_CHECKING:
    from iotrace.model.ops import Ops
    from iotrace.model.weights import LlamaWeights

__all__ = ["NGRAM_MAX", "NGRAM_MIN", "Draft", "ModelDraft", "NgramDraft", "Proposal", "check_draft",
           "layerskip_weights", "make_draft", "ngram_lookup"]

#: The longest and shortest suffix matched (vLLM's ``prompt_lookup_max`` / ``prompt_lookup_min``; 4 is the value
#: vLLM's documentation example uses, and a 2-token minimum keeps single common tokens from proposing noise).
NGRAM_MAX = 4
NGRAM_MIN = 2


@dataclass(frozen=True)
class Proposal:
    """Up to γ draft tokens and the distributions they were drawn from, q (n, V) fp32 (one-hot when the draft is
    deterministic or greedy)."""

    tokens: list[int]
    q: torch.Tensor


class Draft(Protocol):
    name: str

    def propose(self, context: list[int], gamma: int, temperature: float,
                generator: torch.Generator | None) -> Proposal: ...


def _one_hot(tokens: list[int], vocab: int, device: torch.device | str) -> torch.Tensor:
    q = torch.zeros(len(tokens), vocab, dtype=torch.float32, device=device)
    if tokens:
        q[torch.arange(len(tokens), device=device), torch.tensor(tokens, device=device)] = 1.0
    return q


def ngram_lookup(context: list[int], gamma: int, max_n: int = NGRAM_MAX, min_n: int = NGRAM_MIN) -> list[int]:
    """The up to ``gamma`` tokens that followed the most recent earlier occurrence of the context's last n tokens,
    trying n = max_n down to min_n; [] when no suffix recurs."""
    length = len(context)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = context[length - n:]
        for start in range(length - n - 1, -1, -1):  # most recent first; the suffix itself is excluded
            if context[start:start + n] == suffix:
                return context[start + n:start + n + gamma]
    return []


class NgramDraft:
    """Prompt lookup: no model, a deterministic proposal."""

    def __init__(self, vocab: int, device: torch.device | str, max_n: int = NGRAM_MAX, min_n: int = NGRAM_MIN
                 ) -> None:
        self.vocab, self.device, self.max_n, self.min_n = vocab, device, max_n, min_n
        self.name = "ngram"

    def propose(self, context: list[int], gamma: int, temperature: float,
                generator: torch.Generator | None) -> Proposal:
        tokens = ngram_lookup(context, gamma, self.max_n, self.min_n)
        return Proposal(tokens, _one_hot(tokens, self.vocab, self.device))


class ModelDraft:
    """A draft model (its own :class:`~iotrace.model.decoder.Decoder` and KV cache), greedy or sampled at the
    target's temperature."""

    def __init__(self, name: str, weights: LlamaWeights, ops: Ops, capacity: int, graph: bool = False) -> None:
        from iotrace.model.decoder import Decoder

        self.name, self.weights = name, weights
        self.decoder = Decoder(weights, ops, batch=1, capacity=capacity)
        self.fed: list[int] = []  # the tokens the draft's cache holds, in order
        self.graph = graph and weights.device.type == "cuda"

    def _choose(self, logits: torch.Tensor, temperature: float, generator: torch.Generator | None
                ) -> tuple[int, torch.Tensor]:
        if temperature <= 0:
            token = int(logits.argmax(-1))
            return token, _one_hot([token], logits.shape[-1], logits.device)[0]
        q = torch.softmax(logits.float() / temperature, -1)
        return int(torch.multinomial(q, 1, generator=generator)), q

    def propose(self, context: list[int], gamma: int, temperature: float,
                generator: torch.Generator | None) -> Proposal:
        keep = 0
        for a, b in zip(self.fed, context, strict=False):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(context) - 1)  # at least one token to run: its logits propose the first draft token
        self.decoder.rollback(keep)
        logits = self.decoder.extend(torch.tensor([context[keep:]], dtype=torch.int64))[0, -1]
        if self.graph and self.decoder._graph is None:
            self.decoder.graphed()
        tokens, rows = [], []
        for i in range(gamma):
            token, q = self._choose(logits, temperature, generator)
            tokens.append(token)
            rows.append(q)
            if i + 1 < gamma:
                logits = self.decoder.decode(torch.tensor([token], device=self.weights.device))[0]
        self.fed = list(context) + tokens[:-1]
        return Proposal(tokens, torch.stack(rows).float())


def layerskip_weights(weights: LlamaWeights, layers: int) -> LlamaWeights:
    """The target's first ``layers`` layers with its final norm and LM head (the same tensors, not copies)."""
    total = weights.config.layers
    if not 1 <= layers < total:
        raise InvalidValueError(f"layerskip:{layers} must keep 1 to {total - 1} of the target's {total} layers",
                                "e.g. --spec layerskip:8")
    config = dataclasses.replace(weights.config, layers=layers, name=f"{weights.config.name} (first {layers} "
                                                                      "layers)")
    return dataclasses.replace(weights, config=config, layers=weights.layers[:layers],
                               source=f"{weights.source}, first {layers} layers")


def _gguf_tokens(path: Path) -> list[str] | None:
    from iotrace.model.gguf_file import open_gguf

    field = open_gguf(path).reader.fields.get("tokenizer.ggml.tokens")
    return None if field is None else list(field.contents())


def check_draft(spec: str, target_path: Path) -> None:
    """Refuse a malformed draft, or a draft GGUF whose vocabulary differs from the target's, from the files'
    metadata alone (before any weights load)."""
    from iotrace.model.gguf_file import open_gguf

    kind, _, arg = spec.partition(":")
    if kind == "ngram" and not arg:
        return
    if kind == "layerskip":
        if not arg.isdigit():
            raise InvalidValueError(f"--spec {spec!r}: layerskip needs a layer count, layerskip:K",
                                    "e.g. --spec layerskip:8")
        total = open_gguf(target_path).config.layers
        if not 1 <= int(arg) < total:
            raise InvalidValueError(f"--spec {spec}: layerskip must keep 1 to {total - 1} of the target's {total} "
                                    "layers", "e.g. --spec layerskip:8")
        return
    if kind == "draft" and arg:
        draft, target = open_gguf(Path(arg)).config.vocab, open_gguf(target_path).config.vocab
        if draft != target:
            raise InvalidValueError(f"--spec {spec}: the draft's vocabulary of {draft} tokens differs from the "
                                    f"target's {target}", "speculative decoding needs a draft with the target's "
                                                          "tokenizer")
        return
    raise InvalidValueError(f"--spec {spec!r} is not a draft", "use ngram, layerskip:K or draft:PATH")


def make_draft(spec: str, target: LlamaWeights, target_path: Path | None, ops: Ops, capacity: int,
               graph: bool = False) -> Draft:
    """``ngram``, ``layerskip:K`` or ``draft:PATH`` as a draft for ``target`` (``target_path``: its GGUF, whose
    vocabulary a draft GGUF must match)."""
    kind, _, arg = spec.partition(":")
    if kind == "ngram" and not arg:
        return NgramDraft(target.config.vocab, target.device)
    if kind == "layerskip":
        try:
            layers = int(arg)
        except ValueError:
            raise InvalidValueError(f"--spec {spec!r}: layerskip needs a layer count, layerskip:K",
                                    "e.g. --spec layerskip:8") from None
        return ModelDraft(spec, layerskip_weights(target, layers), ops, capacity, graph)
    if kind == "draft" and arg:
        from iotrace.model.gguf_file import open_gguf
        from iotrace.model.weights import from_gguf

        path = Path(arg)
        gguf = open_gguf(path)
        if gguf.config.vocab != target.config.vocab:
            raise InvalidValueError(f"--spec {spec}: the draft's vocabulary of {gguf.config.vocab} tokens differs "
                                    f"from the target's {target.config.vocab}",
                                    "speculative decoding needs a draft with the target's tokenizer")
        if target_path is not None and _gguf_tokens(path) != _gguf_tokens(target_path):
            raise InvalidValueError(f"--spec {spec}: the draft's vocabulary differs from the target's (same size, "
                                    "other tokens)", "speculative decoding needs a draft with the target's tokenizer")
        weights = from_gguf(gguf, target.dtype, str(target.device))
        return ModelDraft(f"draft:{path.name}", weights, ops, capacity, graph)
    raise InvalidValueError(f"--spec {spec!r} is not a draft", "use ngram, layerskip:K or draft:PATH")
