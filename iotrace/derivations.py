"""Worked answers: each identity with its inputs named, the numbers substituted and the result.

The numbers come from ``iotrace.identities`` (the pure functions); this module only records how they
were obtained, so that a reader can redo the arithmetic by hand. Every answer here is *modelled*, not
measured, and says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from iotrace import identities as ident
from iotrace.cards import Card
from iotrace.errors import InvalidValueError

__all__ = ["Derivation", "Quantity", "decode", "kv_cache", "num", "prefill", "roofline", "speculation"]


def num(value: float, digits: int = 4) -> str:
    """A number as a reader writes it: 69.33, 60577, 1.074e+09 -> 1.074e9, 27000000000 -> 2.7e10."""
    if float(value).is_integer() and abs(value) < 1e7:  # counts (tokens, blocks) stay whole
        return str(int(value))
    text = f"{value:.{digits}g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


@dataclass(frozen=True)
class Quantity:
    """A named value with its unit and where it came from."""

    symbol: str
    value: float
    unit: str
    meaning: str
    source: str = ""

    def __str__(self) -> str:
        return f"{self.symbol} = {num(self.value)} {self.unit}".rstrip()


@dataclass(frozen=True)
class Derivation:
    """One identity applied: formula, inputs, the substituted arithmetic and the answer."""

    identity: str
    formula: str
    inputs: list[Quantity]
    steps: list[str]
    result: Quantity
    also: list[Quantity] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: str = "modelled"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _finite(what: str, value: float) -> float:
    """Refuse a result that overflowed or vanished: the inputs were outside any real machine or model."""
    if not math.isfinite(value) or value == 0:
        raise InvalidValueError(f"the {what} comes out as {value:g}: the inputs are outside any real card or model",
                                "check the magnitudes (e.g. --params 27e9, not 27e99)")
    return value


def _bandwidth(card: Card | None, bandwidth_gbs: float | None) -> Quantity:
    if bandwidth_gbs is not None:
        return Quantity("B", _finite("bandwidth (--bandwidth-gbs)", bandwidth_gbs * 1e9), "B/s",
                        "memory bandwidth", "given")
    if card is None:
        raise InvalidValueError("no memory bandwidth: neither a card nor --bandwidth-gbs was given",
                                "pass --card NAME or --bandwidth-gbs N")
    return Quantity("B", card.bandwidth_bytes_per_s, "B/s", f"memory bandwidth of {card.name}",
                    card.source("memory_bandwidth_gbs"))


def _peak(card: Card | None, precision: str, peak_tflops: float | None) -> Quantity:
    if peak_tflops is not None:
        return Quantity("P", _finite("peak (--peak-tflops)", peak_tflops * 1e12), "FLOP/s", f"peak {precision}",
                        "given")
    if card is None:
        raise InvalidValueError("no peak FLOP/s: neither a card nor --peak-tflops was given",
                                "pass --card NAME or --peak-tflops N")
    return Quantity("P", card.peak_flop_per_s(precision), "FLOP/s", f"dense {precision} peak of {card.name}",
                    card.source(precision))


def decode(params: float, bytes_per_weight: float | None, *, card: Card | None = None,
           bandwidth_gbs: float | None = None, tokens_per_s: float | None = None) -> Derivation:
    """Identity 1 forwards (tokens/s from q), or inverted when ``tokens_per_s`` is given (q from tokens/s)."""
    b = _bandwidth(card, bandwidth_gbs)
    n = Quantity("N", params, "", "parameters", "given")
    formula = "tok/s ≈ B / (N · q)"
    notes = ["Upper bound at batch 1: every token reads every weight once; KV-cache and activation reads come on top."]
    if tokens_per_s is not None:
        q_value = _finite("bytes per weight", ident.decode_bytes_per_weight_for(tokens_per_s, b.value, params))
        t = Quantity("tok/s", tokens_per_s, "tok/s", "target decode rate", "given")
        result = Quantity("q", q_value, "B/weight", "bytes per weight that reach the target")
        steps = [f"q = B / (N · tok/s) = {num(b.value)} / ({num(params)} × {num(tokens_per_s)}) "
                 f"= {num(q_value)} B/weight"]
        return Derivation("decode wall (identity 1), solved for q", formula, [b, n, t], steps, result,
                          [Quantity("bits", q_value * 8, "bits/weight", "the same in bits")], notes)
    if bytes_per_weight is None:
        raise InvalidValueError("decode needs --bits (or --bytes-per-weight), or --tokens-per-s to solve for q",
                                "e.g. iotrace math decode --card rtx3090 --params 27e9 --bits 4")
    q = Quantity("q", bytes_per_weight, "B/weight", f"bytes per weight ({num(bytes_per_weight * 8)} bits)", "given")
    rate = _finite("decode rate", ident.decode_tokens_per_s(b.value, params, bytes_per_weight))
    steps = [f"tok/s ≈ {num(b.value)} / ({num(params)} × {num(bytes_per_weight)}) = {num(rate)} tok/s"]
    also = [Quantity("weights", params * bytes_per_weight, "B", "bytes read per token"),
            Quantity("ms/tok", 1e3 / rate, "ms", "time per token at the wall")]
    return Derivation("decode wall (identity 1)", formula, [b, n, q], steps,
                      Quantity("tok/s", rate, "tok/s", "decode tokens per second, batch 1"), also, notes)


def prefill(params: float, tokens: float, *, card: Card | None = None, precision: str = "bf16_tensor",
            peak_tflops: float | None = None) -> Derivation:
    """Identity 2: prefill FLOPs for S tokens, the compute-bound rate and the time at peak."""
    p = _peak(card, precision, peak_tflops)
    flops = _finite("prefill work", ident.prefill_flops(params, tokens))
    rate = _finite("prefill rate", ident.prefill_tokens_per_s(p.value, params))
    steps = [f"FLOPs ≈ 2 × {num(params)} × {num(tokens)} = {num(flops)}",
             f"tok/s ≈ {num(p.value)} / (2 × {num(params)}) = {num(rate)} tok/s",
             f"time ≥ FLOPs / P = {num(flops)} / {num(p.value)} = {num(flops / p.value * 1e3)} ms"]
    return Derivation(
        "prefill (identity 2)", "FLOPs ≈ 2 · N · S; tok/s ≈ P / (2 · N)",
        [p, Quantity("N", params, "", "parameters", "given"),
         Quantity("S", tokens, "tokens", "prompt length", "given")],
        steps, Quantity("tok/s", rate, "tok/s", "compute-bound prefill rate at peak"),
        [Quantity("FLOPs", flops, "FLOP", "prefill work"), Quantity("time", flops / p.value, "s", "time at peak")],
        ["At 100% of the dense peak; real prefill reaches a fraction of it. Attention's S² term is left out."])


def kv_cache(layers: int, kv_heads: int, head_dim: int, tokens: float, bytes_per_value: float, *, batch: int = 1,
             card: Card | None = None, weights: Quantity | None = None, scale_bytes: float = 0.0) -> Derivation:
    """Identity 3: KV-cache bytes (with a quantised cache's scales), and with a card, the context that fits beside
    ``weights`` (a quantity whose meaning says how they were sized, or that they are not counted; None: not counted)
    and whether the asked context fits."""
    total = _finite("KV-cache size", ident.kv_cache_bytes(layers, kv_heads, head_dim, tokens, bytes_per_value, batch,
                                                          scale_bytes))
    per_token = ident.kv_cache_bytes(layers, kv_heads, head_dim, 1, bytes_per_value, 1, scale_bytes)
    times_batch = f" × {batch}" if batch != 1 else ""
    result = f" = {num(total)} B ({num(total / 1e9)} GB)"
    if scale_bytes:
        steps = [f"bytes = {layers} × {kv_heads} × (2 × {head_dim} × {num(bytes_per_value)} + {num(scale_bytes)}) × "
                 f"{num(tokens)}{times_batch}{result}"]
    else:
        steps = [f"bytes = 2 × {layers} × {kv_heads} × {head_dim} × {num(tokens)} × {num(bytes_per_value)}"
                 f"{times_batch}{result}"]
    inputs = [Quantity("L", layers, "", "layers", "given"), Quantity("n_kv", kv_heads, "", "KV heads", "given"),
              Quantity("d_h", head_dim, "", "head dim", "given"), Quantity("S", tokens, "tokens", "context", "given"),
              Quantity("q_kv", bytes_per_value, "B", "bytes per value", "given")]
    also = [Quantity("per token", per_token, "B", "KV bytes per token per sequence")]
    notes = []
    if card is not None:
        if weights is None:
            weights = Quantity("W", 0.0, "B", "weights not counted: 'fits' is the KV cache alone", "given")
        memory = card.memory_bytes
        if weights.value >= memory:
            raise InvalidValueError(f"the weights do not fit in {card.name}'s {num(card.memory_gb)} GiB, so no "
                                    f"context fits beside them: {weights.meaning} = {num(weights.value / 2**30)} GiB",
                                    "give --weight-bits at the width you run (e.g. 4), --weight-bits 0 for the KV "
                                    "cache alone, or a larger card")
        inputs.append(weights)
        fits = ident.kv_cache_max_tokens(memory - weights.value, layers, kv_heads, head_dim, bytes_per_value, batch,
                                         scale_bytes)
        steps.append(f"context that fits = ({num(memory)} − {num(weights.value)}) / "
                     f"({num(per_token)} × {batch}) = {fits} tokens per sequence")
        needed = total + weights.value
        sequences = f"{batch} sequence{'s' if batch != 1 else ''}"
        also += [Quantity("fits", fits, "tokens", f"context per sequence that fits in {card.name}'s memory"),
                 Quantity("share", total / memory, "", f"share of {card.name}'s {num(card.memory_gb)} GiB"),
                 Quantity("needs", needed, "B", f"the KV cache of {num(tokens)} tokens × {sequences} plus the "
                                                "weights")]
        ok = needed <= memory
        counted = "" if weights.value else " (not counted)"
        notes.append(f"{num(tokens)} tokens × {sequences} {'fit' if ok else 'do not fit'} in {card.name}: "
                     f"{num(total / 1e9)} GB of KV cache + {num(weights.value / 1e9)} GB of weights{counted} = "
                     f"{num(needed / 1e9)} GB {'≤' if ok else '>'} {num(memory / 1e9)} GB ({num(card.memory_gb)} GiB).")
        notes.append("'fits' ignores activations, allocator slack and the runtime's own memory.")
    if scale_bytes:  # the header states what the steps compute: the scales ride on every token, layer and KV head
        inputs.append(Quantity("s", scale_bytes, "B", "scale bytes per token, layer and KV head", "given"))
    formula = "bytes = L · n_kv · (2 · d_h · q_kv + s) · S" if scale_bytes else "bytes = 2 · L · n_kv · d_h · S · q_kv"
    return Derivation("KV cache (identity 3)", formula, inputs, steps,
                      Quantity("bytes", total, "B", "KV-cache size"), also, notes)


def roofline(flops: float, bytes_moved: float, *, card: Card | None = None, precision: str = "bf16_tensor",
             peak_tflops: float | None = None, bandwidth_gbs: float | None = None) -> Derivation:
    """Identity 4: intensity, ridge, attainable FLOP/s, the bound and the minimum time."""
    p = _peak(card, precision, peak_tflops)
    b = _bandwidth(card, bandwidth_gbs)
    intensity = _finite("intensity", ident.arithmetic_intensity(flops, bytes_moved))
    ridge = ident.ridge_intensity(p.value, b.value)
    attainable = ident.attainable_flop_per_s(intensity, p.value, b.value)
    bound = ident.roofline_bound(intensity, p.value, b.value)
    t_min = max(flops / p.value, bytes_moved / b.value)
    steps = [f"I = {num(flops)} / {num(bytes_moved)} = {num(intensity)} FLOP/B",
             f"ridge = P / B = {num(p.value)} / {num(b.value)} = {num(ridge)} FLOP/B",
             f"attainable = min({num(p.value)}, {num(intensity)} × {num(b.value)}) = {num(attainable)} FLOP/s",
             f"time ≥ max(FLOPs / P, bytes / B) = {num(t_min * 1e6)} µs"]
    return Derivation(
        "roofline (identity 4)", "I = FLOPs / bytes; attainable = min(P, I · B); ridge = P / B",
        [p, b, Quantity("FLOPs", flops, "FLOP", "work", "given"),
         Quantity("bytes", bytes_moved, "B", "traffic", "given")],
        steps, Quantity("attainable", attainable, "FLOP/s", f"{bound}-bound ceiling"),
        [Quantity("I", intensity, "FLOP/B", "arithmetic intensity"), Quantity("ridge", ridge, "FLOP/B", "ridge point"),
         Quantity("t_min", t_min, "s", "minimum time")],
        [f"{bound}-bound: intensity {'below' if bound == 'memory' else 'at or above'} the ridge."])


def speculation(alpha: float, gamma: int, draft_cost: float | None = None) -> Derivation:
    """Identity 5: expected tokens per target step, and the speedup once the draft's cost is paid."""
    expected = ident.spec_expected_tokens(alpha, gamma)
    steps = [f"E = (1 − {num(alpha)}^{gamma + 1}) / (1 − {num(alpha)}) = {num(expected)} tokens per target step"
             if alpha != 1 else f"E = γ + 1 = {gamma + 1} (every draft token accepted)"]
    inputs = [Quantity("α", alpha, "", "acceptance rate per draft token", "given"),
              Quantity("γ", gamma, "", "draft tokens per step", "given")]
    also = []
    if draft_cost is not None:
        speedup = _finite("speedup", ident.spec_speedup(alpha, gamma, draft_cost))
        inputs.append(Quantity("c", draft_cost, "", "draft step time / target step time", "given"))
        steps.append(f"speedup = E / (γ · c + 1) = {num(expected)} / ({gamma} × {num(draft_cost)} + 1) "
                     f"= {num(speedup)}×")
        also.append(Quantity("speedup", speedup, "×", "wall-clock speedup over plain decoding"))
        best = ident.spec_best_gamma(alpha, draft_cost)
        best_speedup = ident.spec_speedup(alpha, best, draft_cost)
        steps.append(f"best γ over 1..64: γ = {best} gives {num(best_speedup)}×")
        also.append(Quantity("best γ", best, "tokens", f"draft length with the largest speedup ({num(best_speedup)}×)"))
    return Derivation("speculation (identity 5)", "E[tokens] = (1 − α^(γ+1)) / (1 − α)", inputs, steps,
                      Quantity("E", expected, "tokens", "tokens per target step"), also,
                      ["Assumes acceptance is independent per token with rate α (Leviathan et al. 2023)."])


def speculation_measured(run: dict, label: str, source: str) -> Derivation:
    """Identity 5 worked with the α, γ and c one ``iotrace bench --spec`` run measured (a run of its JSON's
    ``speculation`` key), beside the tokens per step and speedup it measured."""
    from dataclasses import replace

    alpha = run["full_alpha"] if run.get("full_alpha") is not None else run.get("alpha")
    if alpha is None:
        raise InvalidValueError(f"{source}: {label} attempted no draft position, so it measured no α",
                                "pick a run whose draft proposed tokens")
    worked = speculation(alpha, int(run["gamma"]), run.get("draft_cost"))
    given = f"measured ({source})"
    inputs = [replace(q, source=given) for q in worked.inputs]
    also = list(worked.also)
    if run.get("full_tokens_per_step") is not None:
        se = run.get("full_tokens_per_step_se")
        also.append(Quantity("measured E", run["full_tokens_per_step"], "tokens",
                             f"mean tokens per full-γ target step{f' ± {num(se)} (SE)' if se else ''}", given))
    if run.get("speedup") is not None:
        also.append(Quantity("measured speedup", run["speedup"], "×", "plain wall / speculative wall, same run",
                             given))
    return replace(worked, identity=f"speculation (identity 5): {label}", inputs=inputs, also=also,
                   kind="measured")
