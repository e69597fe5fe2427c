"""The six identities of inference speed as pure functions (no torch, no I/O).

Units are in the names: ``_bytes``, ``_bytes_per_s``, ``_flops`` (operations), ``_flop_per_s``,
``_tokens_per_s``. Every function cites its formula; ``iotrace/derivations.py`` shows them with the
numbers substituted, and ``iotrace.occupancy`` is identity 6.

| # | identity    | formula                                                         |
|---|-------------|-----------------------------------------------------------------|
| 1 | decode wall | tok/s ≈ B / (N · q)                                             |
| 2 | prefill     | FLOPs ≈ 2 · N · S; tok/s ≈ peak / (2 · N)                       |
| 3 | KV cache    | bytes = 2 · L · n_kv · d_h · S · q_kv                           |
| 4 | roofline    | I = FLOPs / bytes; attainable = min(peak, I · B); ridge = peak/B |
| 5 | speculation | E[tokens] = (1 − α^(γ+1)) / (1 − α)                             |
| 6 | occupancy   | occ = active warps / max warps (iotrace.occupancy)              |
"""

from __future__ import annotations

import math

from iotrace.errors import InvalidValueError

__all__ = [
    "arithmetic_intensity",
    "attainable_flop_per_s",
    "decode_bytes_per_weight_for",
    "decode_tokens_per_s",
    "kv_cache_bytes",
    "kv_cache_max_tokens",
    "prefill_flops",
    "prefill_tokens_per_s",
    "ridge_intensity",
    "roofline_bound",
    "spec_best_gamma",
    "spec_expected_tokens",
    "spec_speedup",
    "time_beyond_floor",
]


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


def _is_finite(value: object) -> bool:
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError):  # an int too large for a float
        return False


def _positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not _is_finite(value) or value <= 0:
        raise InvalidValueError(f"{name}={_shown(value)} must be a positive finite number", f"give {name} > 0")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not _is_finite(value) or value < 0:
        raise InvalidValueError(f"{name}={_shown(value)} must be a finite number >= 0", f"give {name} >= 0")
    return float(value)


# --- 1. decode wall ------------------------------------------------------------------------------------


def decode_tokens_per_s(bandwidth_bytes_per_s: float, params: float, bytes_per_weight: float) -> float:
    """Identity 1, the decode wall: tok/s ≈ B / (N · q).

    At batch 1 every generated token streams every weight from device memory once, so tokens per second
    cannot exceed bandwidth B over the bytes of weights N · q (KV-cache reads and activations are extra).
    """
    return _positive("bandwidth", bandwidth_bytes_per_s) / (_positive("params", params)
                                                            * _positive("bytes_per_weight", bytes_per_weight))


def decode_bytes_per_weight_for(tokens_per_s: float, bandwidth_bytes_per_s: float, params: float) -> float:
    """Identity 1 solved for q: the bytes per weight that reach ``tokens_per_s``, q = B / (N · tok/s)."""
    return _positive("bandwidth", bandwidth_bytes_per_s) / (_positive("params", params)
                                                            * _positive("tokens_per_s", tokens_per_s))


# --- 2. prefill ---------------------------------------------------------------------------------------


def prefill_flops(params: float, tokens: float) -> float:
    """Identity 2: a forward pass over S tokens costs FLOPs ≈ 2 · N · S (one multiply and one add per weight per token).

    Attention's own S² term is left out, as in Kaplan et al. 2020 ("Scaling Laws for Neural Language Models",
    section 2.1, C_forward ≈ 2N); it matters only when S approaches the model width.
    """
    return 2.0 * _positive("params", params) * _positive("tokens", tokens)


def prefill_tokens_per_s(peak_flop_per_s: float, params: float) -> float:
    """Identity 2: the compute-bound prefill rate, tok/s ≈ peak / (2 · N)."""
    return _positive("peak", peak_flop_per_s) / (2.0 * _positive("params", params))


# --- 3. KV cache --------------------------------------------------------------------------------------


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, tokens: float, bytes_per_value: float,
                   batch: int = 1, scale_bytes: float = 0.0) -> float:
    """Identity 3: KV-cache bytes = 2 · L · n_kv · d_h · S · q_kv (· batch).

    The 2 counts K and V; each of L layers keeps n_kv heads of d_h values per token. A quantised cache also keeps
    ``scale_bytes`` per token, layer and KV head (int8 with fp32 scales for K and V per token and head: 8):
    bytes = L · n_kv · (2 · d_h · q_kv + s) · S.
    """
    per_head = 2.0 * _positive("head_dim", head_dim) * _positive("bytes_per_value", bytes_per_value) \
        + _non_negative("scale_bytes", scale_bytes)
    return _positive("layers", layers) * _positive("kv_heads", kv_heads) * per_head * _positive("tokens", tokens) \
        * _positive("batch", batch)


def kv_cache_max_tokens(budget_bytes: float, layers: int, kv_heads: int, head_dim: int, bytes_per_value: float,
                        batch: int = 1, scale_bytes: float = 0.0) -> int:
    """Identity 3 solved for S: the whole tokens of context per sequence that fit in ``budget_bytes``."""
    per_token = kv_cache_bytes(layers, kv_heads, head_dim, 1, bytes_per_value, batch, scale_bytes)
    return math.floor(_non_negative("budget_bytes", budget_bytes) / per_token)


# --- 4. roofline --------------------------------------------------------------------------------------


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """Identity 4: I = FLOPs / bytes (Williams, Waterman, Patterson 2009, "Roofline", CACM 52(4))."""
    return _non_negative("flops", flops) / _positive("bytes", bytes_moved)


def attainable_flop_per_s(intensity: float, peak_flop_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Identity 4: attainable = min(peak, I · B)."""
    return min(_positive("peak", peak_flop_per_s),
               _non_negative("intensity", intensity) * _positive("bandwidth", bandwidth_bytes_per_s))


def ridge_intensity(peak_flop_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Identity 4: the ridge point peak / B, in FLOPs per byte; below it a kernel is memory-bound."""
    return _positive("peak", peak_flop_per_s) / _positive("bandwidth", bandwidth_bytes_per_s)


def roofline_bound(intensity: float, peak_flop_per_s: float, bandwidth_bytes_per_s: float) -> str:
    """``"memory"`` below the ridge, ``"compute"`` at or above it."""
    return "memory" if intensity < ridge_intensity(peak_flop_per_s, bandwidth_bytes_per_s) else "compute"


# --- 5. speculation -----------------------------------------------------------------------------------

#: Draft lengths beyond this are no speculative decoding anyone runs; the bound keeps α^(γ+1) computable.
MAX_DRAFT_TOKENS = 1024


def _acceptance(alpha: float, gamma: int) -> tuple[float, int]:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise InvalidValueError(f"alpha={_shown(alpha)} must be an acceptance rate between 0 and 1", "e.g. --alpha 0.8")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or not 1 <= gamma <= MAX_DRAFT_TOKENS:
        raise InvalidValueError(f"gamma={_shown(gamma)} must be a whole number of draft tokens from 1 to "
                                f"{MAX_DRAFT_TOKENS}", "e.g. --gamma 4")
    return float(alpha), gamma


def spec_expected_tokens(alpha: float, gamma: int) -> float:
    """Identity 5: tokens per target step E = (1 − α^(γ+1)) / (1 − α), and γ + 1 when α = 1.

    With per-token acceptance rate α and γ draft tokens, the target accepts a prefix and adds one token of its
    own (Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1).
    """
    alpha, gamma = _acceptance(alpha, gamma)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def spec_speedup(alpha: float, gamma: int, draft_cost: float) -> float:
    """Identity 5 with the draft's cost: speedup = E / (γ · c + 1).

    ``draft_cost`` c is the time of one draft step over one target step (Leviathan et al. 2023, Theorem 3.8).
    """
    return spec_expected_tokens(alpha, gamma) / (gamma * _non_negative("draft_cost", draft_cost) + 1.0)


def spec_best_gamma(alpha: float, draft_cost: float, max_gamma: int = 64) -> int:
    """The draft length γ in 1..max_gamma with the largest :func:`spec_speedup` (the smallest on ties).

    The speedup rises while the next draft token's expected gain α^(γ+1) outweighs its cost c·E/(γc+1)
    and falls after; with α < 1 and c > 0 it has one peak, so a scan of a bounded range finds it.
    """
    best = max(range(1, max_gamma + 1), key=lambda g: (spec_speedup(alpha, g, draft_cost), -g))
    return best


def time_beyond_floor(categories_ns: dict[str, float], floor_pct: dict[str, float | None]) -> list[tuple[str, int]]:
    """Each row of a step's waterfall less its floor, largest first, zeros left out: the gaps a change can recover.

    A row with a floor (the weight GEMMs, attention) keeps ``ns · (1 − floor%/100)``, where floor% is the share of
    the row its bytes take at the wall's bandwidth (identity 1's B / (N · q), row by row); a floor beaten counts no
    gap. A row without one (launch gaps, copies, the host) moves no byte the wall counts: its floor is zero, the row
    is all gap. ``{"gemm": 80.0}`` and 100 ns of GEMM: a gap of 20 ns.
    """
    out = []
    for category, ns in categories_ns.items():
        pct = floor_pct.get(category)
        beyond = round(ns * max(0.0, 1.0 - pct / 100.0) if pct is not None else ns)
        if beyond > 0:
            out.append((category, beyond))
    return sorted(out, key=lambda item: -item[1])
