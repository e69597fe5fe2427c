"""The CardBook: named GPUs with sourced specifications, and detection of the local device.

Cards live in ``data/cards.toml``, one block per card, every value traceable to a document listed in
that file's ``[sources]`` table. Lookup forgives spelling (``3090``, ``rtx-3090``, ``NVIDIA GeForce RTX
3090``); an unknown name lists the closest cards. Roofline numbers come from here; occupancy limits
come from the card's compute capability (``iotrace.sm_limits``).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from iotrace.errors import DataFileError, InvalidValueError, NoGpuError, UnknownCardError
from iotrace.sm_limits import SMLimits, sm_limits

__all__ = ["ENV_CARD", "PRECISIONS", "Card", "CardBook", "card_book", "detect", "lookup"]

_DATA_FILE = "cards.toml"

#: Environment variable naming the card to use when no ``--card`` is given.
ENV_CARD = "IOTRACE_CARD"

#: Peak-throughput keys a card may state, in TFLOP/s (TOPS for int8), dense, FP32 accumulate for tensor formats.
PRECISIONS = ("fp64", "fp64_tensor", "fp32", "tf32_tensor", "fp16_tensor", "bf16_tensor", "fp8_tensor",
              "int8_tensor")

# Words that carry no identity in a card name: vendor and brand prefixes.
_NOISE = re.compile(r"\b(nvidia|geforce|tesla|amd|radeon instinct|quadro)\b")


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", _NOISE.sub("", name.lower()))


@dataclass(frozen=True)
class Card:
    """One GPU's specifications. Peaks are dense (no sparsity) at boost clock."""

    key: str
    name: str
    vendor: str
    architecture: str
    sm_count: int
    memory_bandwidth_gbs: float | None
    memory_gb: float
    peak_tflops: dict[str, float]
    cc: str | None = None
    chip: str = ""
    aliases: tuple[str, ...] = ()
    boost_clock_mhz: float | None = None
    memory_type: str = ""
    l2_cache_mb: float | None = None
    tdp_w: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    citations: dict[str, str] = field(default_factory=dict)
    origin: str = "cardbook"

    @property
    def bandwidth_bytes_per_s(self) -> float:
        if self.memory_bandwidth_gbs is None:
            raise InvalidValueError(f"{self.name} has no memory bandwidth on record ({self.origin} card)",
                                    "pass --bandwidth-gbs, or name a CardBook card with --card")
        return self.memory_bandwidth_gbs * 1e9

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes: vendors' "80 GB" of HBM or GDDR is 80 GiB (a driver reports 2^30-byte units)."""
        return self.memory_gb * 2**30

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense peak of ``precision`` (a key of :data:`PRECISIONS`) in FLOP/s (OP/s for int8)."""
        if precision not in PRECISIONS:
            raise InvalidValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}",
                                    "pick one of those, e.g. fp16_tensor")
        if precision not in self.peak_tflops:
            have = ", ".join(self.peak_tflops) or "none"
            raise InvalidValueError(f"{self.name} states no {precision} peak (it has: {have})",
                                    "pick a precision the card supports")
        return self.peak_tflops[precision] * 1e12

    def source(self, field_name: str) -> str:
        """The source id behind one value (a field name, or a precision key of ``peak_tflops``)."""
        return self.sources.get(field_name) or self.sources.get("default", "unsourced")

    def citation(self, field_name: str) -> str:
        """The full citation behind one value."""
        source = self.source(field_name)
        return self.citations.get(source, source)

    @property
    def sm_limits(self) -> SMLimits:
        if self.cc is None:
            raise InvalidValueError(f"{self.name} has no CUDA compute capability",
                                    "occupancy applies to NVIDIA cards only; use --cc for a CUDA target")
        return sm_limits(self.cc)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "name": self.name, "aliases": list(self.aliases), "vendor": self.vendor,
            "architecture": self.architecture, "chip": self.chip, "cc": self.cc, "sm_count": self.sm_count,
            "boost_clock_mhz": self.boost_clock_mhz, "memory_gb": self.memory_gb, "memory_type": self.memory_type,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs, "l2_cache_mb": self.l2_cache_mb, "tdp_w": self.tdp_w,
            "peak_tflops": dict(self.peak_tflops), "sources": dict(self.sources), "citations": dict(self.citations),
            "origin": self.origin,
        }


class CardBook:
    """All named cards, with forgiving lookup."""

    def __init__(self, cards: list[Card]) -> None:
        self.cards = cards
        self._index: dict[str, Card] = {}
        for card in cards:
            for spelling in (card.key, card.name, *card.aliases):
                norm = _normalise(spelling)
                other = self._index.get(norm)
                if other is not None and other is not card:
                    raise DataFileError(
                        f"iotrace/data/{_DATA_FILE}: {spelling!r} names both {other.key} and {card.key}",
                        "make every key, name and alias unique")
                self._index[norm] = card

    def __iter__(self):
        return iter(self.cards)

    def __len__(self) -> int:
        return len(self.cards)

    def lookup(self, name: str) -> Card:
        """The card called ``name``; raises :class:`UnknownCardError` with the closest names otherwise."""
        if not isinstance(name, str) or not name.strip():
            raise UnknownCardError("an empty card name was given",
                                   "name a card, e.g. --card rtx3090 (see `iotrace cards`)")
        norm = _normalise(name)
        if norm in self._index:
            return self._index[norm]
        close = difflib.get_close_matches(norm, list(self._index), n=4, cutoff=0.6)
        partial = [k for k in self._index if norm and (norm in k or k in norm)]
        names = list(dict.fromkeys(self._index[k].key for k in [*close, *partial]))[:5]
        hint = f"did you mean {', '.join(names)}? " if names else ""
        raise UnknownCardError(f"no card called {name!r} in the CardBook", f"{hint}`iotrace cards` lists them all")


# Fields the data file carries for its readers that no iotrace computation uses yet.
_INFORMATIONAL_FIELDS = ("infinity_cache_mb",)


def _card_from_row(row: dict[str, Any], citations: dict[str, str]) -> Card:
    sources = dict(row.pop("sources", {}))
    missing = sorted(set(sources.values()) - set(citations))
    if "default" not in sources or missing:
        raise KeyError(f"card {row.get('key')}: no default source or unknown source ids {missing}")
    row["aliases"] = tuple(row.get("aliases", ()))
    row["peak_tflops"] = {k: float(v) for k, v in row.get("peak_tflops", {}).items()}
    unknown = set(row["peak_tflops"]) - set(PRECISIONS)
    if unknown:
        raise KeyError(f"card {row.get('key')}: unknown precisions {sorted(unknown)}")
    for name in _INFORMATIONAL_FIELDS:
        row.pop(name, None)
    used = {source: citations[source] for source in sources.values()}
    return Card(sources=sources, citations=used, **row)


@cache
def card_book() -> CardBook:
    """The CardBook shipped with iotrace (``iotrace/data/cards.toml``)."""
    try:
        text = resources.files("iotrace.data").joinpath(_DATA_FILE).read_text(encoding="utf-8")
        raw = tomllib.loads(text)
        citations = raw.get("sources", {})
        cards = [_card_from_row(dict(row), citations) for row in raw["card"]]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(f"iotrace/data/{_DATA_FILE} cannot be read ({exc})",
                            "reinstall iotrace or restore the file from git") from exc
    return CardBook(cards)


def lookup(name: str) -> Card:
    """Shorthand for ``card_book().lookup(name)``."""
    return card_book().lookup(name)


def local_device() -> dict[str, Any] | None:
    """Name, vendor, CC, SM count and memory of GPU 0 from torch.cuda or CuPy, or None when neither sees one."""
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return {"name": props.name, "cc": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
                    "memory_bytes": props.total_memory, "vendor": "amd" if torch.version.hip else "nvidia"}
    except ImportError:
        pass
    except Exception as exc:  # a broken driver or runtime: say what it said instead of a traceback
        raise NoGpuError(f"torch.cuda could not query GPU 0 ({exc})",
                         f"check the driver with nvidia-smi, or name a card with --card / {ENV_CARD}") from exc
    try:
        import cupy

        if cupy.is_available():
            props = cupy.cuda.runtime.getDeviceProperties(0)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            return {"name": name, "cc": f"{props['major']}.{props['minor']}", "sm_count": props["multiProcessorCount"],
                    "memory_bytes": props["totalGlobalMem"], "vendor": "nvidia"}
    except ImportError:
        pass
    except Exception as exc:
        raise NoGpuError(f"CuPy could not query GPU 0 ({exc})",
                         f"check the driver with nvidia-smi, or name a card with --card / {ENV_CARD}") from exc
    return None


def detect(name: str | None = None) -> Card:
    """The card to use: ``name`` if given, else ``$IOTRACE_CARD``, else the local GPU.

    A local GPU that the CardBook does not know still gives a card (name, CC, SMs, memory from the driver)
    with no peaks and no bandwidth, marked ``origin="detected"``.
    """
    chosen = name if name is not None else os.environ.get(ENV_CARD)
    if chosen is not None and chosen != "":
        return lookup(chosen)
    if name is not None:  # an explicit empty name
        return lookup(name)
    device = local_device()
    if device is None:
        raise NoGpuError("no GPU found (torch.cuda and CuPy see none) and no card was named",
                         f"pass --card NAME or set {ENV_CARD} (see `iotrace cards`)")
    try:
        return lookup(device["name"])
    except UnknownCardError:
        return Card(key=_normalise(device["name"]) or "local-gpu", name=device["name"], vendor=device["vendor"],
                    architecture="unknown", sm_count=device["sm_count"], memory_bandwidth_gbs=None,
                    memory_gb=device["memory_bytes"] / 2**30, peak_tflops={},
                    cc=device["cc"] if device["vendor"] == "nvidia" else None, sources={"default": "driver"},
                    origin="detected",
                    citations={"driver": "the local driver's device properties (not in the CardBook: peaks unknown)"})
