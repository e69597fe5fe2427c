"""Weight quantisation formats, each a quantise → dequantise round trip in torch that follows its definition.

A weight is an (out, in) matrix (the nn.Linear layout); block and group scales run along a row (the input
dimension), as GGUF's blocks do (ggml-quants.c quantizes a row at a time, ``k % QK == 0``). Every quantiser returns
fp32 values the format can represent, so the model runs them through the same fp32 decoder: an emulation of the
format's numerics, not of its kernels or memory layout.

Sources, per family (the comment at each function names the rule it follows):

- GGUF Q8_0 / Q4_0 / Q4_1: llama.cpp ``ggml/src/ggml-quants.c`` (``quantize_row_q8_0_ref``, ``..._q4_0_ref``,
  ``..._q4_1_ref``) and its numpy twin ``gguf-py/gguf/quants.py``, which the tests compare against. Scales are
  fp16. ``int8-gN``, ``int4-sym-gN`` and ``int4-asym-gN`` are the same rules with N-element groups (N = 32 is the
  GGUF type itself).
- int8 per channel: symmetric absmax/127 per output row with an fp32 scale (LLM.int8(), Dettmers et al. 2022,
  section 3, "vector-wise quantization"; without its outlier decomposition).
- FP8 E4M3: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, E4M3 (max normal 448), as
  ``torch.float8_e4m3fn``; one fp32 scale amax/448 per tensor or per output channel.
- MXFP4: OCP Microscaling Formats (MX) Specification v1.0, section 6.3: 32-element blocks, E2M1 elements,
  an E8M0 scale X = 2^(floor(log2(amax)) − emax_elem) with emax_elem = 2 for E2M1; elements rounded to nearest
  (ties to even) and saturated to ±6.
- NVFP4: NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference" (2025) and TensorRT Model
  Optimizer's ``NVFP4QTensor``: 16-element blocks of E2M1, an FP8 E4M3 block scale amax_block / 6 / s, and an fp32
  tensor scale s = amax_tensor / (6 · 448).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from iotrace.errors import InvalidValueError

__all__ = ["DEFAULT_FORMATS", "E2M1_VALUES", "FORMAT_FAMILIES", "QuantFormat", "e2m1_round", "format_listing",
           "fp8_e4m3",
           "int8_per_channel", "mxfp4", "nvfp4", "parse_format", "parse_formats", "q4_0", "q4_1", "q8_0"]

#: The non-negative values of an FP4 E2M1 element (OCP MX v1.0, table 5): exponent bias 1, one mantissa bit.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: Largest E4M3 value (OFP8 rev 1.0, table 1: S.1111.110 = 448); float8_e4m3fn has no infinities.
E4M3_MAX = 448.0
#: Largest E2M1 value.
E2M1_MAX = 6.0
#: emax of the E2M1 element format (OCP MX v1.0, table 5), subtracted from the block's exponent for the scale.
_E2M1_EMAX = 2
#: E8M0 scales cover 2^-127 .. 2^127 (OCP MX v1.0, section 5.4.1; 0xFF is NaN).
_E8M0_MIN_EXP, _E8M0_MAX_EXP = -127, 127


# --- the quantisers: w (out, in) fp32 → fp32 values of the format ------------------------------------------------


def _blocks(w: torch.Tensor, size: int) -> torch.Tensor:
    return w.float().reshape(w.shape[0], w.shape[1] // size, size)


def _fp16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).float()


def _reciprocal(d: torch.Tensor) -> torch.Tensor:
    # ggml: id = d ? 1.0f/d : 0.0f (an all-zero block quantises to zeros)
    return torch.where(d == 0, torch.zeros_like(d), 1.0 / torch.where(d == 0, torch.ones_like(d), d))


def q8_0(w: torch.Tensor, group: int = 32) -> torch.Tensor:
    """GGUF Q8_0 (group 32): d = absmax/127 (stored fp16), q = roundf(x · (1/d)) (half away from zero)."""
    b = _blocks(w, group)
    d = b.abs().amax(-1, keepdim=True) / 127
    v = b * _reciprocal(d)
    # np_roundf in gguf-py, C's roundf: floor(|v|) + floor(2 · frac(|v|)), signed
    a = v.abs()
    q = torch.sign(v) * (torch.floor(a) + torch.floor(2 * (a - torch.floor(a))))
    return (q * _fp16(d)).reshape(w.shape)


def q4_0(w: torch.Tensor, group: int = 32) -> torch.Tensor:
    """GGUF Q4_0 (group 32): max = the signed value of largest magnitude, d = max / −8 (stored fp16),
    q = min(15, trunc(x · (1/d) + 8.5)), value = (q − 8) · d. The largest-magnitude value maps to −8 exactly."""
    b = _blocks(w, group)
    index = b.abs().argmax(-1, keepdim=True)
    d = b.gather(-1, index) / -8
    q = torch.trunc(b * _reciprocal(d) + 8.5).clamp(0, 15)
    return ((q - 8) * _fp16(d)).reshape(w.shape)


def q4_1(w: torch.Tensor, group: int = 32) -> torch.Tensor:
    """GGUF Q4_1 (group 32): d = (max − min)/15, m = min (both fp16), q = min(15, trunc((x − min) · (1/d) + 0.5)),
    value = q · d + m."""
    b = _blocks(w, group)
    lo, hi = b.amin(-1, keepdim=True), b.amax(-1, keepdim=True)
    d = (hi - lo) / 15
    q = torch.trunc((b - lo) * _reciprocal(d) + 0.5).clamp(0, 15)
    return (q * _fp16(d) + _fp16(lo)).reshape(w.shape)


def int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 per output row: s = absmax/127 (fp32), q = clamp(round(x/s), −127, 127) (ties to even)."""
    w = w.float()
    s = w.abs().amax(-1, keepdim=True) / 127
    s = torch.where(s == 0, torch.ones_like(s), s)
    return torch.round(w / s).clamp(-127, 127) * s


def fp8_e4m3(w: torch.Tensor, per_channel: bool) -> torch.Tensor:
    """FP8 E4M3 with an fp32 scale amax/448, per tensor or per output row; the cast rounds to nearest even."""
    w = w.float()
    amax = w.abs().amax(-1, keepdim=True) if per_channel else w.abs().amax()
    s = amax / E4M3_MAX
    s = torch.where(s == 0, torch.ones_like(s), s)
    # float8_e4m3fn has no infinity: out-of-range values would become NaN, so saturate first (x/s ≤ 448 but for
    # the rounding of the division itself).
    return (w / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * s


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value, ties to the value with an even mantissa bit, saturating at ±6."""
    a = x.abs().clamp(max=E2M1_MAX)
    # The midpoints between neighbours; at a tie the even neighbour (mantissa bit 0: 0, 1, 2, 4) wins, so the tie
    # rounds down at 0.25, 1.25, 2.5 and 5 and up at 0.75, 1.75 and 3.5.
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=x.device)
    index = torch.zeros_like(a, dtype=torch.int64)
    for j, (low, high) in enumerate(itertools.pairwise(E2M1_VALUES)):
        mid = (low + high) / 2
        index += (a >= mid if j % 2 == 1 else a > mid).to(torch.int64)
    return torch.sign(x) * grid[index]


def _floor_log2(a: torch.Tensor) -> torch.Tensor:
    # frexp: a = m · 2^e with m in [0.5, 1), so floor(log2 a) = e − 1 exactly (log2 in floating point can round up
    # just below a power of two).
    _, e = torch.frexp(a)
    return e.to(torch.int64) - 1


def mxfp4(w: torch.Tensor, block: int = 32) -> torch.Tensor:
    """MXFP4 (OCP MX v1.0, section 6.3): X = 2^(floor(log2(amax)) − 2) per 32-element block (E8M0), elements
    E2M1(x / X) rounded to nearest even and saturated."""
    b = _blocks(w, block)
    amax = b.abs().amax(-1, keepdim=True)
    exp = torch.where(amax > 0, _floor_log2(amax) - _E2M1_EMAX, torch.full_like(amax, _E8M0_MIN_EXP, dtype=torch.int64))
    scale = torch.ldexp(torch.ones_like(amax), exp.clamp(_E8M0_MIN_EXP, _E8M0_MAX_EXP).float())
    return (e2m1_round(b / scale) * scale).reshape(w.shape)


def nvfp4(w: torch.Tensor, block: int = 16) -> torch.Tensor:
    """NVFP4: s = amax_tensor / (6 · 448) (fp32); per 16-element block an E4M3 scale e = fp8(amax_block / 6 / s);
    elements E2M1(x / (e · s)); value = E2M1 · e · s (TensorRT Model Optimizer, NVFP4QTensor)."""
    b = _blocks(w, block)
    tensor_amax = b.abs().amax()
    s = tensor_amax / (E2M1_MAX * E4M3_MAX)
    s = torch.where(s == 0, torch.ones_like(s), s)
    e = (b.abs().amax(-1, keepdim=True) / E2M1_MAX / s).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).float()
    scale = e * s
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)  # a block whose scale underflows is all zeros
    return (e2m1_round(b / safe) * scale).reshape(w.shape)


# --- the named formats ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantFormat:
    """One weight format: its key, the rule, the block (elements per scale along a row) and the scale's bits."""

    key: str
    family: str
    #: elements sharing one scale along a row; None for per-row or per-tensor scales
    block: int | None
    element_bits: int
    #: bits of scale (and zero point) per block, per row or per tensor, by ``scale_per``
    scale_bits: int
    #: "block", "row" or "tensor"; NVFP4 has block scales and one more fp32 tensor scale
    scale_per: str
    description: str
    source: str
    _quantise: Callable[[torch.Tensor], torch.Tensor]

    def bits_per_weight(self, shape: tuple[int, int]) -> float:
        """Element bits plus the scale bits spread over the weights they cover, for an (out, in) matrix."""
        out, cols = shape
        per = {"block": self.block or 1, "row": cols, "tensor": out * cols}[self.scale_per]
        bits = self.element_bits + self.scale_bits / per
        if self.family == "nvfp4":
            bits += 32 / (out * cols)  # the fp32 tensor scale
        return bits

    def nominal_bits(self) -> str:
        """Bits per weight as a formula independent of the shape (for listings)."""
        if self.scale_per == "block":
            text = f"{self.element_bits + self.scale_bits / self.block:g}"
            return text + (" + 32/numel" if self.family == "nvfp4" else "")
        return f"{self.element_bits} + {self.scale_bits}/{'in' if self.scale_per == 'row' else 'numel'}"

    def check(self, shape: tuple[int, int], tensor: str) -> None:
        """Refuse a matrix whose input dimension the block does not divide (GGUF requires it: ne00 % QK == 0)."""
        if self.block is not None and shape[1] % self.block:
            raise InvalidValueError(
                f"{self.key}: block of {self.block} does not divide {tensor}'s input dimension {shape[1]} "
                f"({shape[1]} / {self.block} = {shape[1] / self.block:g})",
                f"pick a group size that divides {shape[1]} (of 16, 32, 64, 128, 256: "
                f"{', '.join(str(g) for g in (16, 32, 64, 128, 256) if shape[1] % g == 0) or 'none'})")

    def quantise(self, w: torch.Tensor, tensor: str = "weight") -> torch.Tensor:
        """``w`` (out, in) rounded to the format and dequantised to fp32 (``tensor`` names it in errors)."""
        if w.dim() != 2:
            raise InvalidValueError(f"{tensor} has shape {tuple(w.shape)}: a weight matrix is (out, in)",
                                    "quantise 2-D weights only")
        self.check((w.shape[0], w.shape[1]), tensor)
        return self._quantise(w)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "family": self.family, "block": self.block, "element_bits": self.element_bits,
                "scale_bits": self.scale_bits, "scale_per": self.scale_per, "bits_per_weight": self.nominal_bits(),
                "description": self.description, "source": self.source}


_GGUF = "llama.cpp ggml-quants.c quantize_row_{}_ref"

#: family → (element bits, scale bits, description, source); the group-size families take "-gN".
FORMAT_FAMILIES = {
    "int8-channel": "symmetric int8, one fp32 scale absmax/127 per output row",
    "int8-gN": "GGUF Q8_0's rule in N-element groups: fp16 scale absmax/127, round half away from zero",
    "int4-sym-gN": "GGUF Q4_0's rule in N-element groups: fp16 scale max/-8, q in 0..15 minus 8",
    "int4-asym-gN": "GGUF Q4_1's rule in N-element groups: fp16 scale (max-min)/15 and fp16 min",
    "q8_0": "GGUF Q8_0 (int8-g32)",
    "q4_0": "GGUF Q4_0 (int4-sym-g32)",
    "q4_1": "GGUF Q4_1 (int4-asym-g32)",
    "fp8-tensor": "FP8 E4M3 (float8_e4m3fn), one fp32 scale amax/448 per tensor",
    "fp8-channel": "FP8 E4M3, one fp32 scale amax/448 per output row",
    "mxfp4": "OCP MXFP4: E2M1 in 32-element blocks, E8M0 power-of-two scale",
    "nvfp4": "NVIDIA NVFP4: E2M1 in 16-element blocks, E4M3 block scale, fp32 tensor scale",
}

#: The formats `iotrace quant` runs by default: every family at the group sizes that divide SmolLM2-135M's input
#: dimensions (576 and 1536; 128 does not divide 576).
DEFAULT_FORMATS = ("int8-channel", "q8_0", "fp8-tensor", "fp8-channel", "q4_0", "int4-sym-g64", "q4_1",
                   "int4-asym-g64", "mxfp4", "nvfp4")

_ALIASES = {"q8_0": "int8-g32", "q4_0": "int4-sym-g32", "q4_1": "int4-asym-g32"}


def parse_format(key: str) -> QuantFormat:
    """A format by key: a FORMAT_FAMILIES name, with a group size for the ``-gN`` families (``int4-sym-g64``)."""
    name = key.strip().lower()
    rule = _ALIASES.get(name, name)
    what = FORMAT_FAMILIES.get(name)  # the GGUF names have their own line
    grouped = re.fullmatch(r"(int8|int4-sym|int4-asym)-g(\d+)", rule)
    if grouped:
        family, group = grouped.group(1), int(grouped.group(2))
        if group < 1:
            raise InvalidValueError(f"format {key!r}: group size {group} must be at least 1", "e.g. int4-sym-g64")
        if family == "int8":
            return QuantFormat(name, "int8-group", group, 8, 16, "block", what or FORMAT_FAMILIES["int8-gN"],
                               _GGUF.format("q8_0"), lambda w: q8_0(w, group))
        if family == "int4-sym":
            return QuantFormat(name, "int4-sym", group, 4, 16, "block", what or FORMAT_FAMILIES["int4-sym-gN"],
                               _GGUF.format("q4_0"), lambda w: q4_0(w, group))
        return QuantFormat(name, "int4-asym", group, 4, 32, "block", what or FORMAT_FAMILIES["int4-asym-gN"],
                           _GGUF.format("q4_1"), lambda w: q4_1(w, group))
    if rule == "int8-channel":
        return QuantFormat(name, rule, None, 8, 32, "row", FORMAT_FAMILIES[rule],
                           "LLM.int8() (Dettmers et al. 2022) vector-wise absmax", int8_per_channel)
    if rule in ("fp8-tensor", "fp8-channel"):
        per_channel = rule == "fp8-channel"
        return QuantFormat(name, rule, None, 8, 32, "row" if per_channel else "tensor", FORMAT_FAMILIES[rule],
                           "OCP OFP8 rev 1.0 E4M3", lambda w: fp8_e4m3(w, per_channel))
    if rule == "mxfp4":
        return QuantFormat(name, rule, 32, 4, 8, "block", FORMAT_FAMILIES[rule],
                           "OCP Microscaling Formats (MX) v1.0, section 6.3", mxfp4)
    if rule == "nvfp4":
        return QuantFormat(name, rule, 16, 4, 8, "block", FORMAT_FAMILIES[rule],
                           "NVIDIA NVFP4 (TensorRT Model Optimizer NVFP4QTensor)", nvfp4)
    raise InvalidValueError(f"unknown quantisation format {key!r}",
                            f"pick one of {', '.join(FORMAT_FAMILIES)} (N: a group size, e.g. int4-sym-g64); "
                            "iotrace quant --list-formats")


def parse_formats(keys: str | None) -> list[QuantFormat]:
    """A comma-separated list of format keys (None: DEFAULT_FORMATS), in order, without duplicates."""
    names = DEFAULT_FORMATS if keys is None else [k for k in keys.split(",") if k.strip()]
    if not names:
        raise InvalidValueError("no quantisation format given", "e.g. --format q4_0,mxfp4")
    formats: dict[str, QuantFormat] = {}
    for name in names:
        f = parse_format(name)
        formats.setdefault(f.key, f)
    return list(formats.values())


def format_listing() -> list[dict[str, Any]]:
    """Every format family with its bits per weight (as a formula for the group-size families)."""
    rows = []
    for family, what in FORMAT_FAMILIES.items():
        if family.endswith("-gN"):
            f = parse_format(family.replace("-gN", "-g32"))
            rows.append({**f.to_dict(), "key": family, "block": None,
                         "bits_per_weight": f"{f.element_bits} + {f.scale_bits}/N", "description": what})
        else:
            rows.append(parse_format(family).to_dict())
    return rows
