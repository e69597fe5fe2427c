"""Per-CU hardware limits of AMD GPUs by gfx target, read from ``data/cu_limits.toml``.

The AMD counterpart of :mod:`iotrace.sm_limits`: what one compute unit (on RDNA, one workgroup processor) can hold,
as AMD's compiler (LLVM's AMDGPU backend) and ROCm's documentation state it. Each value's source is cited in the data
file itself.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from iotrace.errors import DataFileError, InvalidValueError

__all__ = ["CULimits", "cu_limits", "known_gfx", "parse_gfx"]

_DATA_FILE = "cu_limits.toml"


@dataclass(frozen=True)
class CULimits:
    """What one CU (RDNA: one WGP in its default WGP mode) of a gfx target can hold."""

    gfx: str
    arch: str
    products: str
    unit: str
    wave_sizes: tuple[int, ...]
    simds_per_cu: int
    max_waves_per_simd: int
    max_workgroup_size: int
    vgpr_file: int
    accum_file: int
    unified_agprs: bool
    vgpr_granule: int
    max_arch_vgprs: int
    max_accum_vgprs: int
    agpr_offset_align: int
    sgpr_limits: bool
    sgpr_steps: tuple[tuple[int, int], ...]
    sgpr_floor: int
    sgpr_file: int
    sgpr_granule: int
    max_sgprs: int
    lds_per_cu: int
    lds_per_workgroup: int
    lds_granule: int
    workgroup_slots: int

    @property
    def default_wave_size(self) -> int:
        """The wave size a kernel gets unless built otherwise: 32 on RDNA, 64 on CDNA."""
        return min(self.wave_sizes)

    @property
    def max_waves_per_cu(self) -> int:
        return self.max_waves_per_simd * self.simds_per_cu

    def vgpr_file_for(self, wave_size: int) -> int:
        """VGPRs per SIMD lane that one wave of ``wave_size`` can draw from.

        A wave64 on RDNA occupies two wave32 lanes' worth of each register, so it sees half the file (LLVM
        ``getTotalNumVGPRs``: 1536 for wave32, 768 for wave64 with ``Feature1_5xVGPRs``).
        """
        return self.vgpr_file // 2 if wave_size > self.default_wave_size else self.vgpr_file

    def vgpr_granule_for(self, wave_size: int) -> int:
        """The VGPR allocation granule for ``wave_size`` (LLVM ``getVGPRAllocGranule``: RDNA3 24 wave32, 12 wave64)."""
        return self.vgpr_granule // 2 if wave_size > self.default_wave_size else self.vgpr_granule

    def sgpr_waves(self, sgprs: int) -> int:
        """Waves per SIMD the SGPRs of one wave allow, by LLVM's ``getOccupancyWithNumSGPRs``."""
        if not self.sgpr_limits:
            return self.max_waves_per_simd
        if sgprs <= self.sgpr_steps[0][0]:
            # Below the table the file's own arithmetic says how far from binding the SGPRs are.
            granted = max(-(-sgprs // self.sgpr_granule) * self.sgpr_granule, self.sgpr_granule)
            return max(self.sgpr_steps[0][1], self.sgpr_file // granted)
        for most, waves in self.sgpr_steps:
            if sgprs <= most:
                return waves
        return self.sgpr_floor


_GFX_PATTERN = re.compile(r"^(?:amdgcn-amd-amdhsa--)?(gfx[0-9a-f]+)(?::.*)?$")


def parse_gfx(value: str) -> str:
    """A gfx target written as ``gfx942``, ``GFX942``, ``942`` or with target features (``gfx90a:sramecc+:xnack-``)."""
    text = str(value).strip().lower()
    if text.isdigit() or re.fullmatch(r"[0-9]+[a-f]", text):
        text = f"gfx{text}"
    match = _GFX_PATTERN.match(text)
    if match is None:
        raise InvalidValueError(f"gfx target {value!r} is not of the form gfx942",
                                f"use one of {', '.join(known_gfx())}")
    return match.group(1)


@cache
def _table() -> dict[str, CULimits]:
    try:
        text = resources.files("iotrace.data").joinpath(_DATA_FILE).read_text(encoding="utf-8")
        raw = tomllib.loads(text)
        defaults = raw["defaults"]
        table = {}
        for row in raw["gfx"]:
            fields = {**defaults, **row}
            fields["wave_sizes"] = tuple(fields["wave_sizes"])
            fields["sgpr_steps"] = tuple((int(a), int(b)) for a, b in fields["sgpr_steps"])
            table[fields["gfx"]] = CULimits(**fields)
    except (OSError, KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(
            f"iotrace/data/{_DATA_FILE} cannot be read ({exc})", "reinstall iotrace or restore the file from git"
        ) from exc
    return table


def known_gfx() -> list[str]:
    """The gfx targets iotrace has CU limits for."""
    return sorted(_table(), key=lambda g: (len(g), g))


def cu_limits(gfx: str) -> CULimits:
    """The CU limits of gfx target ``gfx``; an unknown one raises with the known list."""
    key = parse_gfx(gfx)
    try:
        return _table()[key]
    except KeyError:
        raise InvalidValueError(f"no CU limits for gfx target {key}",
                                f"use one of {', '.join(known_gfx())}") from None
