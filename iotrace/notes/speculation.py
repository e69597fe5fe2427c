"""Model note: speculative decoding on the pinned model, acceptance measured against identity 5.

The pinned SmolLM2-135M (fp32, the torch path on the CPU) decodes the shipped code, prose and chat prompts
(``iotrace/data/spec_prompts.toml``) greedily, plainly and with two drafts (prompt lookup and the first 24 of its 30
layers) at γ = 2 and 4. Greedy acceptance is deterministic, so α, the acceptance curve and tokens per step are
reproducible figures; wall times are not, so the note shows none (``iotrace bench --spec`` measures them, with c and
the speedup, in the same run as plain decoding).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from iotrace.notes.document import Note, table

#: What the note runs: small enough to rebuild in well under 90 s on a 2-core CPU.
DRAFTS = ("ngram", "layerskip:24")
GAMMAS = (2, 4)
TOKENS = 32
COMMAND = ("iotrace bench --spec ngram --spec layerskip:24 --gamma 2,4 --prompt-set spec --gen-tokens 32 "
           "--kernels torch --dtype fp32")


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


@cache  # the speculation-pays note reads the same runs: measured once per process for both
def measure() -> list[dict[str, Any]]:
    """Per prompt, draft and γ: the identity check of greedy speculation and its acceptance figures (the same list
    on every call: callers must not change it)."""
    import torch

    from iotrace.model.decoder import Decoder
    from iotrace.model.drafts import make_draft
    from iotrace.model.gguf_file import open_gguf, pinned_gguf
    from iotrace.model.ops import TorchOps
    from iotrace.model.spec_bench import acceptance_figures, spec_prompts
    from iotrace.model.speculate import plain_generate, speculative_generate
    from iotrace.model.tokenizer import gguf_tokenizer
    from iotrace.model.weights import from_gguf

    path = pinned_gguf()
    weights = from_gguf(open_gguf(path), torch.float32, "cpu")
    tokenizer = gguf_tokenizer(path)
    ops = TorchOps()
    prompts = [(p, list(tokenizer.encode(p.text, add_special_tokens=False))) for p in spec_prompts()]
    capacity = max(len(ids) for _, ids in prompts) + TOKENS + max(GAMMAS) + 2
    target = Decoder(weights, ops, 1, capacity)
    drafts = [make_draft(spec, weights, path, ops, capacity) for spec in DRAFTS]
    rows = []
    for prompt, ids in prompts:
        plain = plain_generate(target, ids, TOKENS).tokens
        for draft in drafts:
            for gamma in GAMMAS:
                run = speculative_generate(target, draft, ids, TOKENS, gamma)
                figures = acceptance_figures([(s.proposed, s.accepted) for s in run.steps], gamma)
                rows.append({"prompt": prompt, "prompt_tokens": len(ids), "draft": draft.name, "gamma": gamma,
                             "identical": run.tokens == plain,
                             **figures})
    return rows


def _figures_table(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        z = r["identity5_z"]
        holds = {True: "yes", False: "**no**", None: "n/a"}[r["identity5_within_3se"]]
        out.append([r["prompt"].kind, r["draft"], r["gamma"], r["steps"], _f(r["alpha"]),
                    f"{_f(r['tokens_per_step'])} ± {_f(r['tokens_per_step_se'])}", r["full_steps"],
                    _f(r["full_alpha"]), _f(r["full_tokens_per_step"]), _f(r["identity5_tokens_per_step"]),
                    _f(z, 1), holds, "yes" if r["identical"] else "**no**"])
    return table(["prompt", "draft", "γ", "target steps", "α", "tokens/step ± SE", "full-γ steps", "their α",
                  "their tokens/step", "identity 5 E", "z", "within 3 SE", "tokens = plain greedy"], out)


def _curve_table(rows: list[dict[str, Any]]) -> str:
    gamma = max(GAMMAS)
    out = []
    for r in rows:
        if r["gamma"] != gamma:
            continue
        cells = [f"{_f(c['p'])} ({c['accepted']}/{c['reached']})" if c["reached"] else "·" for c in r["curve"]]
        out.append([r["prompt"].kind, r["draft"], _f(r["alpha"]), *cells])
    return table(["prompt", "draft", "α", *(f"P(accept {i} | reached {i})" for i in range(1, gamma + 1))], out)


def build(corpus: Path | None = None, images: bool = True) -> Note:
    """The speculation note (``corpus`` and ``images`` are unused: no third-party trace, tables only)."""
    rows = measure()
    sources = "; ".join(f"{r['prompt'].kind}: {r['prompt'].source}" for r in rows[::len(DRAFTS) * len(GAMMAS)])
    note = Note("speculation", "Model note: speculative decoding, acceptance against identity 5", {
        "model": "SmolLM2-135M-Instruct Q4_1 (the pinned GGUF), fp32, the torch path on a CPU",
        "prompts": f"`iotrace/data/spec_prompts.toml` ({sources})",
        "drafts": "prompt lookup (n-gram, suffixes of 4 down to 2 tokens); the target's first 24 of 30 layers with "
                  "its final norm and LM head (layer skipping, no early-exit training)",
        "kind": f"measured: greedy, {TOKENS} tokens per run, deterministic on this CPU; no wall times (not "
                "reproducible): `iotrace bench --spec` times plain and speculative decoding in alternated "
                "repetitions (`--reps`) and gives each speedup a 95% interval"})
    identical = all(r["identical"] for r in rows)
    note.add("acceptance", "α and tokens per target step against identity 5",
             "α is accepted over attempted draft positions (a step that rejects at position r attempted r of them). "
             "Identity 5, E = (1 − α^(γ+1)) / (1 − α), is worked at the α of the steps that proposed the full γ and "
             "set against those steps' mean tokens per target step; z is the gap in standard errors. Steps that "
             "proposed fewer tokens (prompt lookup finding no match) are not the formula's case; the first "
             "tokens/step column counts every step. Greedy speculative output "
             f"{'equals plain greedy decoding in every row' if identical else 'differs from plain decoding somewhere'}"
             ".", _figures_table(rows), f"`{COMMAND}`")
    note.add("curves", f"Acceptance by draft position (γ = {max(GAMMAS)})",
             "Identity 5 assumes every position is accepted with the same α, independently. The curve "
             "P(accepted at i | reached i) shows where that holds: flat near α, it does; prompt lookup's is near 1 "
             "once a copied span starts and near 0 when none does (bursty, not i.i.d.), so a single α understates "
             "long accepted runs and overstates the rest.", _curve_table(rows), f"`{COMMAND} --json`")
    note.add("reading", "Reading it",
             "Prompt lookup pays almost nothing per proposal and wins where the output copies its context (the "
             "prose prompt's repeated clauses, the chat prompt's list); on fresh text it proposes nothing and costs "
             "nothing. Layer skipping without early-exit training (LayerSkip trains for it, Elhoushi et al. 2024) "
             "is a poor draft here: the first 24 layers' next-token guess rarely survives the last 6, and each "
             "draft token costs about 0.8 of a target step, so on any device it is slower than plain decoding. "
             "`iotrace math spec --bench FILE` works identity 5 with a bench file's measured α and c.")
    return note
