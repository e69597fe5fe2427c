"""Devices a trace names, matched to CardBook cards.

A file says what it saw (name, compute capability, SMs, memory); :func:`with_cards` adds the CardBook key of the
card with that name, or ``None`` when the CardBook has no such card (an AMD GPU, a card not yet in the book):
an unknown device is information, not an error.
"""

from __future__ import annotations

from typing import Any

from iotrace.errors import UnknownCardError

__all__ = ["vendor_of", "with_cards"]


def vendor_of(name: str | None, warp_size: Any = None) -> str | None:
    """``"nvidia"``, ``"amd"`` or ``None`` from the device name (and warp size: 64 is AMD's wavefront)."""
    text = (name or "").lower()
    if "amd" in text or "radeon" in text or "instinct" in text or warp_size == 64:
        return "amd"
    if any(word in text for word in ("nvidia", "geforce", "tesla", "quadro", "rtx", "gtx")):
        return "nvidia"
    return None


def card_key(name: str | None, sm_count: Any = None) -> str | None:
    """The CardBook key for a device name, or None. A name match whose SM count disagrees with the file is refused."""
    if not name or not isinstance(name, str):
        return None
    from iotrace.cards import lookup

    try:
        card = lookup(name)
    except UnknownCardError:
        return None
    if isinstance(sm_count, int) and sm_count > 0 and card.sm_count != sm_count:
        return None  # e.g. a cut-down variant sharing a name: better no card than the wrong roofline
    return card.key


def with_cards(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each device row with ``vendor`` (when not given) and ``card`` filled in."""
    out = []
    for row in rows:
        row = dict(row)
        row.setdefault("vendor", vendor_of(row.get("name"), row.get("warp_size")))
        if row.get("vendor") is None:
            row["vendor"] = vendor_of(row.get("name"), row.get("warp_size"))
        sm = row.get("sm_count")
        row["card"] = card_key(row.get("name"), int(sm) if isinstance(sm, (int, float)) and sm == sm else None) \
            if row.get("vendor") != "amd" else None
        out.append(row)
    return out
