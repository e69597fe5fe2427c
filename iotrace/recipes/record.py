"""One recipe (``iotrace.recipe/1``): a measured run of a model, quant and engine on a card, with its source.

What was measured (``prefill``, ``decode``, ``output_tok_s``, ``ttft_s``, ``itl_s`` …) is kept apart from what
iotrace derived from it (:class:`Derived`: the walls for that card, model and format, and the fractions reached), and
every recipe says where it came from (:class:`Source`: an own run's manifest, or a published file's URL at a commit
and the row as the file prints it), so a number can be checked against its source.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from iotrace.errors import InvalidValueError

__all__ = ["SCHEMA", "Derived", "Figure", "Recipe", "Source"]

SCHEMA = "iotrace.recipe/1"


@dataclass(frozen=True)
class Figure:
    """One measured rate: tok/s with its spread (± one sample standard deviation, where the source gives it), the
    test that measured it (``pp512``, ``tg128 @ d4096``, ``serve 1000 req, 32 req/s``), where in the source it is
    (``line 98``) and the row as the source prints it."""

    tok_s: float
    spread: float | None
    test: str
    location: str
    row: str | None = None


@dataclass(frozen=True)
class Source:
    """Where a recipe came from. ``kind`` is "own run" (``manifest`` is the run's) or "published" (``url`` names the
    file at ``commit``); ``stated`` lists what the importer said that the file does not (its card, tensor
    parallelism, model, weight width, ngl), each with the reason."""

    kind: str
    file: str
    url: str | None = None
    commit: str | None = None
    date: str | None = None
    license: str | None = None
    stated: tuple[str, ...] = ()
    manifest: dict[str, Any] | None = None


@dataclass(frozen=True)
class Derived:
    """What iotrace computed, not what was measured: the decode wall (identity 1) and prefill wall (identity 2, or
    identity 1 per micro-batch where that binds) for the card, model and format, the fractions reached, the reasons
    a wall is missing, and the quant's quality drop where it is known."""

    decode_wall_tok_s: float | None = None
    decode_fraction: float | None = None
    prefill_wall_tok_s: float | None = None
    prefill_fraction: float | None = None
    note: str | None = None
    quality_drop: str | None = None
    #: An own run's profiled decode step (``bench --engine … --profile``): the waterfall's categories in ns, their
    #: labels, the step's span and where the steps came from (``step`` and ``labels``, see ``waterfall``), and its
    #: largest gaps (each row's time beyond its floor) as ``[label, % of the step]``, largest first.
    waterfall: dict[str, Any] | None = None
    gaps: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Recipe:
    """A measured run: card, model, quant and engine; the figures; the source; the derived walls.

    ``card`` is the CardBook key, None when the machine is not a CardBook card (a CPU, or a GPU the CardBook lacks:
    ``machine`` then names it as the source does). ``placement`` is "gpu", "cpu" or "partial" (layers on both).
    ``gpus`` > 1 is tensor parallelism. ``concurrency`` describes a serving run's load ("32 req/s", "all at once").
    """

    card: str | None
    machine: str
    placement: str
    gpus: int
    model: str
    params: float | None
    quant: str
    bits_per_weight: float | None
    weight_bytes: float | None
    engine: str
    engine_version: str | None
    source: Source
    architecture: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    driver: str | None = None
    batch: int | None = None
    concurrency: str | None = None
    depth: int = 0
    prompt_tokens: int | None = None
    gen_tokens: int | None = None
    prefill: Figure | None = None
    decode: Figure | None = None
    end_to_end: Figure | None = None
    output_tok_s: float | None = None
    ttft_s: float | None = None
    itl_s: float | None = None
    vram_gib: float | None = None
    power_w: float | None = None
    command: str | None = None
    derived: Derived = field(default_factory=Derived)

    @property
    def figures(self) -> list[Figure]:
        """The measured rates it holds: prefill, decode, end-to-end, in that order."""
        return [f for f in (self.prefill, self.decode, self.end_to_end) if f is not None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Recipe:
        """A recipe from its dict: no unknown field, every required one present, the nested records whole, then
        :meth:`check`; ``where`` names it in an error."""
        if not isinstance(data, dict):
            raise InvalidValueError(f"{where} is a {type(data).__name__}, not a recipe object",
                                    f"a recipe file holds {{'schema': {SCHEMA!r}, 'recipes': [objects]}}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidValueError(f"{where} has unknown fields {', '.join(unknown)}",
                                    f"write it as `iotrace recipes add` does ({SCHEMA})")
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise InvalidValueError(f"{where} lacks {', '.join(missing)}",
                                    f"write it as `iotrace recipes add` does ({SCHEMA})")
        values = dict(data)
        try:
            values["source"] = Source(**{**data["source"], "stated": tuple(data["source"].get("stated", ()))})
            for name in ("prefill", "decode", "end_to_end"):
                if values.get(name) is not None:
                    values[name] = Figure(**values[name])
            derived = dict(data.get("derived", {}))
            derived["gaps"] = tuple(tuple(g) for g in derived.get("gaps", ()))
            values["derived"] = Derived(**derived)
        except TypeError as exc:
            raise InvalidValueError(f"{where}: {exc}", f"write it as `iotrace recipes add` does ({SCHEMA})") from None
        recipe = cls(**values)
        recipe.check(where)
        return recipe

    def check(self, where: str) -> None:
        """Refuse a recipe whose figures are not positive numbers or that measures nothing."""
        if not isinstance(self.engine, str) or not self.engine or not isinstance(self.model, str) or not self.model:
            raise InvalidValueError(f"{where}: engine and model must be named", "name them")
        if not self.figures:
            raise InvalidValueError(f"{where} holds no measured figure", "a recipe needs a prefill, decode or "
                                    "end-to-end rate")
        for figure in self.figures:
            if isinstance(figure.tok_s, bool) or not isinstance(figure.tok_s, (int, float)) or not figure.tok_s > 0:
                raise InvalidValueError(f"{where}: {figure.test} tok/s is {figure.tok_s!r}, not a positive number",
                                        "restore the recipe as it was written")
        if not isinstance(self.gpus, int) or self.gpus < 1:
            raise InvalidValueError(f"{where}: gpus is {self.gpus!r}", "gpus is a whole number ≥ 1")

