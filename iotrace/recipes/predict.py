"""``recipes predict``: a model and quant's decode wall on every CardBook card, the rate measured there, or a rate
predicted from the measurements nearest to the card, with their spread, or "no basis".

The wall is identity 1: the card's bandwidth over the weight bytes the recipes of that model and quant state. A
prediction is a fraction of that wall taken from measured recipes of the same engine (one card, every layer on the
GPU, no context, one stream; the first test of each configuration), chosen nearest first:

1. the card's own recipes of other models and quants;
2. else the recipes of cards of its segment (datacenter, workstation, consumer: ``Card.segment``) and vendor; within
   that, those of the same model and quant where there are any.

Nothing further: a datacenter card is never predicted from consumer cards, nor an AMD card from NVIDIA's (their
fractions differ by half: llama 8B Q4_K_M reaches 33-36% of the wall on an A100 and H100 PCIe, 61-71% on GeForce
cards), so a card with no such neighbour says "no basis". The predicted rate is the median fraction of the basis
card nearest in bandwidth (a fixed per-token cost weighs more on a faster bus) times the card's wall; the interval
is the basis's lowest to highest fraction times the same wall. Every prediction names its basis rows.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from iotrace.cards import Card, card_book, lookup
from iotrace.errors import InvalidValueError
from iotrace.recipes.atlas import select
from iotrace.recipes.record import Recipe

__all__ = ["KINDS", "BasisRow", "Prediction", "Predictions", "predict"]

#: What a row of the table is: a rate measured on the card, one predicted from its neighbours, none (no neighbour
#: of its segment and vendor measured), or none because the weights exceed its memory.
KINDS = ("measured", "predicted", "no basis", "does not fit")


@dataclass(frozen=True)
class BasisRow:
    """One measured recipe a prediction rests on: where it ran, what, and the fraction of its own wall it reached."""

    card: str
    model: str
    quant: str
    test: str
    fraction: float
    bandwidth_gbs: float
    source: str


@dataclass(frozen=True)
class Prediction:
    """One card's wall for the model and quant, and its measured or predicted decode rate.

    ``tok_s`` is the measured rate, or the predicted one (``fraction`` of the wall); ``low_tok_s``..``high_tok_s``
    is a prediction's interval (its basis's lowest to highest fraction, times the wall). ``scope`` says how near the
    basis is ("this card", "datacenter nvidia cards"); ``basis`` is the line a person reads; ``basis_rows`` and
    ``n`` are the rows themselves and how many.
    """

    card: str
    segment: str | None
    wall_tok_s: float
    kind: str
    tok_s: float | None
    low_tok_s: float | None
    high_tok_s: float | None
    fraction: float | None
    scope: str
    basis: str
    basis_rows: tuple[BasisRow, ...] = ()

    @property
    def n(self) -> int:
        return len(self.basis_rows)

    def to_dict(self) -> dict:
        return {"card": self.card, "segment": self.segment, "wall_tok_s": self.wall_tok_s, "kind": self.kind,
                "tok_s": self.tok_s, "low_tok_s": self.low_tok_s, "high_tok_s": self.high_tok_s,
                "fraction": self.fraction, "scope": self.scope, "basis": self.basis, "n": self.n,
                "basis_rows": [vars(r) for r in self.basis_rows]}


@dataclass(frozen=True)
class Predictions:
    """Every card's row, and what they rest on: the weight bytes, the engine and the method in one line."""

    model: str
    quant: str
    engine: str
    weight_bytes: float
    method: str
    rows: list[Prediction]

    def to_dict(self) -> dict:
        return {"model": self.model, "quant": self.quant, "engine": self.engine, "weight_bytes": self.weight_bytes,
                "method": self.method, "cards": [r.to_dict() for r in self.rows]}


def _first_of_each(recipes: list[Recipe], by_card: bool = False) -> dict[tuple, Recipe]:
    """The first recipe (in file order: the shortest test of a sweep) of each configuration, or of each card."""
    out: dict[tuple, Recipe] = {}
    for r in recipes:
        key = (r.card,) if by_card else (r.card, r.model, r.quant, r.engine_version, r.source.url or r.source.file,
                                         str(sorted(r.flags.items())))
        out.setdefault(key, r)
    return out


def _single_stream(r: Recipe) -> bool:
    """One card, every layer on its GPU, no context before the test, one stream: the run identity 1 describes."""
    return bool(r.card) and r.gpus == 1 and r.placement == "gpu" and r.depth == 0 and r.concurrency is None


def _basis_row(r: Recipe) -> BasisRow:
    card = lookup(r.card or "")
    fraction = r.derived.decode_fraction or math.nan  # the pool holds only recipes with a fraction
    return BasisRow(card.key, r.model, r.quant, r.decode.test if r.decode else "", fraction,
                    card.memory_bandwidth_gbs or math.nan, r.source.url or r.source.file)


def _weights(recipes: list[Recipe], model: str, quant: str) -> float:
    """The weight bytes of ``model`` in ``quant`` (the median the recipes state), or the one line saying why none."""
    chosen = [r for r in select(recipes, model=model, quant=quant) if r.weight_bytes and r.gpus == 1]
    if not chosen:
        raise InvalidValueError(f"no basis: no recipe measured a model matching {model!r} in a quant matching "
                                f"{quant!r} on one card, so its weight bytes and every wall are unknown",
                                "name a model and quant `iotrace recipes` lists (e.g. --model 'llama 8B' --quant Q4_K)")
    moe = next((r for r in chosen if r.derived.note and "mixture of experts" in r.derived.note), None)
    if moe is not None:  # the atlas's own rule: a token reads only its routed experts, the file's bytes bound nothing
        raise InvalidValueError(f"no wall for {model!r} in {quant!r}: {moe.model} is a mixture of experts, a token "
                                "reads only its routed experts, so the file's weight bytes bound no decode",
                                "predict a dense model (`iotrace recipes --json` says why each run has no wall)")
    return statistics.median(r.weight_bytes for r in chosen)  # type: ignore[misc]


def _kin(one: Card, other: Card) -> bool:
    """Same segment and vendor: the cards whose measured fractions may stand for each other's."""
    return one.segment is not None and (one.segment, one.vendor) == (other.segment, other.vendor)


def _nearest(card: Card, rows: list[BasisRow]) -> tuple[float, list[str]]:
    """The median fraction of the basis card(s) nearest ``card`` in bandwidth (by ratio: 2 TB/s is as near 1 as 4),
    and which they are."""
    def distance(row: BasisRow) -> float:
        return abs(math.log(row.bandwidth_gbs / card.memory_bandwidth_gbs))  # type: ignore[operator]

    best = min(distance(r) for r in rows)
    centre = [r for r in rows if distance(r) == best]
    return statistics.median(r.fraction for r in centre), list(dict.fromkeys(r.card for r in centre))


def _describe(rows: list[BasisRow], same: bool) -> str:
    """The rows as a person checks them: card and fraction, with model and quant where they are not the asked ones."""
    return ", ".join(f"{r.card}{'' if same else f' {r.model} {r.quant}'} {100 * r.fraction:.1f}%" for r in rows)


def _predicted(card: Card, wall: float, pool: list[Recipe], model: str, quant: str, engine: str) -> Prediction:
    own = [r for r in pool if r.card == card.key]
    peers = [r for r in pool if r.card != card.key and _kin(lookup(r.card or ""), card)]
    kin = f"{card.segment} {card.vendor} cards"
    for scope, recipes in (("this card", own), (kin, peers)):
        if not recipes:
            continue
        alike = select(recipes, model=model, quant=quant)
        same = bool(alike) and scope != "this card"  # on this card the same model and quant would be measured
        rows = [_basis_row(r) for r in (alike if same else recipes)]
        fraction, centre = _nearest(card, rows)
        low, high = min(r.fraction for r in rows), max(r.fraction for r in rows)
        what = "same model and quant" if same else "other models and quants"
        basis = (f"{scope}, {what}, n={len(rows)}: {_describe(rows, same)}"
                 + ("" if scope == "this card" else f"; centre {', '.join(centre)} (nearest in bandwidth)"))
        return Prediction(card.key, card.segment, wall, "predicted", fraction * wall, low * wall, high * wall,
                          fraction, scope, basis, tuple(rows))
    return Prediction(card.key, card.segment, wall, "no basis", None, None, None, None, "",
                      f"no basis: {engine} measured no {kin[:-1]}")


def predict(recipes: list[Recipe], model: str, quant: str, engine: str) -> Predictions:
    """For every CardBook card with a bandwidth: the decode wall of ``model`` in ``quant``, and the rate ``engine``
    measured there, else one predicted from its nearest measured neighbours (see the module), else "no basis"."""
    weights = _weights(recipes, model, quant)
    pool = list(_first_of_each([r for r in select(recipes, engine=engine) if _single_stream(r)
                                and r.derived.decode_fraction is not None]).values())
    measured = {key[0]: r for key, r in _first_of_each(
        [r for r in select(recipes, model=model, quant=quant, engine=engine) if _single_stream(r) and r.decode],
        by_card=True).items()}
    rows = []
    for card in card_book().cards:
        if card.memory_bandwidth_gbs is None:
            continue
        wall = card.bandwidth_bytes_per_s / weights
        if card.key in measured:
            r = measured[card.key]
            figure = r.decode
            assert figure is not None  # measured holds only recipes with a decode
            rows.append(Prediction(card.key, card.segment, wall, "measured", figure.tok_s, None, None,
                                   figure.tok_s / wall, "this card", f"{figure.test}, {r.source.url or r.source.file}"))
        elif weights > card.memory_bytes:
            rows.append(Prediction(card.key, card.segment, wall, "does not fit", None, None, None, None, "",
                                   f"{weights / 1e9:.2f} GB of weights > {card.memory_gb:g} GiB "
                                   f"({card.memory_bytes / 1e9:.2f} GB)"))
        else:
            rows.append(_predicted(card, wall, pool, model, quant, engine))
    method = (f"each card's wall for {weights / 1e9:.2f} GB of weights × the fraction of the wall {engine} reached "
              "on the nearest measured cards (the card's own runs of other models, else cards of its segment and "
              "vendor, the same model and quant where measured): the fraction of the basis card nearest in "
              "bandwidth, the interval the basis's lowest to highest; no basis where no such card was measured")
    return Predictions(model, quant, engine, weights, method, rows)
