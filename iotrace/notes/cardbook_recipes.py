"""Note: the CardBook's recipes, the published set of measured runs on named cards, each beside its wall.

Built from ``iotrace/data/recipes`` (every recipe from a real published llama-bench, vLLM or SGLang output, cited
by URL at a commit) through :mod:`iotrace.recipes`; deterministic, no corpus and no model needed.
"""

from __future__ import annotations

import statistics

from iotrace.cards import card_book
from iotrace.notes.document import Note, table
from iotrace.recipes.atlas import atlas_table
from iotrace.recipes.predict import predict
from iotrace.recipes.record import Recipe
from iotrace.recipes.store import PUBLISHED, read_folder
from iotrace.render.recipes import atlas_markdown, predictions_markdown

__all__ = ["PREDICTED_MODEL", "PREDICTED_QUANT", "build"]

#: The model and quant the note predicts on every card: the one the most cards measured in the published set.
PREDICTED_MODEL, PREDICTED_QUANT = "llama 8B", "Q4_K - Medium"


def _f(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _prefill_only(recipes: list[Recipe]) -> list[Recipe]:
    return [r for r in recipes if r.decode is None and r.end_to_end is None and r.prefill is not None]


def _ubatch_pivot(recipes: list[Recipe]) -> str:
    """Prefill-only sweeps over llama-bench's n_ubatch: one row per card, model and quant, a column per n_ubatch."""
    ubatches = sorted({r.flags.get("n_ubatch") for r in recipes if r.flags.get("n_ubatch") is not None})
    rows: dict[tuple[str, str, str], dict[int, Recipe]] = {}
    for r in recipes:
        rows.setdefault((r.card or r.machine, r.model, r.quant), {})[r.flags.get("n_ubatch")] = r
    columns = ["card", "model", "quant", "test", *(f"ub {u}: tok/s (% of wall)" for u in ubatches)]
    body = []
    for (card, model, quant), by_ub in rows.items():
        test = next(iter(by_ub.values())).prefill.test  # type: ignore[union-attr]
        body.append([card, model, quant, test, *(
            f"{_f(by_ub[u].prefill.tok_s)} ({_f(100 * by_ub[u].derived.prefill_fraction)}%)"  # type: ignore[union-attr]
            if u in by_ub and by_ub[u].derived.prefill_fraction is not None else
            (_f(by_ub[u].prefill.tok_s) if u in by_ub else "") for u in ubatches)])  # type: ignore[union-attr]
    return table(columns, body)


def _closeness(recipes: list[Recipe]) -> str:
    """Per card: the decode fractions of its single-stream, single-card recipes at depth 0 (serving runs and
    tensor-parallel runs are left out: their per-stream rate is a different question)."""
    order = {c.key: i for i, c in enumerate(card_book().cards)}
    by_card: dict[str, list[Recipe]] = {}
    for r in recipes:
        if r.card and r.depth == 0 and r.gpus == 1 and r.concurrency is None and r.derived.decode_fraction is not None:
            by_card.setdefault(r.card, []).append(r)
    body = []
    for card in sorted(by_card, key=lambda k: order.get(k, len(order))):
        fractions = [r.derived.decode_fraction for r in by_card[card]]
        best = max(by_card[card], key=lambda r: r.derived.decode_fraction)  # type: ignore[arg-type,return-value]
        body.append([card, len(fractions), f"{_f(100 * min(fractions))}%", f"{_f(100 * statistics.median(fractions))}%",
                     f"{_f(100 * max(fractions))}%", f"{best.model} {best.quant} · {best.engine} · "
                     f"{best.decode.test}"])  # type: ignore[union-attr]
    return table(["card", "recipes", "lowest", "median", "highest", "highest: which"], body)


def _sources(recipes: list[Recipe]) -> str:
    seen: dict[str, Recipe] = {}
    for r in recipes:
        seen.setdefault(r.source.url or r.source.file, r)
    body = [[f"[{r.source.file}]({url})", sum(1 for x in recipes if (x.source.url or x.source.file) == url),
             r.source.license or "not stated", "; ".join(r.source.stated) or "nothing: the file says it all"]
            for url, r in seen.items()]
    return table(["source", "recipes", "licence", "stated by the importer (what the file does not say)"], body)


def build() -> Note:
    """The note over the published recipe set."""
    recipes = read_folder(PUBLISHED)
    cards = sorted({r.card for r in recipes if r.card and r.placement == "gpu"})
    sources = {r.source.url or r.source.file for r in recipes}
    note = Note("cardbook-recipes", "CardBook recipes: measured runs on named cards, beside the wall", {
        "recipes": f"{len(recipes)} from {len(sources)} published files, on {len(cards)} named cards "
                   f"({', '.join(cards)})",
        "engines": ", ".join(sorted({r.engine for r in recipes})),
        "kind": "measured by others on their cards (every row cited at a commit); walls and fractions derived here",
        "rebuild": "`iotrace notes rebuild cardbook-recipes`; list or filter with `iotrace recipes --card NAME`"})
    measured = [r for r in recipes if r not in _prefill_only(recipes)]
    note.add("atlas", "The atlas, card by card",
             "Each recipe is one configuration of a published run: prefill (llama-bench's ppN) and decode (tgN) of "
             "the same build, model, quant and depth side by side. The decode wall is identity 1: the card's "
             "bandwidth (times the cards of a tensor-parallel run) over the weight bytes a step reads; the prefill "
             "wall is identity 2 at the card's peak for the weights' arithmetic, or identity 1 per micro-batch where "
             "that is lower. A serving run's decode is one stream's (1 / median TPOT or ITL), which no batch lets "
             "exceed the wall, beside the aggregate output rate. Rows with a partial offload, a mixture of experts "
             "or a card the CardBook lacks carry no wall and say why (`iotrace recipes --json`, derived.note).",
             atlas_markdown(atlas_table(measured)))
    sweep = _prefill_only(recipes)
    if sweep:
        note.add("ubatch", "Prefill by micro-batch: the bandwidth wall until the micro-batch is large",
                 "llama.cpp evaluates a prompt in micro-batches of n_ubatch tokens and each reads every weight once, "
                 "so a prefill at n_ubatch u cannot beat u × bandwidth / weight bytes: at u = 1 a prefill is a "
                 "run of decode steps. Each cell is the measured prefill rate and its share of the lower of that "
                 "bandwidth wall and the compute wall.", _ubatch_pivot(sweep))
    note.add("closeness", "How close each card gets to its decode wall",
             "The decode fractions of each card's single-stream, single-card recipes at depth 0, every model and "
             "quant together: what share of the bus the engines' kernels reach on that card. Serving runs are left "
             "out: their streams share each step with a batch, a different question (see §1).", _closeness(recipes))
    predicted = predict(recipes, PREDICTED_MODEL, PREDICTED_QUANT, "llama.cpp").to_dict()
    note.add("predicted", f"{PREDICTED_MODEL} {PREDICTED_QUANT} on every card: measured where run, predicted elsewhere",
             "The decode wall of the same weights on every CardBook card, and the measured rate where a recipe ran "
             "it (the first test of its sweep). Elsewhere the rate is *predicted* from the nearest measured cards: "
             "the card's own llama.cpp runs of other models, else the cards of its segment (datacenter, "
             "workstation, consumer) and vendor, the same model and quant where they ran it. The rate is the "
             "fraction of the wall reached on the basis card nearest in bandwidth, times the card's wall; the "
             "interval is the basis's lowest to highest fraction; the basis column names every row and how many. "
             "A card with no such neighbour says *no basis* (a datacenter card is never predicted from consumer "
             "cards), and one whose memory cannot hold the weights gets none.", predictions_markdown(predicted),
             f"`iotrace recipes predict --model '{PREDICTED_MODEL}' --quant '{PREDICTED_QUANT}'`")
    note.add("sources", "Sources",
             "Every recipe names its file at a commit and the row it came from (`iotrace recipes --json`: "
             "source, and each figure's location and row). What a file does not say about itself was stated when "
             "it was added, with the reason.", _sources(recipes))
    return note
