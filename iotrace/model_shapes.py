"""Transformer shapes of real models (``data/models.toml``), for the identities and kernel presets."""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from iotrace.errors import DataFileError, InvalidValueError

__all__ = ["ModelShape", "model", "models"]


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer, as its config.json states it."""

    key: str
    name: str
    params: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    source: str
    aliases: tuple[str, ...] = ()


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


@cache
def models() -> dict[str, ModelShape]:
    """Every known model by key."""
    try:
        raw = tomllib.loads(resources.files("iotrace.data").joinpath("models.toml").read_text(encoding="utf-8"))
        rows = [ModelShape(**{**row, "aliases": tuple(row.get("aliases", ()))}) for row in raw["model"]]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"iotrace/data/models.toml cannot be read ({exc})",
                            "reinstall iotrace or restore the file from git") from exc
    return {row.key: row for row in rows}


def model(name: str) -> ModelShape:
    """The model called ``name`` (key or alias, spelling-insensitive)."""
    index = {_normalise(s): m for m in models().values() for s in (m.key, m.name, *m.aliases)}
    found = index.get(_normalise(name))
    if found is None:
        close = difflib.get_close_matches(_normalise(name), list(index), n=3, cutoff=0.5)
        # A model matches by key, name and aliases: two close spellings of one model are one suggestion.
        keys = list(dict.fromkeys(index[c].key for c in close))
        hint = f"did you mean {', '.join(keys)}? " if keys else ""
        raise InvalidValueError(f"no model called {name!r}", f"{hint}known: {', '.join(models())}")
    return found
