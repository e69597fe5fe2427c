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

__all__ = ["ENV_CARD", "PRECISIONS", "SEGMENTS", "AmdMatch", "Card", "CardBook", "card_book", "detect", "lookup",
           "match_amd"]

_DATA_FILE = "cards.toml"

#: Environment variable naming the card to use when no ``--card`` is given.
ENV_CARD = "IOTRACE_CARD"

#: The markets a card's ``segment`` names, as its vendor files it (data/cards.toml: nvidia-segments, amd-segments).
SEGMENTS = ("datacenter", "workstation", "consumer")

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
    #: The vendor's market for the card (:data:`SEGMENTS`); None for a detected card the CardBook lacks.
    segment: str | None = None
    chip: str = ""
    aliases: tuple[str, ...] = ()
    boost_clock_mhz: float | None = None
    memory_type: str = ""
    l2_cache_mb: float | None = None
    tdp_w: float | None = None
    infinity_cache_mb: float | None = None
    # AMD per-CU resources for occupancy (see the header of data/cards.toml); None on NVIDIA cards.
    gfx: str | None = None
    wave_size: int | None = None
    simds_per_cu: int | None = None
    vgpr_per_simd_kb: int | None = None
    max_waves_per_simd: int | None = None
    lds_per_cu_kb: int | None = None
    gcds: int = 1
    sources: dict[str, str] = field(default_factory=dict)
    citations: dict[str, str] = field(default_factory=dict)
    origin: str = "cardbook"

    @property
    def device_cus(self) -> int:
        """CUs (SMs) of one device as software sees it: an MI250X GCD is a device with half the card's CUs."""
        return self.sm_count // self.gcds

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
            "segment": self.segment,
            "architecture": self.architecture, "chip": self.chip, "cc": self.cc, "sm_count": self.sm_count,
            "boost_clock_mhz": self.boost_clock_mhz, "memory_gb": self.memory_gb, "memory_type": self.memory_type,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs, "l2_cache_mb": self.l2_cache_mb, "tdp_w": self.tdp_w,
            "infinity_cache_mb": self.infinity_cache_mb, "gfx": self.gfx, "wave_size": self.wave_size,
            "simds_per_cu": self.simds_per_cu, "vgpr_per_simd_kb": self.vgpr_per_simd_kb,
            "max_waves_per_simd": self.max_waves_per_simd, "lds_per_cu_kb": self.lds_per_cu_kb, "gcds": self.gcds,
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
    if row.get("segment") not in SEGMENTS:
        raise KeyError(f"card {row.get('key')}: segment {row.get('segment')!r} is not one of {', '.join(SEGMENTS)}")
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



# --- AMD devices named by rocprof / rocminfo / ROCm Kineto ------------------------------------------------------------

@dataclass(frozen=True)
class AmdMatch:
    """What an AMD device description resolves to: one card, or no card and the candidates it could not tell apart.

    ``gcd`` is True when the device is one GCD of a multi-GCD card (MI250X, MI250): its CUs, memory, bandwidth and
    peaks are the card's divided by ``card.gcds``. None when the description does not say (a name alone).
    """

    card: Card | None
    candidates: tuple[str, ...]
    reason: str
    gcd: bool | None = None


# Products not in the CardBook that share a gfx target and CU count with a card that is, so a target and CU count
# alone must not pick the book's card: (name, gfx, CUs, memory GiB). MI350X: rocm-gpu-specs (ROCm 7.x table);
# RX 9070 XT: amdgpu-targets and amd-r9700 (64 CUs, 16 GB). Others sharing gfx1100 / gfx1201 differ in CU count.
_OFF_BOOK_AMD = (("AMD Instinct MI350X", "gfx950", 256, 288.0), ("AMD Radeon RX 9070 XT", "gfx1201", 64, 16.0))

# Names that say "some AMD GPU" and nothing more: ROCm Kineto on an MI250 reports "AMD Radeon Graphics" (corpus-amd).
_GENERIC_AMD = {"", "radeongraphics", "radeon", "gpu"}

# rocprof-compute's series names (sysinfo gpu_model 'MI200' on an MI210, gpu_series 'MI300' on an MI300X; corpus-amd)
# say only which target the device has: MI200 = gfx90a (MI210, MI250, MI250X), MI300 = gfx942 (MI300X, MI300A,
# MI325X), MI350 = gfx950 (MI350X, MI355X), per rocm-gpu-specs.
_AMD_SERIES = {"mi200": "gfx90a", "mi300": "gfx942", "mi350": "gfx950"}


def _amd_norm(name: str) -> str:
    """'AMD Instinct MI300X', 'AMDInstinctMI300X' (rocprof v1 JSON) and 'MI300X_A1' (rocprof-compute) -> 'mi300x'."""
    text = re.sub(r"[_\s-]a\d$", "", name.strip(), flags=re.IGNORECASE)  # rocprof-compute's stepping suffix
    text = re.sub(r"[^a-z0-9]", "", text.lower())
    return re.sub(r"^(amd)?(instinct)?", "", text)


def _gfx_base(gfx: str) -> str:
    """'gfx942:sramecc+:xnack-' (a code-object target id) -> 'gfx942'."""
    return gfx.strip().lower().split(":")[0]


def _named_amd(name: str, cards: list[Card]) -> list[Card] | None:
    """Cards a device name can mean; None when the name carries no identity. 'MI250X/MI250' (rocminfo's name for
    either card's GCD) names both. A series name ('MI200') carries only a target (see _AMD_SERIES)."""
    parts = [_amd_norm(part) for part in name.split("/")]
    if all(part in _GENERIC_AMD or part in _AMD_SERIES for part in parts):
        return None
    found: list[Card] = []
    for part in parts:
        found += [c for c in cards if part in {_amd_norm(s) for s in (c.key, c.name, *c.aliases)} and c not in found]
    return found


def match_amd(name: str | None = None, gfx: str | None = None, cus: int | None = None,
              memory_gb: float | None = None) -> AmdMatch:
    """The CardBook card an AMD device is, from what rocprof, rocminfo, rocprof-compute or ROCm Kineto record.

    ``name``: marketing or product name ('AMD Instinct MI300X', 'AMDInstinctMI300X', 'MI300X_A1', 'MI200',
    'AMD Instinct MI250X/MI250'; 'AMD Radeon Graphics' says nothing). ``gfx``: the agent's target ('gfx942').
    ``cus``: its CU count (one GCD's on an MI250/MI250X). ``memory_gb``: its memory in GiB (within 10%).

    Returns a card only when exactly one product fits. A target alone is ambiguous where products share it
    (gfx942: MI300X, MI300A, MI325X); the CU count then decides, and memory where CUs do not (MI300X 192 GB vs
    MI325X 256 GB). Some devices cannot be told apart at all: an MI210 and one GCD of an MI250 both have gfx90a,
    104 CUs and 64 GiB, and an MI355X looks like an MI350X (not in the book); those come back with no card and the
    candidates, because a guessed card would give a roofline the wrong peaks.
    """
    amd = [c for c in card_book() if c.vendor == "amd"]
    named = _named_amd(name, amd) if name is not None else None
    if named == []:
        return AmdMatch(None, (), f"no AMD card called {name!r} in the CardBook")
    target = _gfx_base(gfx) if gfx else None
    series = {_AMD_SERIES[p] for p in (_amd_norm(part) for part in (name or "").split("/")) if p in _AMD_SERIES}
    if series and target is not None and target not in series:
        return AmdMatch(None, (), f"{name!r} is a {'/'.join(sorted(series))} series name, but the target is {target}")
    if len(series) == 1 and target is None:
        target = series.pop()
    # Every shape a product can show a profiler: the whole card, and for multi-GCD cards one GCD.
    shapes: list[tuple[str, Card | None, str | None, int, float, bool]] = []
    for card in named if named is not None else amd:
        shapes.append((card.key, card, card.gfx, card.sm_count, card.memory_gb, False))
        if card.gcds > 1:
            shapes.append((card.key, card, card.gfx, card.device_cus, card.memory_gb / card.gcds, True))
    if named is None:  # a name would have ruled these out; without one they stay possible
        shapes += [(off, None, g, n, mem, False) for off, g, n, mem in _OFF_BOOK_AMD]
    asked = []
    if target is not None:
        shapes = [s for s in shapes if s[2] == target]
        asked.append(target)
    if cus is not None:
        shapes = [s for s in shapes if s[3] == int(cus)]
        asked.append(f"{int(cus)} CUs")
    if memory_gb is not None:
        shapes = [s for s in shapes if abs(s[4] - memory_gb) <= 0.1 * s[4]]
        asked.append(f"{memory_gb:g} GiB")
    described = ", ".join(([repr(name)] if name else []) + asked) or "nothing"
    keys = tuple(dict.fromkeys(s[0] for s in shapes))
    if named is None and not asked:
        return AmdMatch(None, (), f"{described}: no name, target or CU count to match an AMD card by")
    if not keys:
        return AmdMatch(None, (), f"no AMD card in the CardBook has {described} (a partitioned GPU, e.g. an MI300X "
                                  "in CPX mode, shows a fraction of its CUs)")
    if len(keys) > 1:
        return AmdMatch(None, keys, f"ambiguous: {described} fits {', '.join(keys)}; nothing recorded tells them "
                                    "apart, so no card is assumed")
    card = shapes[0][1]
    if card is None:
        return AmdMatch(None, keys, f"{described} is the {keys[0]}, which is not in the CardBook")
    gcd_flags = {s[5] for s in shapes}
    gcd = gcd_flags.pop() if len(gcd_flags) == 1 and (cus is not None or memory_gb is not None) else None
    what = f"one GCD of {card.key} ({card.device_cus} of {card.sm_count} CUs)" if gcd else card.key
    return AmdMatch(card, keys, f"{described} is {what}", gcd)

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
