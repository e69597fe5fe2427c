"""Devices a trace names, matched to CardBook cards.

A file says what it saw (name, compute capability, SMs, memory); :func:`with_cards` adds the CardBook key of the
card with that name, or ``None`` when the CardBook has no such card (an AMD GPU, a card not yet in the book):
an unknown device is information, not an error. :func:`unmatched_notes` says, per such device, which card it would
need; ``with_cards(rows, notes=meta["notes"])`` appends those sentences to the file's notes.
"""

from __future__ import annotations

import numbers
import re
from typing import Any

from iotrace.errors import UnknownCardError

__all__ = ["card_key", "unmatched_notes", "vendor_of", "with_cards"]


def vendor_of(name: str | None, warp_size: Any = None) -> str | None:
    """``"nvidia"``, ``"amd"`` or ``None`` from the device name (and warp size: 64 is AMD's wavefront)."""
    text = (name or "").lower()
    if "amd" in text or "radeon" in text or "instinct" in text or warp_size == 64:
        return "amd"
    if any(word in text for word in ("nvidia", "geforce", "tesla", "quadro", "rtx", "gtx")):
        return "nvidia"
    return None


# What tells variants of one product apart in a card's name while the driver may leave it out: a memory size
# ("... 3080 12GB", "A100-SXM4-80GB"), or the laptop part (a Turing laptop GTX 1650 reports "NVIDIA GeForce GTX 1650").
_VARIANT = re.compile(r"\d+\s*gb\b|\blaptop(\s+gpu)?\b", re.IGNORECASE)


def _sm_count(value: Any) -> int | None:
    """A positive SM count from a row, or None (missing, NaN, zero)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value or value <= 0:
        return None
    return int(value)


def card_key(name: str | None, sm_count: Any = None) -> str | None:
    """The CardBook key for a device name, or None. A name match whose SM count disagrees with the file is refused.

    Variants of one product can share the driver's name and differ in SMs: the RTX 3080 10 GB (68 SMs) and 12 GB
    (70 SMs) both report "NVIDIA GeForce RTX 3080", the desktop (14 SMs) and laptop (16 SMs) GTX 1650 both "NVIDIA
    GeForce GTX 1650". When the named card's SM count disagrees, the other cards whose name or alias is the same name
    plus a memory size or "Laptop GPU" ("NVIDIA GeForce RTX 3080 12GB") are tried, and the one whose SM count agrees
    with the file wins; with none, or with no SM count to compare, there is no second guess.
    """
    if not name or not isinstance(name, str):
        return None
    from iotrace.cards import _normalise, card_book

    book = card_book()
    try:
        card = book.lookup(name)
    except UnknownCardError:
        return None
    sms = _sm_count(sm_count)
    if sms is None or card.sm_count == sms:
        return card.key
    wanted = _normalise(name)
    for other in book:
        if other.sm_count == sms and any(_normalise(_VARIANT.sub("", spelling)) == wanted
                                         for spelling in (other.name, *other.aliases)):
            return other.key
    return None  # e.g. a cut-down variant sharing a name: better no card than the wrong roofline


def unmatched_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per named, non-AMD device row whose ``card`` is None: which card the CardBook would need.

    Rows without a name (an ncu CSV states only a CC) and AMD devices (no AMD card is matched from a trace) get none.
    """
    notes = []
    for row in rows:
        name = row.get("name")
        if row.get("card") is not None or row.get("vendor") == "amd" or not isinstance(name, str) or not name.strip():
            continue
        facts = [f"CC {row['cc']}"] if row.get("cc") else []
        sms = _sm_count(row.get("sm_count"))
        if sms is not None:
            facts.append(f"{sms} SMs")
        device = row.get("device")
        label = f"device {device} " if device is not None and device == device else "device "
        said = f" ({', '.join(facts)})" if facts else ""
        notes.append(f"{label}{name!r}{said} is not in the CardBook: its rooflines use the file's own properties; "
                     "add a card for it to iotrace/data/cards.toml (see docs/commands/cards.md: the CardBook)")
    return notes


def amd_card_key(row: dict[str, Any]) -> str | None:
    """The CardBook key of an AMD device row from its name, gfx target (``arch``), CUs and memory
    (:func:`iotrace.cards.match_amd`); None where those fit no card or more than one (an MI210 and one MI250 GCD
    record the same), since a guessed card would give the roofline the wrong peaks."""
    from iotrace.cards import match_amd

    name, arch = row.get("name"), row.get("arch")
    memory = row.get("memory_bytes")
    memory_gb = float(memory) / 2**30 if isinstance(memory, (int, float)) and memory == memory and memory > 0 else None
    found = match_amd(name if isinstance(name, str) else None, arch if isinstance(arch, str) else None,
                      _sm_count(row.get("sm_count")), memory_gb)
    return None if found.card is None or found.gcd else found.card.key


def with_cards(rows: list[dict[str, Any]], notes: list[str] | None = None) -> list[dict[str, Any]]:
    """Each device row with ``vendor`` (when not given) and ``card`` filled in.

    Given ``notes`` (a parser's ``meta["notes"]``), the :func:`unmatched_notes` sentences are appended to it.
    """
    out = []
    for row in rows:
        row = dict(row)
        if row.get("vendor") is None:
            row["vendor"] = vendor_of(row.get("name"), row.get("warp_size"))
        row["card"] = (card_key(row.get("name"), _sm_count(row.get("sm_count"))) if row.get("vendor") != "amd"
                       else amd_card_key(row))
        out.append(row)
    if notes is not None:
        notes.extend(unmatched_notes(out))
    return out
