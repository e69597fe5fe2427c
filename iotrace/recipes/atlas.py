"""The atlas: recipes as a table grouped by card, then model, quant and engine (the prediction for cards without a
recipe is :mod:`iotrace.recipes.predict`).

A table, not a ranking: rows keep the CardBook's card order, then model, quant, engine and depth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.cards import card_book, lookup
from iotrace.errors import UnknownCardError
from iotrace.recipes.record import Derived, Recipe

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ATLAS_COLUMNS", "atlas_table", "select"]

ATLAS_COLUMNS = ("card", "model", "quant", "engine", "build", "where", "tests", "prefill tok/s", "prefill % of wall",
                 "decode tok/s", "± decode", "decode wall tok/s", "% of wall", "top gap", "aggregate tok/s", "load",
                 "source")


def _card_order() -> dict[str, int]:
    return {card.key: i for i, card in enumerate(card_book().cards)}


def _sort_key(recipe: Recipe, order: dict[str, int]) -> tuple:
    return (order.get(recipe.card or "", len(order)), recipe.card or recipe.machine, recipe.model, recipe.quant,
            recipe.engine, recipe.depth)


def select(recipes: list[Recipe], card: str | None = None, model: str | None = None, quant: str | None = None,
           engine: str | None = None) -> list[Recipe]:
    """The recipes matching every filter given: ``card`` a CardBook name (any spelling) or a machine's whole name as
    the source gives it ("CPU"); ``model``, ``quant`` and ``engine`` a case-insensitive part of the recipe's."""
    key = None
    if card is not None:
        try:
            key = lookup(card).key
        except UnknownCardError:  # not a CardBook card: a machine's name as the source gives it ("CPU"), or a typo
            if not any(card.lower() == r.machine.lower() for r in recipes):
                raise  # the CardBook's own "no card …, did you mean" line, exit 2, as every command
            key = None
    out = []
    for r in recipes:
        if card is not None and not ((key is not None and r.card == key) or card.lower() == r.machine.lower()):
            continue
        if model is not None and model.lower() not in r.model.lower():
            continue
        if quant is not None and quant.lower() not in r.quant.lower():
            continue
        if engine is not None and engine.lower() not in r.engine.lower():
            continue
        out.append(r)
    return out


def _pct(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 1)


def _where(r: Recipe) -> str:
    return r.placement if r.gpus == 1 else f"{r.placement} ×{r.gpus}"


def _tests(r: Recipe) -> str:
    return " · ".join(f.test for f in r.figures)


def _aggregate(r: Recipe) -> tuple[float | None, str]:
    """A rate over all streams, and what it counts: a serving run's output tokens, a throughput run's all tokens."""
    if r.output_tok_s is not None:
        return r.output_tok_s, "output tokens"
    if r.end_to_end is not None and r.decode is None and r.prefill is None:
        return r.end_to_end.tok_s, "prompt + output tokens"
    return None, ""


def _top_gap(derived: Derived) -> str | None:
    """The largest gap of a profiled decode step (its time beyond its floor, as a share of the step): where the rest
    of the wall went, from the run's own trace. None for a recipe with no profiled step."""
    if not derived.gaps:
        return None
    label, pct = derived.gaps[0]
    return f"{label} {pct:.0f}%"


def atlas_table(recipes: list[Recipe]) -> pd.DataFrame:
    """One row per recipe, columns :data:`ATLAS_COLUMNS`, ordered by card (CardBook order), model, quant, engine.

    "tests" names what measured each figure (``pp512 · tg128 @ d4096``, llama-bench's names); "aggregate tok/s" is a
    rate over every stream (a serving run's output tokens, a throughput run's prompt and output tokens) and "load"
    says which and under what load.
    """
    import pandas as pd

    order = _card_order()
    rows = []
    for r in sorted(recipes, key=lambda r: _sort_key(r, order)):
        d = r.derived
        aggregate, counts = _aggregate(r)
        load = ", ".join(x for x in (r.concurrency or "", counts) if x)
        rows.append({
            "card": r.card or r.machine, "model": r.model, "quant": r.quant, "engine": r.engine,
            "build": r.engine_version or "", "where": _where(r), "tests": _tests(r),
            "prefill tok/s": r.prefill.tok_s if r.prefill else None, "prefill % of wall": _pct(d.prefill_fraction),
            "decode tok/s": r.decode.tok_s if r.decode else None,
            "± decode": r.decode.spread if r.decode else None, "decode wall tok/s": d.decode_wall_tok_s,
            "% of wall": _pct(d.decode_fraction), "top gap": _top_gap(d), "aggregate tok/s": aggregate, "load": load,
            "source": r.source.url or r.source.file})
    table = pd.DataFrame(rows, columns=list(ATLAS_COLUMNS))
    for name in ("prefill tok/s", "prefill % of wall", "decode tok/s", "± decode", "decode wall tok/s", "% of wall",
                 "aggregate tok/s"):
        table[name] = table[name].astype("float64")
    return table
