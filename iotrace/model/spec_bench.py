"""``iotrace bench --spec``: speculative decoding of the real model, measured beside plain decoding in the same run.

Each prompt runs ``reps`` times; within a repetition plain decoding runs first, then each draft at each γ, so plain
and speculative runs alternate and share the machine's drift (clock, temperature, load) instead of one of them
catching it alone.

Estimators (per prompt, draft and γ; every step's proposed n and accepted a are kept):

- α (acceptance rate) = accepted / attempted draft positions, where a step that accepts a of n proposed tokens
  attempted a + 1 positions when it rejected one (a < n) and n when it accepted all. It is the maximum-likelihood
  estimate of identity 5's per-position acceptance probability when acceptances are i.i.d. (a geometric run
  truncated at n), the assumption of Leviathan et al. 2023, section 3.1.
- the acceptance curve: P(accepted at i | reached i) = #steps with a ≥ i / #steps with n ≥ i and a ≥ i − 1; flat
  at α when acceptances are i.i.d.
- tokens per target step: the mean of a + 1 over the steps, with its standard error s / √steps.
- identity 5 (iotrace.identities.spec_expected_tokens) at the α of the steps that proposed the full γ, against the
  mean tokens of those steps: the check of the formula (steps with fewer proposals, the n-gram draft's misses, are
  not the formula's case and are reported apart).
- α, the curve, tokens per step and identity 5 count the first repetition's steps: a greedy run (and a sampled
  one, reseeded per run) takes the same steps every repetition, so pooling them would count each step ``reps``
  times and shrink the standard errors without new evidence.
- c (draft cost) = draft time per proposed token / the plain decode step's time, both measured in this run over
  every repetition (the paper's c, the cost of one draft step relative to one target step); the verify forward of
  γ + 1 tokens against the plain step is reported beside it (identity 5's speedup assumes 1; on a GPU it is close
  to 1, on a CPU not).
- speedup: per repetition, plain decoding's wall over speculative decoding's for the same number of tokens after
  the prefill; the geometric mean of those ratios with a 95% t-interval (:func:`iotrace.model.ab_stats.
  ratio_interval`). An interval holding 1 is within noise; one repetition cannot tell; a run whose draft proposed
  no token was plain decoding, and has no speedup.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from iotrace.errors import DataFileError, InvalidValueError
from iotrace.model.ab_stats import CANNOT_TELL, GAIN, LOSS, WITHIN_NOISE, ratio_interval

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.model.speculate import PlainRun, SpecRun

__all__ = ["MAX_GAMMA", "NO_PROPOSALS", "NO_PROPOSALS_REASON", "SpecPrompt", "SpecRequest", "acceptance_figures",
           "best_gamma", "run_spec_bench", "spec_prompts", "speedup_of"]

#: The draft lengths the bench accepts: the draft-verify kernel's bound (DraftVerifySpec.check_shape).
MAX_GAMMA = 32
#: |z| within which identity 5 is said to hold: the target's "within 3 standard errors".
Z_LIMIT = 3.0
#: The verdict, and its reason, of a run whose draft proposed nothing in any repetition: every step was the target's
#: own decode step, so the run was plain decoding and its wall ratio is noise, not a speedup.
NO_PROPOSALS = "no draft tokens proposed"
NO_PROPOSALS_REASON = "no draft tokens proposed: this was plain decoding"


@dataclass(frozen=True)
class SpecPrompt:
    key: str
    kind: str
    source: str
    text: str


@cache
def spec_prompts() -> tuple[SpecPrompt, ...]:
    """The shipped speculation prompts (``iotrace/data/spec_prompts.toml``), in the file's order."""
    try:
        raw = tomllib.loads(resources.files("iotrace.data").joinpath("spec_prompts.toml").read_text(encoding="utf-8"))
        return tuple(SpecPrompt(r["key"], r["kind"], r["source"], r["text"]) for r in raw["prompt"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"iotrace/data/spec_prompts.toml cannot be read ({exc})",
                            "reinstall iotrace or restore the file from git") from exc


@dataclass(frozen=True)
class SpecRequest:
    """What ``iotrace bench --spec`` was asked for."""

    drafts: tuple[str, ...]
    gammas: tuple[int, ...]
    #: (key, kind, source, text) per prompt
    prompts: tuple[SpecPrompt, ...]
    gen_tokens: int = 32
    gguf: Path | None = None
    dtype: str | None = None
    kernels: str | None = None
    temperature: float = 0.0
    seed: int = 0
    #: alternated repetitions of plain and speculative decoding per prompt (an interval needs 2)
    reps: int = 3


def acceptance_figures(steps: Sequence[tuple[int, int]], gamma: int) -> dict[str, Any]:
    """α, the acceptance curve, tokens per step ± SE and identity 5 from the (proposed, accepted) of each step."""
    from iotrace.identities import spec_expected_tokens

    def alpha_of(rows: Sequence[tuple[int, int]]) -> tuple[float | None, int, int]:
        accepted = sum(a for _, a in rows)
        attempted = sum(a + 1 if a < n else n for n, a in rows)
        return (accepted / attempted if attempted else None), accepted, attempted

    def mean_se(values: list[int]) -> tuple[float | None, float | None]:
        if not values:
            return None, None
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
        return statistics.fmean(values), se

    alpha, accepted, attempted = alpha_of(steps)
    curve = []
    for i in range(1, gamma + 1):
        reached = sum(1 for n, a in steps if n >= i and a >= i - 1)
        ok = sum(1 for _, a in steps if a >= i)
        curve.append({"position": i, "reached": reached, "accepted": ok, "p": ok / reached if reached else None})
    mean, se = mean_se([a + 1 for _, a in steps])
    full = [(n, a) for n, a in steps if n == gamma]
    full_alpha, _, _ = alpha_of(full)
    full_mean, full_se = mean_se([a + 1 for _, a in full])
    expected = spec_expected_tokens(full_alpha, gamma) if full_alpha is not None else None
    z = (full_mean - expected) / full_se if expected is not None and full_se else None
    holds = None  # undecided with fewer than two full steps (no standard error)
    if z is not None:
        holds = bool(abs(z) <= Z_LIMIT)
    elif expected is not None and full_se == 0:  # every full step emitted the same count: the SE is 0
        holds = math.isclose(full_mean, expected, abs_tol=1e-9)
    return {"steps": len(steps), "proposed": sum(n for n, _ in steps), "accepted": accepted, "attempted": attempted,
            "alpha": alpha, "curve": curve, "tokens_per_step": mean, "tokens_per_step_se": se,
            "full_steps": len(full), "full_alpha": full_alpha, "full_tokens_per_step": full_mean,
            "full_tokens_per_step_se": full_se, "identity5_tokens_per_step": expected, "identity5_z": z,
            "identity5_within_3se": holds}


#: Why a speedup's verdict is what it is, as the table and the JSON state it.
_REASONS = {GAIN: "the 95% interval lies wholly above 1", LOSS: "the 95% interval lies wholly below 1",
            WITHIN_NOISE: "the 95% interval holds 1: within noise, not a gain",
            CANNOT_TELL: "one repetition: cannot tell (no interval; --reps 2 or more)",
            NO_PROPOSALS: NO_PROPOSALS_REASON}


def speedup_of(plain_walls: Sequence[float], spec_walls: Sequence[float], proposed: int) -> dict[str, Any]:
    """The speedup of one draft at one γ over its alternated repetitions: per-repetition plain / speculative walls,
    their geometric mean and 95% interval, the verdict and its reason; no figure when nothing was proposed."""
    if not proposed:
        return {"mean": None, "low": None, "high": None, "confidence": 0.95, "reps": len(spec_walls),
                "values": [], "plain_wall_s": list(plain_walls), "spec_wall_s": list(spec_walls),
                "verdict": NO_PROPOSALS, "reason": _REASONS[NO_PROPOSALS]}
    found = ratio_interval(plain_walls, spec_walls)
    return {"mean": found.mean, "low": found.low, "high": found.high, "confidence": found.confidence,
            "reps": found.reps, "values": list(found.ratios), "plain_wall_s": list(found.a),
            "spec_wall_s": list(found.b), "verdict": found.verdict, "reason": _REASONS[found.verdict]}


def _run_figures(reps: list[SpecRun], gamma: int, plain_walls: list[float], plain_step_s: float,
                 identical: list[bool] | None) -> dict[str, Any]:
    from iotrace.identities import spec_speedup

    # Acceptance from the first repetition (the others take the same steps); timings from every repetition.
    figures = acceptance_figures([(s.proposed, s.accepted) for s in reps[0].steps], gamma)
    steps = [s for run in reps for s in run.steps]
    proposed = sum(s.proposed for s in steps)
    draft_s = sum(s.draft_s for s in steps)
    target_s = sum(s.target_s for s in steps)
    c = draft_s / proposed / plain_step_s if proposed else None
    alpha = figures["full_alpha"] if figures["full_alpha"] is not None else figures["alpha"]
    predicted = spec_speedup(alpha, gamma, c) if alpha is not None and c is not None else None
    speedup = speedup_of(plain_walls, [run.wall_s for run in reps], proposed)
    return {"gamma": gamma, **figures, "draft_s": draft_s / len(reps), "target_s": target_s / len(reps),
            "wall_s": statistics.fmean(run.wall_s for run in reps),
            "draft_cost": c, "verify_step_ms": target_s / len(steps) * 1e3 if steps else None,
            "verify_cost": target_s / len(steps) / plain_step_s if steps else None,
            "identity5_speedup": predicted,
            # Only a speedup beyond noise is a figure here: consumers of `speedup` (`iotrace math spec --bench`,
            # the self-check) then never show a within-noise ratio as one; the interval keeps every value.
            "speedup": speedup["mean"] if speedup["verdict"] in (GAIN, LOSS) else None,
            "speedup_interval": speedup,
            "identical_to_plain": None if identical is None else all(identical),
            "identical_to_plain_reps": identical}


def best_gamma(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The measured best γ (largest speedup among the runs whose interval lies wholly above 1) against identity 5's
    at the pooled α and the mean c."""
    from iotrace.identities import spec_best_gamma, spec_speedup

    gains = [r for r in runs if r["speedup_interval"]["verdict"] == GAIN]
    best = max(gains, key=lambda r: (r["speedup_interval"]["mean"], -r["gamma"])) if gains else None
    verdicts = {r["speedup_interval"]["verdict"] for r in runs}
    if best is not None:
        reason = None
    elif CANNOT_TELL in verdicts:
        reason = _REASONS[CANNOT_TELL]
    elif verdicts == {NO_PROPOSALS}:
        reason = "no draft tokens proposed at any γ: this was plain decoding"
    else:
        reason = "no γ measured a gain: every 95% interval holds 1 or lies below it"
    # The best's lead is itself noise where its interval overlaps another gain's: say which γ it cannot be told from.
    ties = [] if best is None else [
        r["gamma"] for r in gains if r is not best
        and r["speedup_interval"]["high"] >= best["speedup_interval"]["low"]]
    measured = {"measured": None if best is None else best["gamma"], "measured_reason": reason,
                "gains": [r["gamma"] for r in gains], "overlapping": ties}
    accepted = sum(r["accepted"] for r in runs)
    attempted = sum(r["attempted"] for r in runs)
    costs = [r["draft_cost"] for r in runs if r["draft_cost"] is not None]
    if not attempted or not costs:
        return {**measured, "predicted": None, "predicted_any": None, "alpha": None, "draft_cost": None}
    alpha, c = accepted / attempted, statistics.fmean(costs)
    predicted = max((r["gamma"] for r in runs), key=lambda g: (spec_speedup(alpha, g, c), -g))
    return {**measured, "predicted": predicted, "predicted_any": spec_best_gamma(alpha, c),
            "alpha": alpha, "draft_cost": c}


def run_spec_bench(request: SpecRequest, card: Card | None = None,
                   progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Plain decoding and speculative decoding with each draft at each γ, per prompt, in one run."""
    from iotrace.model.decoder import Decoder
    from iotrace.model.drafts import check_draft, make_draft
    from iotrace.model.gguf_file import open_gguf, pinned_gguf
    from iotrace.model.measure import bench_manifest, device_label
    from iotrace.model.ops import make_ops
    from iotrace.model.speculate import plain_generate, speculative_generate
    from iotrace.model.tokenizer import gguf_tokenizer
    from iotrace.model.weights import from_gguf

    if request.reps < 1:
        raise InvalidValueError(f"--reps {request.reps}", "run at least one repetition (two for an interval)")
    for gamma in request.gammas:
        if not 1 <= gamma <= MAX_GAMMA:
            raise InvalidValueError(f"--gamma {gamma} is out of range", f"draft 1 to {MAX_GAMMA} tokens a step")
    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    dtype_name = request.dtype or ("bf16" if on_gpu else "fp32")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    kernels = request.kernels or ("triton" if on_gpu else "torch")
    if kernels == "triton" and (card is None or not on_gpu):
        raise InvalidValueError("--kernels triton needs a GPU (and its card) for --spec",
                                "run on a GPU, or use --kernels torch")
    path = request.gguf if request.gguf is not None else pinned_gguf()
    for spec in request.drafts:
        check_draft(spec, path)
    progress("loading the model")
    weights = from_gguf(open_gguf(path), dtype, device)
    tokenizer = gguf_tokenizer(path)
    ops = make_ops(kernels, card)
    encoded = []
    for prompt in request.prompts:
        ids = list(tokenizer.encode(prompt.text, add_special_tokens=False))
        if not ids:
            raise InvalidValueError(f"the prompt {prompt.key!r} encodes to no tokens", "give it some text")
        encoded.append(ids)
    capacity = max(len(ids) for ids in encoded) + request.gen_tokens + max(request.gammas) + 2
    if capacity > weights.config.context_length:
        raise InvalidValueError(f"a prompt of {capacity - request.gen_tokens} tokens + {request.gen_tokens} "
                                f"generated exceed the context of {weights.config.context_length}",
                                "shorten the prompt or --gen-tokens")
    drafts = [make_draft(spec, weights, path, ops, capacity, graph=on_gpu) for spec in request.drafts]
    target = Decoder(weights, ops, 1, capacity)
    greedy = request.temperature <= 0

    def generator() -> torch.Generator | None:
        return None if greedy else torch.Generator(device=device).manual_seed(request.seed)

    if on_gpu:  # compile every kernel once, untimed
        progress("warm-up")
        plain_generate(target, encoded[0], 4, request.temperature, generator())
        target.graphed()  # plain decoding replays its step as a CUDA graph, as `iotrace bench` does
        for draft in drafts:
            for gamma in request.gammas:
                speculative_generate(target, draft, encoded[0], 2 + gamma, gamma, request.temperature, generator())
    rows = []
    for prompt, ids in zip(request.prompts, encoded, strict=True):
        # Alternated repetitions: plain decoding, then every draft at every γ, then again, so a drift of the machine
        # between repetitions moves plain and speculative walls alike and the per-repetition ratio cancels it.
        plains: list[PlainRun] = []
        specs: dict[tuple[int, int], list[SpecRun]] = {}
        for rep in range(1, request.reps + 1):
            where = f"{prompt.key}, rep {rep} of {request.reps}"
            progress(f"{where}: plain decoding")
            plains.append(plain_generate(target, ids, request.gen_tokens, request.temperature, generator()))
            for index, draft in enumerate(drafts):
                for gamma in request.gammas:
                    progress(f"{where}: {draft.name}, γ = {gamma}")
                    specs.setdefault((index, gamma), []).append(speculative_generate(
                        target, draft, ids, request.gen_tokens, gamma, request.temperature, generator()))
        first = plains[0]
        plain_steps = [s for run in plains for s in run.step_s]
        plain_step = statistics.median(plain_steps) if plain_steps else float("nan")
        plain_walls = [run.wall_s for run in plains]
        row: dict[str, Any] = {
            "key": prompt.key, "kind": prompt.kind, "source": prompt.source, "prompt_tokens": len(ids),
            "plain": {"tokens": first.tokens, "text": tokenizer.decode(first.tokens),
                      "wall_s": statistics.fmean(plain_walls), "wall_s_reps": plain_walls,
                      "step_ms": plain_step * 1e3,
                      "identical_across_reps": all(run.tokens == first.tokens for run in plains) if greedy else None},
            "drafts": []}
        for index, draft in enumerate(drafts):
            runs = []
            for gamma in request.gammas:
                reps = specs[(index, gamma)]
                # Greedy output must equal plain decoding's in its own repetition and in the first.
                identical = [s.tokens == p.tokens == first.tokens for s, p in zip(reps, plains, strict=True)] \
                    if greedy else None
                runs.append(_run_figures(reps, gamma, plain_walls, plain_step, identical))
            row["drafts"].append({"draft": draft.name, "runs": runs, "best_gamma": best_gamma(runs)})
        rows.append(row)
    labels = [] if on_gpu else [f"CPU figures of the {kernels} path (no GPU here): the speedups are CPU speedups, "
                                "not GPU results"]
    return {"schema": "iotrace.bench-spec/1", "model": {"name": weights.config.name, "source": weights.source},
            "device": device_label(on_gpu), "kernels": kernels, "dtype": dtype_name, "batch": 1,
            "mode": "greedy" if greedy else f"sampling at temperature {request.temperature:g}",
            "labels": labels,
            "speculation": {"mode": "greedy" if greedy else "sampling", "temperature": request.temperature,
                            "gen_tokens": request.gen_tokens, "gammas": list(request.gammas),
                            "reps": request.reps,
                            "drafts": list(request.drafts), "prompts": rows,
                            "estimators": _ESTIMATORS},
            "manifest": bench_manifest(request, card)}


_ESTIMATORS = {
    "repetitions": "per prompt, reps alternated repetitions: plain decoding, then each draft at each gamma",
    "alpha": "accepted / attempted draft positions (first repetition: every repetition takes the same steps); a step "
             "rejecting at position r attempted r positions, one accepting all n attempted n",
    "curve": "P(accepted at i | reached i) = #steps with a >= i / #steps with n >= i and a >= i - 1 (first "
             "repetition)",
    "tokens_per_step": "mean of a + 1 over the first repetition's target steps, SE = s / sqrt(steps)",
    "identity5": "E = (1 - alpha^(gamma+1)) / (1 - alpha) at the alpha of the steps proposing the full gamma, "
                 "against those steps' mean tokens; z = (mean - E) / SE (first repetition)",
    "draft_cost": "draft time per proposed token / the plain decode step (median), every repetition",
    "speedup": "per repetition plain wall / speculative wall, the same tokens after the prefill; geometric mean with "
               "a 95% t-interval on the log ratios (t table: NIST/SEMATECH e-Handbook 1.3.6.7.2); an interval "
               "holding 1 is within noise, one repetition cannot tell, no draft tokens proposed is plain decoding "
               "(no speedup); `speedup` is null unless the interval excludes 1",
    "best_gamma": "the largest speedup among the gammas whose 95% interval lies wholly above 1; none otherwise"}
