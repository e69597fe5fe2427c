"""What the INT8 KV cache costs the real model: each key scheme against the 16-bit cache on the same long text.

The pinned model reads the shipped text (:func:`iotrace.model.quality.reference_text`) as one context, teacher
forced, twice or more: once with the 16-bit cache (K and V rounded to fp16, the dtype a GPU run keeps in its cache;
attention itself in fp32) and once per INT8 scheme of ``iotrace.kernels.int8_kv``, quantised by the plugin's own
torch quantiser (:func:`~iotrace.kernels.int8_kv.quantize_reference`, which ``tests/test_int8_kv.py`` holds bit-equal
to the append kernel) and dequantised as the decode kernel folds the scales in.

A teacher-forced prefill in which every query attends to the quantised-then-dequantised K and V of the positions up
to its own is what decoding from the int8 cache computes: each token's K and V are quantised once, when appended,
with scales that depend on that row alone (per-token schemes) or on scales fixed when the cache was created
(per-channel schemes), and never change afterwards. ``tests/test_kv_quality.py`` checks the equivalence against
:meth:`Decoder.decode` token by token over the plugin's decode reference.

Per-channel key scales and the kept outlier channels are calibrated on the first ``calibration`` tokens of the text
(the prompt the cache is created with) and reused for every later token, which clamps where it exceeds them; the
values that clamp are counted.

Figures per scheme: per layer, the cosine of the attention outputs against the 16-bit cache's on the same q, k, v
in the same run ("local": the layer's own error) and against the 16-bit run's attention outputs ("end to end": the
errors of every layer below it included); next-token KL(16-bit ‖ int8), top-1 agreement and perplexity
(:func:`iotrace.model.quality.quality_drop`); bytes per token (identity 3: int8 values, fp32 scales, 16-bit kept
channels) and the tokens of context a fixed budget holds.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from iotrace import identities as ident
from iotrace.errors import InvalidValueError
from iotrace.kernels.int8_kv import (
    KEPT_CHANNELS,
    KEY_MIXED,
    KEY_PER_CHANNEL,
    KEY_PER_TOKEN,
    KEY_SCHEMES,
    KEY_TOKEN_KEPT,
    channel_scales_for,
    kept_values,
    key_side_bytes,
    outlier_channels_for,
    quantize_reference,
)
from iotrace.model.ops import TorchOps
from iotrace.model.quality import EVAL_TEXT_SOURCE, QualityDrop, quality_drop, teacher_forced_logits, text_ids

if TYPE_CHECKING:
    from iotrace.model.weights import LlamaWeights

__all__ = ["CACHE_DTYPE", "DEFAULT_BUDGET_BYTES", "DEFAULT_CALIBRATION", "DEFAULT_TOKENS", "KVCacheOps",
           "KVQualityResult", "SchemeQuality", "kv_quality", "parse_schemes", "scheme_key"]

#: The 16-bit cache's dtype: what a GPU run keeps K and V in (the Triton decoder runs fp16 or bf16; fp16's 10-bit
#: mantissa is the finer of the two, so the reference is the better 16-bit cache).
CACHE_DTYPE = torch.float16
#: Tokens the per-channel scales and kept channels are calibrated on: a 128-token prompt, KIVI's largest group size
#: (Liu et al. 2024, section 4.1: G = 32 or 128).
DEFAULT_CALIBRATION = 128
#: Tokens of the shipped text read as one context: the issue asks for at least 2,000.
DEFAULT_TOKENS = 2048
#: The KV budget the context bought is counted in: 1 GiB of cache.
DEFAULT_BUDGET_BYTES = 2**30
#: int8 codes clamp at ±127 (the quantiser's range, iotrace.kernels.int8_kv): a value whose code rounds past it clips.
_QMAX = 127.0


def scheme_key(name: str) -> int:
    """A scheme's ``key_scales`` value from its name (``per-token``, ``per-channel``, ``per-channel+kept``,
    ``per-token+kept``) or number."""
    names = {v: k for k, v in KEY_SCHEMES.items()}
    name = name.strip()
    if name in names:
        return names[name]
    if name.isdigit() and int(name) in KEY_SCHEMES:
        return int(name)
    raise InvalidValueError(f"unknown INT8 KV scheme {name!r}", f"use one of {', '.join(names)} (or 0-3)")


def parse_schemes(text: str | None) -> tuple[int, ...]:
    """A comma-separated list of scheme names or numbers (None: every scheme), checked before any model loads."""
    if text is None:
        return tuple(KEY_SCHEMES)
    schemes = tuple(dict.fromkeys(scheme_key(part) for part in text.split(",") if part.strip()))
    if not schemes:
        raise InvalidValueError(f"no INT8 KV scheme in {text!r}", f"name one of {', '.join(KEY_SCHEMES.values())}")
    return schemes


def _cosine(dot: float, a2: float, b2: float) -> float:
    return dot / max((a2 * b2) ** 0.5, 1e-300)


@dataclass
class _Calibration:
    """One layer's scales fixed when the cache is created: per-channel scales (schemes 1, 2) and kept channels."""

    channel_scales: torch.Tensor | None
    kept: torch.Tensor | None


class KVCacheOps(TorchOps):
    """The torch ops with attention over a 16-bit (``key_scales=None``) or an INT8 cache of the given scheme.

    Prefill attention attends, causally, to the cache's dequantised K and V; decode attention reads the rows already
    in the decoder's cache through the same quantiser and the plugin's decode reference. With ``reference`` (per
    layer, the 16-bit run's attention outputs) each layer's end-to-end cosine is accumulated too. ``record`` keeps
    this run's attention outputs per layer (the 16-bit run records them for the others).
    """

    def __init__(self, layers: int, key_scales: int | None, calibration: int = DEFAULT_CALIBRATION,
                 reference: Sequence[torch.Tensor] | None = None, record: bool = False) -> None:
        super().__init__()
        if key_scales is not None and key_scales not in KEY_SCHEMES:
            raise InvalidValueError(f"key_scales {key_scales} is not an INT8 KV scheme",
                                    f"use one of {sorted(KEY_SCHEMES)}")
        if calibration < 1:
            raise InvalidValueError(f"calibration over {calibration} tokens", "calibrate on at least 1 token")
        self.layers, self.key_scales, self.calibration = layers, key_scales, calibration
        self.reference = reference
        self.recorded: list[torch.Tensor] | None = [] if record else None
        self._calls = 0
        self._calib: dict[int, _Calibration] = {}
        # Per layer: [q·k sums for the local cosine (dot, |int8|², |16-bit|²), the end-to-end ones].
        self.local = torch.zeros(layers, 3, dtype=torch.float64)
        self.end_to_end = torch.zeros(layers, 3, dtype=torch.float64)
        self.clipped = 0
        self.checked = 0

    # --- the cache the kernel reads ----------------------------------------------------------------------------

    def _calibrate(self, layer: int, keys: torch.Tensor) -> _Calibration:
        """Scales from the first ``calibration`` keys (T, H_kv, d) of the prompt: fixed for the cache's life."""
        if self.key_scales in (None, KEY_PER_TOKEN):
            calib = _Calibration(None, None)
        else:
            scales = channel_scales_for(keys[:self.calibration])
            kept = outlier_channels_for(scales) if self.key_scales in (KEY_MIXED, KEY_TOKEN_KEPT) else None
            channel = scales if self.key_scales in (KEY_PER_CHANNEL, KEY_MIXED) else None
            calib = _Calibration(channel, kept)
        self._calib[layer] = calib
        return calib

    def _dequantized(self, k: torch.Tensor, v: torch.Tensor, calib: _Calibration) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V (…, H_kv, d) as the decode kernel sees them: rounded to the 16-bit cache type, then (INT8 schemes)
        quantised by the plugin's quantiser and multiplied back by their scales, kept channels in 16 bits."""
        k16, v16 = k.to(CACHE_DTYPE), v.to(CACHE_DTYPE)
        if self.key_scales is None:
            return k16.float(), v16.float()
        k_q, k_s = quantize_reference(k16, calib.channel_scales, calib.kept)
        keys = k_q.float() * (k_s[..., None] if k_s is not None else calib.channel_scales)
        if calib.kept is not None:
            at = calib.kept.long().expand(*keys.shape[:-1], -1)
            keys = keys.scatter(-1, at, kept_values(k16, calib.kept).float())
        v_q, v_s = quantize_reference(v16)
        return keys, v_q.float() * v_s[..., None]

    def _count_clipped(self, k: torch.Tensor, calib: _Calibration) -> None:
        """Key values after the calibration prompt whose code rounds past ±127 (clamped); kept channels never clip."""
        if calib.channel_scales is None:
            return
        later = k[self.calibration:].to(CACHE_DTYPE).float()
        codes = torch.floor(later / calib.channel_scales + 0.5).abs() > _QMAX
        if calib.kept is not None:
            codes.scatter_(-1, calib.kept.long().expand(*codes.shape[:-1], -1), False)
        self.clipped += int(codes.sum())
        self.checked += later.numel() - (0 if calib.kept is None else later[..., :calib.kept.shape[-1]].numel())

    # --- attention -----------------------------------------------------------------------------------------------

    def _accumulate(self, sums: torch.Tensor, layer: int, got: torch.Tensor, want: torch.Tensor) -> None:
        g, w = got.double().reshape(-1), want.double().reshape(-1)
        sums[layer] += torch.stack((g @ w, g @ g, w @ w))

    def _prefill_attention(self, q, k, v, cu_seqlens, max_len, out, config) -> None:
        layer = self._calls % self.layers
        self._calls += 1
        for start, end in itertools.pairwise(cu_seqlens.tolist()):
            calib = self._calibrate(layer, k[start:end].to(CACHE_DTYPE))
            keys, values = self._dequantized(k[start:end], v[start:end], calib)
            out[start:end] = self._attend(q[start:end], keys, values, causal=True)
            if self.key_scales is not None:
                self._count_clipped(k[start:end], calib)
                exact = self._attend(q[start:end], *self._dequantized_16(k[start:end], v[start:end]), causal=True)
                self._accumulate(self.local, layer, out[start:end], exact)
        if self.reference is not None:
            self._accumulate(self.end_to_end, layer, out, self.reference[layer])
        if self.recorded is not None:
            self.recorded.append(out.detach().clone())

    @staticmethod
    def _dequantized_16(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return k.to(CACHE_DTYPE).float(), v.to(CACHE_DTYPE).float()

    def _decode_attention(self, q, k_cache, v_cache, context_lens, out, config) -> None:
        from iotrace.kernels.attention_decode import decode_reference

        layer = self._calls % self.layers
        self._calls += 1
        if layer not in self._calib:
            raise InvalidValueError("decode over an INT8 cache that no prefill calibrated",
                                    "prefill the prompt with these ops first")
        length = int(context_lens.max())
        # Quantising every row now equals quantising each when it was appended: a row's codes depend on the row and
        # on scales fixed at prefill only.
        keys, values = self._dequantized(k_cache[:, :length], v_cache[:, :length], self._calib[layer])
        out.copy_(decode_reference(q.float(), keys, values, context_lens)["out"].to(out.dtype))

    # --- results ---------------------------------------------------------------------------------------------------

    def cosines(self, end_to_end: bool = False) -> list[float]:
        sums = self.end_to_end if end_to_end else self.local
        return [_cosine(float(d), float(a), float(b)) for d, a, b in sums.tolist()]


@dataclass(frozen=True)
class SchemeQuality:
    """One INT8 scheme against the 16-bit cache over the same text."""

    scheme: str
    key_scales: int
    #: per layer: attention-output cosine against the 16-bit cache on the same q, k, v (the layer's own error)
    layer_cosine: tuple[float, ...]
    #: per layer: against the 16-bit run's attention outputs (every lower layer's error included)
    layer_cosine_end_to_end: tuple[float, ...]
    min_cosine: float
    min_cosine_layer: int
    quality: QualityDrop
    #: KV bytes per token (all layers): int8 K and V, fp32 scales, 16-bit kept channels (identity 3)
    bytes_per_token: float
    #: 16-bit cache bytes per token / this scheme's
    bytes_ratio: float
    #: tokens of context the budget holds with this cache (identity 3 solved for S)
    context_tokens: int
    #: key values after the calibration prompt that clamp at ±127 (per-channel schemes), and how many were checked
    clipped_values: int
    checked_values: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quality"] = self.quality.to_dict()
        d["layer_cosine"], d["layer_cosine_end_to_end"] = list(self.layer_cosine), list(self.layer_cosine_end_to_end)
        return d


@dataclass(frozen=True)
class KVQualityResult:
    """Every scheme's figures, and the 16-bit cache they are measured against."""

    model: str
    text: str
    tokens: int
    calibration: int
    cache_dtype: str
    kept_channels: int
    budget_bytes: float
    reference_bytes_per_token: float
    reference_context_tokens: int
    schemes: tuple[SchemeQuality, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "iotrace.kv_quality/1", "model": self.model, "text": self.text, "tokens": self.tokens,
                "calibration": self.calibration, "cache_dtype": self.cache_dtype,
                "kept_channels": self.kept_channels, "budget_bytes": self.budget_bytes,
                "reference_bytes_per_token": self.reference_bytes_per_token,
                "reference_context_tokens": self.reference_context_tokens,
                "schemes": [s.to_dict() for s in self.schemes], "seconds": self.seconds}


def _bytes_per_token(weights: LlamaWeights, key_scales: int | None) -> float:
    c = weights.config
    if key_scales is None:
        return ident.kv_cache_bytes(c.layers, c.kv_heads, c.head_dim, 1, 2)
    return ident.kv_cache_bytes(c.layers, c.kv_heads, c.head_dim, 1, 1,
                                scale_bytes=key_side_bytes(key_scales, torch.finfo(CACHE_DTYPE).bits // 8))


def _context(weights: LlamaWeights, key_scales: int | None, budget: float) -> int:
    c = weights.config
    if key_scales is None:
        return ident.kv_cache_max_tokens(budget, c.layers, c.kv_heads, c.head_dim, 2)
    return ident.kv_cache_max_tokens(budget, c.layers, c.kv_heads, c.head_dim, 1,
                                     scale_bytes=key_side_bytes(key_scales, torch.finfo(CACHE_DTYPE).bits // 8))


@torch.inference_mode()
def kv_quality(weights: LlamaWeights, tokenizer: Any, schemes: Sequence[int] = tuple(KEY_SCHEMES),
               tokens: int = DEFAULT_TOKENS, calibration: int = DEFAULT_CALIBRATION,
               budget_bytes: float = DEFAULT_BUDGET_BYTES, ids: list[int] | None = None,
               progress: Callable[[int, int, str], None] | None = None) -> KVQualityResult:
    """Each INT8 key scheme (``key_scales`` values) against the 16-bit cache over the first ``tokens`` tokens of the
    shipped text (or ``ids``) as one context, per-channel scales calibrated on its first ``calibration`` tokens.

    ``progress(done, total, what)`` is called before each of the 1 + len(schemes) teacher-forced runs."""
    started = time.perf_counter()
    ids = text_ids(tokenizer, tokens=tokens) if ids is None else list(ids)
    if not 0 < calibration < len(ids):
        raise InvalidValueError(f"calibration on {calibration} tokens of a {len(ids)}-token text",
                                "calibrate on fewer tokens than the text has (--calibration), e.g. 128")
    unknown = [s for s in schemes if s not in KEY_SCHEMES]
    if unknown or not schemes:
        raise InvalidValueError(f"INT8 KV schemes {list(schemes)}: {unknown or 'none'} unknown",
                                f"choose from {sorted(KEY_SCHEMES)}")
    layers = weights.config.layers

    def say(done: int, message: str) -> None:
        if progress is not None:
            progress(done, len(schemes) + 1, message)

    say(0, f"16-bit cache over {len(ids)} tokens")
    reference_ops = KVCacheOps(layers, None, calibration, record=True)
    reference_logits = teacher_forced_logits(weights, reference_ops, ids)
    recorded = reference_ops.recorded or []
    results = []
    for done, scheme in enumerate(schemes, start=1):
        say(done, f"INT8 {KEY_SCHEMES[scheme]} cache over {len(ids)} tokens")
        ops = KVCacheOps(layers, scheme, calibration, reference=recorded)
        logits = teacher_forced_logits(weights, ops, ids)
        local = ops.cosines()
        worst = min(range(layers), key=local.__getitem__)
        per_token = _bytes_per_token(weights, scheme)
        results.append(SchemeQuality(
            scheme=KEY_SCHEMES[scheme], key_scales=scheme, layer_cosine=tuple(local),
            layer_cosine_end_to_end=tuple(ops.cosines(end_to_end=True)), min_cosine=local[worst],
            min_cosine_layer=worst, quality=quality_drop(reference_logits, logits, ids), bytes_per_token=per_token,
            bytes_ratio=_bytes_per_token(weights, None) / per_token,
            context_tokens=_context(weights, scheme, budget_bytes), clipped_values=ops.clipped,
            checked_values=ops.checked))
        del logits
    return KVQualityResult(
        model=weights.config.name, text=EVAL_TEXT_SOURCE, tokens=len(ids), calibration=calibration,
        cache_dtype=str(CACHE_DTYPE).removeprefix("torch."), kept_channels=KEPT_CHANNELS,
        budget_bytes=float(budget_bytes), reference_bytes_per_token=_bytes_per_token(weights, None),
        reference_context_tokens=_context(weights, None, budget_bytes), schemes=tuple(results),
        seconds=time.perf_counter() - started)
