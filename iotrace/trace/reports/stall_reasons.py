"""The stall-reason texts (``iotrace/data/stall_reasons.toml``) and the spellings that map onto one reason."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from iotrace.errors import DataFileError

__all__ = ["StallReason", "canonical", "reason", "reasons"]


@dataclass(frozen=True)
class StallReason:
    key: str
    label: str
    meaning: str
    causes: str
    knob: str
    params: tuple[str, ...]
    aliases: tuple[str, ...]
    not_a_stall: bool


@cache
def reasons() -> dict[str, StallReason]:
    text = resources.files("iotrace.data").joinpath("stall_reasons.toml").read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DataFileError(f"iotrace/data/stall_reasons.toml: {exc}", "fix the file") from exc
    return {key: StallReason(key, body["label"], body["meaning"], body["causes"], body["knob"],
                             tuple(body.get("params", ())), tuple(body.get("aliases", ())),
                             bool(body.get("not_a_stall", False)))
            for key, body in raw.items()}


@cache
def _alias_map() -> dict[str, str]:
    out = {}
    for key, body in reasons().items():
        out[key] = key
        for alias in body.aliases:
            out[alias] = key
    return out


def canonical(name: str) -> str:
    """The counter family's spelling of a reason (``no_instructions`` → ``no_instruction``); unknown names as-is."""
    return _alias_map().get(name, name)


def reason(name: str) -> StallReason:
    """The texts of a reason; a reason newer than the data file gets a plain placeholder, not an error."""
    key = canonical(name)
    known = reasons().get(key)
    if known is not None:
        return known
    return StallReason(key, key.replace("_", " ").capitalize(), "A stall reason this iotrace version has no text for.",
                       "See the Nsight Compute Kernel Profiling Guide, 'Warp Stall Reasons'.", "—", (), (), False)
