"""Model note: when speculation pays — α against the draft's cost c, and the region where speculation is a tax.

The acceptance runs are the speculation note's (:func:`iotrace.notes.speculation.measure`: the pinned SmolLM2-135M,
greedy, the shipped code, prose and chat prompts, prompt lookup and a 24-layer self-draft at γ = 2 and 4), measured
once per process for both notes. What this note adds is the other half of identity 5's speedup, the cost ratio c,
and it takes c from bytes, not from a clock: batch-1 decode is memory-bound (identity 1), so on a GPU a step's time
is the bytes it reads over bandwidth, and c is the draft's bytes per proposed token over the target's per step,
counted from the GGUF's own tensors. That makes every figure here deterministic; `iotrace bench --spec` measures c
and the speedup by the clock on the machine it runs on (a CPU is not purely memory-bound: its c differs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iotrace import identities as ident
from iotrace.notes import speculation
from iotrace.notes.document import Image, Note, table

#: The draft lengths the curves and the break-even search span: `iotrace bench --gamma` defaults to 1,2,4,8, and
#: beyond 8 the speedup of every measured α here has stopped rising or moved by under 1%.
MAX_GAMMA = 8
#: Cost ratios the break-even table is worked at: prompt lookup's (no weights read), small-draft ratios of the kind
#: Leviathan et al. 2023 report (Table 3: c from 0.02 to 0.11 for T5-small..large drafts of T5-XXL), and larger.
COSTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
#: Speedups the table asks for besides break-even.
TARGETS = (1.5, 2.0)
#: The card the GPU runs of the last section name (the device these sessions may be lent).
GPU_CARD = "h200-sxm"
GPU_COMMAND = (f"iotrace bench --spec ngram --spec layerskip:24 --gamma 1,2,4,8 --prompt-set spec --gen-tokens 128 "
               f"--card {GPU_CARD} --json")


@dataclass(frozen=True)
class DraftCost:
    """A draft's bytes read per proposed token against the target's per decode step (identity 1's N·q)."""

    draft: str
    draft_bytes: int
    target_bytes: int

    @property
    def c(self) -> float:
        return self.draft_bytes / self.target_bytes


def _step_bytes(tensors: dict[str, Any], layers: int, vocab: int) -> int:
    """The weight bytes one decode step reads through ``layers`` layers: every layer tensor, the final norm, the LM
    head (the embedding when tied, as SmolLM2's is) and the one embedding row the token looks up."""
    head = tensors.get("output.weight", tensors["token_embd.weight"])
    blocks = sum(t.n_bytes for name, t in tensors.items()
                 if name.startswith("blk.") and int(name.split(".")[1]) < layers)
    return blocks + tensors["output_norm.weight"].n_bytes + head.n_bytes + tensors["token_embd.weight"].n_bytes // vocab


def draft_costs() -> list[DraftCost]:
    """c of each of the note's drafts on the pinned GGUF, from its tensors' sizes."""
    from iotrace.model.gguf_file import open_gguf, pinned_gguf

    model = open_gguf(pinned_gguf())
    config = model.config
    target = _step_bytes(model.tensors, config.layers, config.vocab)
    costs = []
    for spec in speculation.DRAFTS:
        kind, _, arg = spec.partition(":")
        # Prompt lookup reads no weights: it searches the token ids already on the host.
        draft = 0 if kind == "ngram" else _step_bytes(model.tensors, int(arg), config.vocab)
        costs.append(DraftCost(spec, draft, target))
    return costs


def with_kv(cost: DraftCost, context: int) -> tuple[float, float]:
    """What the KV cache adds to a target step's bytes at ``context`` tokens (fp32, as the note's runs keep it), and
    ``cost``'s c with it counted (a layer-skip draft reads its own layers' cache; prompt lookup none)."""
    from iotrace.model.gguf_file import open_gguf, pinned_gguf

    config = open_gguf(pinned_gguf()).config
    per_layer = ident.kv_cache_bytes(1, config.kv_heads, config.head_dim, context, 4)
    layers = int(cost.draft.partition(":")[2] or 0)
    target = cost.target_bytes + config.layers * per_layer
    return config.layers * per_layer / cost.target_bytes, (cost.draft_bytes + layers * per_layer * bool(
        cost.draft_bytes)) / target


@dataclass(frozen=True)
class Point:
    """One measured run set against identity 5: its α, tokens per target step and c."""

    prompt: str
    draft: str
    gamma: int
    alpha: float
    tokens_per_step: float
    proposed_per_step: float
    c: float

    @property
    def speedup(self) -> float:
        """The run's speedup on a memory-bound device: a target step (the verify) costs 1, each proposed token c."""
        return self.tokens_per_step / (1 + self.proposed_per_step * self.c)


def points(rows: list[dict[str, Any]], costs: list[DraftCost]) -> list[Point]:
    c_of = {cost.draft: cost.c for cost in costs}
    return [Point(r["prompt"].kind, r["draft"], r["gamma"], r["alpha"] or 0.0, r["tokens_per_step"],
                  r["proposed"] / r["steps"], c_of[r["draft"]]) for r in rows]


def pooled_alpha(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """α of each prompt and draft over all its runs (accepted over attempted positions, every γ together)."""
    sums: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        counts = sums.setdefault((r["prompt"].kind, r["draft"]), [0, 0])
        counts[0] += r["accepted"]
        counts[1] += r["attempted"]
    return {key: accepted / attempted if attempted else 0.0 for key, (accepted, attempted) in sums.items()}


def best_speedup(alpha: float, c: float) -> tuple[int, float]:
    """Identity 5's best γ (1..MAX_GAMMA) at α and c, and its speedup."""
    gamma = ident.spec_best_gamma(alpha, c, MAX_GAMMA)
    return gamma, ident.spec_speedup(alpha, gamma, c)


def alpha_needed(c: float, speedup: float) -> float | None:
    """The least α whose best γ reaches ``speedup`` at cost ``c`` (bisection: the best speedup rises with α); None
    when not even α = 1 reaches it within MAX_GAMMA draft tokens."""
    if best_speedup(1.0, c)[1] < speedup:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below the two decimals printed
        mid = (low + high) / 2
        low, high = (mid, high) if best_speedup(mid, c)[1] < speedup else (low, mid)
    return high


def _f(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def _cost_table(costs: list[DraftCost]) -> str:
    rows = [[cost.draft, f"{cost.draft_bytes:,}", f"{cost.target_bytes:,}", _f(cost.c, 3)] for cost in costs]
    return table(["draft", "bytes read per proposed token", "bytes read per target step", "c"], rows)


def _points_table(found: list[Point]) -> str:
    rows = []
    for p in found:
        gamma, best = best_speedup(p.alpha, p.c)
        rows.append([p.prompt, p.draft, p.gamma, _f(p.alpha), _f(p.tokens_per_step), _f(p.proposed_per_step),
                     _f(p.c, 3), f"{_f(p.speedup)}×", f"{_f(ident.spec_speedup(p.alpha, p.gamma, p.c))}×",
                     f"{gamma} ({_f(best)}×)"])
    return table(["prompt", "draft", "γ", "α", "tokens/step", "proposed/step", "c", "speedup (measured steps)",
                  "identity 5 at α", "best γ ≤ 8 at α"], rows)


def _curve_table(alphas: dict[tuple[str, str], float], c_of: dict[str, float]) -> str:
    rows = [[prompt, draft, _f(alpha), _f(c_of[draft], 3),
             *(f"{_f(ident.spec_speedup(alpha, g, c_of[draft]))}×" for g in range(1, MAX_GAMMA + 1))]
            for (prompt, draft), alpha in alphas.items()]
    return table(["prompt", "draft", "α (pooled)", "c", *(f"γ = {g}" for g in range(1, MAX_GAMMA + 1))], rows)


def _break_even_table(extra: list[DraftCost]) -> str:
    rows = []
    for c, label in [(c, "") for c in COSTS] + [(cost.c, f" ({cost.draft})") for cost in extra if cost.c > 0]:
        needed = [alpha_needed(c, s) for s in TARGETS]
        rows.append([f"{_f(c, 3)}{label}", _f(c), *("—" if a is None else _f(a) for a in needed),
                     f"{_f(best_speedup(1.0, c)[1])}×"])
    return table(["c", "break-even α", *(f"α for {_f(s, 1)}×" for s in TARGETS), "at α = 1"], rows)


def _gamma_figure(alphas: dict[tuple[str, str], float], c_of: dict[str, float], found: list[Point]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    gammas = list(range(1, MAX_GAMMA + 1))
    for index, ((prompt, draft), alpha) in enumerate(alphas.items()):
        color = f"hsl({index * 360 // len(alphas)}, 60%, 45%)"
        name = f"{prompt} · {draft} (α {_f(alpha)}, c {_f(c_of[draft])})"
        fig.add_trace(go.Scatter(x=gammas, y=[ident.spec_speedup(alpha, g, c_of[draft]) for g in gammas],
                                 mode="lines", name=name, line={"color": color}))
        measured = [p for p in found if (p.prompt, p.draft) == (prompt, draft)]
        fig.add_trace(go.Scatter(x=[p.gamma for p in measured], y=[p.speedup for p in measured], mode="markers",
                                 marker={"color": color, "size": 10}, showlegend=False))
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="break-even")
    fig.update_layout(title="Identity 5 over γ at each draft's α and c; dots: the measured steps",
                      xaxis_title="γ (draft tokens per target step)", yaxis_title="speedup on a memory-bound device",
                      yaxis_rangemode="tozero", template="plotly_white",
                      legend={"orientation": "h", "y": -0.2})
    return fig


def _region_figure(alphas: dict[tuple[str, str], float], c_of: dict[str, float]) -> Any:
    import plotly.graph_objects as go

    grid = [i / 50 for i in range(51)]
    z = [[best_speedup(alpha, c)[1] for c in grid] for alpha in grid]
    fig = go.Figure(go.Contour(x=grid, y=grid, z=z, contours={"start": 0.5, "end": 4.0, "size": 0.5,
                                                               "showlabels": True},
                               colorscale="RdBu", zmid=1.0, colorbar={"title": "best speedup"}))
    fig.add_trace(go.Scatter(x=[0, 1, 1, 0], y=[0, 1, 0, 0], fill="toself", mode="lines", name="tax: α ≤ c",
                             line={"color": "black", "dash": "dot"}, fillcolor="rgba(0,0,0,0.15)"))
    # A label beside each point, on the side away from the plot's edge (c = 0 sits on the left axis).
    fig.add_trace(go.Scatter(x=[c_of[d] for _, d in alphas], y=list(alphas.values()), mode="markers+text",
                             text=[f"{p} · {d} (α {_f(a)})" for (p, d), a in alphas.items()],
                             textposition=["middle right" if c_of[d] < 0.5 else "middle left" for _, d in alphas],
                             name="measured (pooled α, c from bytes)", marker={"color": "black", "size": 9}))
    fig.update_layout(title=f"Best speedup over γ ≤ {MAX_GAMMA}: speculation pays only above α = c",
                      xaxis_title="c (draft cost per token / target step)", yaxis_title="α (acceptance rate)",
                      xaxis_range=[-0.02, 1.0], yaxis_range=[0, 1.02], template="plotly_white",
                      legend={"orientation": "h", "y": -0.2})
    return fig


def build(images: bool = True) -> Note:
    """The note: c of each draft, the measured points on identity 5's curves, and the break-even region."""
    rows = speculation.measure()
    costs = draft_costs()
    c_of = {cost.draft: cost.c for cost in costs}
    found = points(rows, costs)
    alphas = pooled_alpha(rows)
    longest = max(r["prompt_tokens"] for r in rows) + speculation.TOKENS
    kv_extra, kv_c = with_kv(next(cost for cost in costs if cost.draft_bytes), longest)
    best, worst = max(found, key=lambda p: p.speedup), min(found, key=lambda p: p.speedup)
    note = Note("speculation-pays", "Model note: when speculation pays", {
        "model": "SmolLM2-135M-Instruct Q4_1 (the pinned GGUF), fp32, the torch path on a CPU",
        "runs": "the speculation note's: greedy, the code, prose and chat prompts of `iotrace/data/spec_prompts.toml`, "
                f"{speculation.TOKENS} tokens, drafts {' and '.join(speculation.DRAFTS)} at γ = "
                f"{' and '.join(map(str, speculation.GAMMAS))}",
        "c": "from bytes: the draft's weight bytes per proposed token over the target's per step, from the GGUF's "
             "tensors (identity 1: batch-1 decode is memory-bound)",
        "kind": "α measured (deterministic); c and every speedup modelled for a memory-bound device; no wall times"})
    note.add("cost", "c, the draft's cost, in bytes",
             "Identity 5's speedup is E / (1 + γ·c): c is one draft token's time over one target step. At batch 1 a "
             "step's time is the bytes it reads over bandwidth (identity 1), so c is a ratio of bytes, the same on "
             "every card that keeps the weights in its memory. The layer-skip draft reads its 24 layers, the final "
             "norm and the LM head (SmolLM2 ties it to the embedding, 49,152 × 576 at Q8_0), so it saves only the "
             "last 6 layers' bytes; prompt lookup reads no weights at all. The KV cache is left out: at the longest "
             f"context here ({longest} tokens, fp32) it adds {100 * kv_extra:.1f}% to a target step's bytes and "
             f"moves the layer-skip draft's c to {_f(kv_c, 3)}.",
             _cost_table(costs), "`iotrace bench --spec layerskip:24 --json` measures c by the clock (`draft_cost`).")
    gamma_png = "speculation-pays-gamma.png"
    note.add("points", "The measured runs against identity 5",
             "Each run's speedup on a memory-bound device is its measured tokens per target step over the cost of "
             "that step, 1 for the verify plus c for each token the draft proposed. Identity 5 at the run's α "
             "assumes every step proposes γ tokens; prompt lookup proposes none where it finds no match, so its "
             "measured speedup falls below the formula's. The last column is the γ the formula would pick at that α "
             f"and c, searched over 1 to {MAX_GAMMA}. Best measured: {best.prompt} · {best.draft} at γ = "
             f"{best.gamma}, {_f(best.speedup)}×; worst: {worst.prompt} · {worst.draft} at γ = {worst.gamma}, "
             f"{_f(worst.speedup)}×.", _points_table(found),
             f"![speedup over γ](img/{gamma_png})" if images else "",
             f"`{speculation.COMMAND}`, with c from the table above.")
    note.add("curves", f"Identity 5 over γ = 1 to {MAX_GAMMA}",
             "The speedup at each draft length, at the prompt and draft's pooled α (accepted over attempted "
             "positions at both γ) and its c. With c = 0 every extra draft token is free and the curve only rises, "
             "towards 1 / (1 − α); with c > 0 it peaks and falls, and below break-even it falls from the first "
             "token.", _curve_table(alphas, c_of))
    region_png = "speculation-pays-region.png"
    note.add("break-even", "Break-even: speculation pays only when α > c",
             "E = 1 + α + … + α^γ is at most 1 + γ·α (each α^k ≤ α), with equality at γ = 1. So the speedup "
             "E / (1 + γ·c) exceeds 1 only if α > c, and when α > c, γ = 1 already gives (1 + α) / (1 + c) > 1. "
             "The break-even α is c itself, for any γ: below the diagonal no draft length helps, and more draft "
             "tokens only deepen the loss. Reaching a given speedup needs more: the table gives the least α at "
             f"which the best γ ≤ {MAX_GAMMA} reaches 1.5× and 2×, and the speedup at α = 1 (— where even "
             "perfect acceptance falls short).", _break_even_table(costs),
             f"![the break-even region](img/{region_png})" if images else "",
             "`iotrace math spec --alpha A --draft-cost C` works any point (its best γ over 1 to 64).")
    note.add("gpu", "The runs to add on a GPU",
             "Everything here is α measured on a CPU and c modelled from bytes. On a GPU the clock can check the "
             "model: the draft's c should come out near its byte ratio while the decode step is memory-bound, and "
             "above it where launch overhead dominates a 135M model's short steps (a reason to run the draft "
             f"under a CUDA graph, as `iotrace bench` does by default). On an {GPU_CARD.upper()} when a device is "
             f"lent: `{GPU_COMMAND}` (measured c, the wall-clock speedup over alternated repetitions with its 95% "
             "interval, and identity 5's prediction beside it), "
             "and the same with `--no-graph` to see what launch overhead does to c. A draft model of the target's "
             "family (`--spec draft:PATH`, a smaller GGUF with the same vocabulary) belongs there too: SmolLM2-135M "
             "is its family's smallest, so it would be the draft of SmolLM2-1.7B, not the target.")
    if images:
        note.images += [Image(gamma_png, _gamma_figure(alphas, c_of, found), "speedup over γ"),
                        Image(region_png, _region_figure(alphas, c_of), "the break-even region")]
    return note
