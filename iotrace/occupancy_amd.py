"""Theoretical occupancy (identity 6) on AMD GPUs: waves per SIMD and per CU, with every limit and the ones that bind.

AMD counts occupancy in wavefronts per SIMD. Two kinds of limit meet:

* per SIMD, for each wave: the wave slots (8 on CDNA2-4, 10 on CDNA1, 16 on RDNA3/4), the VGPRs (a per-lane file
  the wave's registers are carved from, in granules) and, on CDNA only, the SGPRs;
* per CU, for each workgroup: the LDS (granted to a workgroup as a whole, in granules) and the workgroup slots
  (one hardware barrier per multi-wave workgroup: 16 per CU on CDNA, 32 per WGP on RDNA).

A workgroup is placed whole on one CU and its waves are spread over the CU's SIMDs (a 256-work-item workgroup at
wave64 is 4 waves, one per SIMD of a 4-SIMD CU). So the per-SIMD limits become workgroups per CU as
``waves per SIMD × SIMDs // waves per workgroup``, the per-CU ones are workgroups per CU already, and the answer is
the smallest, times the waves of a workgroup. This is how LLVM's AMDGPU backend reasons about it
(``AMDGPUSubtarget::getOccupancyWithWorkGroupSizes``: "assuming that all wavefronts of the same workgroup are
distributed evenly across all EUs"); the limits themselves are in :mod:`iotrace.cu_limits`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from iotrace.cu_limits import CULimits, cu_limits
from iotrace.errors import InvalidValueError
from iotrace.occupancy import _as_int, _round_up  # NVIDIA's validation and rounding, shared

__all__ = ["AMD_LIMIT_NAMES", "AmdOccupancy", "amd_occupancy"]

#: The resources that can bound workgroups per CU, in the order the steps explain them.
AMD_LIMIT_NAMES = ("waves", "vgprs", "sgprs", "lds", "workgroups")


@dataclass(frozen=True)
class AmdOccupancy:
    """The occupancy of one dispatch configuration on one gfx target.

    ``limits`` holds, per resource, the workgroups per CU that resource alone allows; a resource the dispatch does
    not use (no LDS, SGPRs on RDNA) allows as many as the wave slots and is named in ``unlimited``. ``limiters`` are
    the used resources whose limit equals the result.
    """

    gfx: str
    arch: str
    unit: str
    workgroup_size: int
    wave_size: int
    arch_vgpr: int
    accum_vgpr: int
    sgpr: int
    lds_per_workgroup: int
    waves_per_workgroup: int
    simds_per_cu: int
    vgprs_per_lane: int
    lds_allocated: int
    max_waves_per_simd: int
    max_waves_per_cu: int
    workgroups_per_cu: int
    waves_per_cu: int
    waves_per_simd: float
    occupancy_pct: float
    limits: dict[str, int]
    limiters: tuple[str, ...]
    unlimited: tuple[str, ...]
    reason: str = ""
    steps: tuple[str, ...] = ()

    @property
    def launchable(self) -> bool:
        return self.workgroups_per_cu > 0

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["limiters"] = list(self.limiters)
        out["unlimited"] = list(self.unlimited)
        out["steps"] = list(self.steps)
        out["launchable"] = self.launchable
        return out


def _vgprs_per_lane(limits: CULimits, arch: int, accum: int) -> tuple[int, str]:
    """VGPRs one wave needs per lane before granule rounding, and how that sum was made."""
    if limits.unified_agprs and accum:
        # gfx90a+: the AGPRs follow the arch VGPRs in one file, from a 4-aligned ACCUM_OFFSET (AMDGPUUsage).
        start = _round_up(arch, limits.agpr_offset_align)
        pad = f" (aligned to {start})" if start != arch else ""
        return start + accum, f"arch {arch}{pad} + accum {accum} → {start + accum}"
    if limits.accum_file:
        # gfx908: separate 256-entry arch and AGPR files; the larger of the two decides (LLVM getTotalNumVGPRs).
        return max(arch, accum), f"max(arch {arch}, accum {accum}) → {max(arch, accum)}"
    return arch, f"arch {arch} + accum {accum} → {arch}"


def amd_occupancy(
    gfx: str | CULimits,
    workgroup_size: int,
    arch_vgpr: int,
    accum_vgpr: int = 0,
    sgpr: int = 0,
    lds_per_workgroup: int = 0,
    wave_size: int | None = None,
) -> AmdOccupancy:
    """Theoretical occupancy of a dispatch on an AMD GPU, with every per-resource limit and the ones that bind.

    :param gfx: the gfx target (``"gfx942"``) or a :class:`CULimits`.
    :param workgroup_size: work-items per workgroup, 1 to 1024 (rocprof ``Workgroup_Size``).
    :param arch_vgpr: architected VGPRs per work-item (rocprof ``Arch_VGPR``), 0 to 256.
    :param accum_vgpr: accumulation VGPRs (AGPRs) per work-item (rocprof ``Accum_VGPR``); CDNA only. On gfx90a+ the
        profilers report the unified file past the arch part (rocprofv3: 128 arch + 384 accum), so only the sum
        is bounded (512); on gfx908 the AGPR file has 256 entries.
    :param sgpr: SGPRs per wave as the kernel descriptor grants them (rocprof ``SGPR``).
    :param lds_per_workgroup: LDS bytes per workgroup (rocprof ``LDS_Per_Workgroup``).
    :param wave_size: 32 or 64 where the target has both; default the target's (64 on CDNA, 32 on RDNA).
    :raises InvalidValueError: a value the hardware cannot take (e.g. 600 VGPRs, 1025 work-items, 96 KiB of LDS).
    """
    limits = gfx if isinstance(gfx, CULimits) else cu_limits(gfx)
    hint = "see `iotrace occupancy --help`"
    wave = limits.default_wave_size if wave_size is None else _as_int("wave_size", wave_size, 1, 64, hint)
    if wave not in limits.wave_sizes:
        raise InvalidValueError(f"wave_size={wave} is not supported on {limits.gfx}",
                                f"use {' or '.join(map(str, limits.wave_sizes))}")
    threads = _as_int("workgroup_size", workgroup_size, 1, limits.max_workgroup_size, hint)
    arch = _as_int("arch_vgpr", arch_vgpr, 0, limits.max_arch_vgprs, hint)
    accum = _as_int("accum_vgpr", accum_vgpr, 0, limits.max_accum_vgprs,
                    "RDNA has no accumulation VGPRs" if not limits.max_accum_vgprs else hint)
    sgprs = _as_int("sgpr", sgpr, 0, limits.max_sgprs, hint)
    lds = _as_int("lds_per_workgroup", lds_per_workgroup, 0, limits.lds_per_workgroup,
                  f"a workgroup can address at most {limits.lds_per_workgroup} bytes of LDS on {limits.gfx}")

    simds = limits.simds_per_cu
    waves_per_wg = -(-threads // wave)
    file = limits.vgpr_file_for(wave)
    granule = limits.vgpr_granule_for(wave)
    needed, how = _vgprs_per_lane(limits, arch, accum)
    if needed > file:
        raise InvalidValueError(f"{needed} VGPRs per lane ({how}) exceed the {file}-entry file of {limits.gfx}",
                                f"use at most {file}")
    # At least one granule is allocated even to a kernel that reports none (LLVM getGranulatedNumRegisterBlocks).
    rounded = max(_round_up(needed, granule), granule)
    vgpr_waves = file // rounded
    sgpr_waves = limits.sgpr_waves(sgprs)
    raw: dict[str, int | None] = {}
    # Per-SIMD limits, turned into workgroups per CU: the workgroup's waves spread over every SIMD of the CU.
    raw["waves"] = limits.max_waves_per_simd * simds // waves_per_wg
    # Each resource's own allowance, uncapped (as cuda_occupancy.h reports registers): a limiter is one that binds.
    raw["vgprs"] = vgpr_waves * simds // waves_per_wg
    raw["sgprs"] = sgpr_waves * simds // waves_per_wg if limits.sgpr_limits else None
    # Per-CU limits: LDS is granted per workgroup in granules; each multi-wave workgroup holds a barrier.
    lds_alloc = _round_up(lds, limits.lds_granule)
    raw["lds"] = limits.lds_per_cu // lds_alloc if lds_alloc else None
    raw["workgroups"] = limits.workgroup_slots if waves_per_wg > 1 else None
    workgroups = min(v for v in raw.values() if v is not None)
    waves_cu = workgroups * waves_per_wg
    slots = limits.max_waves_per_cu
    unit = limits.unit
    reason = "" if workgroups else (
        f"{waves_per_wg} waves per workgroup need {-(-waves_per_wg // simds)} waves on a SIMD; the "
        + ("VGPRs" if raw["vgprs"] == 0 else "SGPRs") + f" allow {min(vgpr_waves, sgpr_waves)}")

    steps = [
        f"waves: ceil({threads} / {wave}) = {waves_per_wg} waves per workgroup over {simds} SIMDs; "
        f"{limits.max_waves_per_simd} waves per SIMD × {simds} // {waves_per_wg} = {raw['waves']} workgroups",
        f"VGPRs: {how} rounded to granule {granule} = {rounded} per lane; {file} / {rounded} = {vgpr_waves}"
        + (f" → capped at {limits.max_waves_per_simd} by the slots" if vgpr_waves > limits.max_waves_per_simd else "")
        + f"; {vgpr_waves} waves per SIMD × {simds} // {waves_per_wg} = {raw['vgprs']} workgroups",
        "SGPRs: " + (f"{sgprs} per wave → {sgpr_waves} waves per SIMD ({limits.sgpr_file} // round{limits.sgpr_granule}"
                     "; LLVM's gfx9 table above 80: ≤88: 9, ≤100: 8, else 7) × "
                     f"{simds} // {waves_per_wg} = {raw['sgprs']} workgroups" if limits.sgpr_limits else
                     f"{sgprs} per wave; every wave gets its own SGPRs on {limits.arch}: no limit"),
        f"LDS: ceil({lds} / {limits.lds_granule}) × {limits.lds_granule} = {lds_alloc} B per workgroup; "
        + (f"{limits.lds_per_cu} B per {unit} // {lds_alloc} = {raw['lds']} workgroups" if lds_alloc else
           "none used: no limit"),
        "workgroups: " + (f"{limits.workgroup_slots} barrier slots per {unit}" if raw["workgroups"] is not None else
                          "a single-wave workgroup takes no barrier slot: no limit"),
        f"active = min(...) = {workgroups} workgroups × {waves_per_wg} waves = {waves_cu} of {slots} waves per {unit} "
        f"= {waves_cu / simds:.4g} waves per SIMD = {100.0 * waves_cu / slots:.4g} %",
    ]
    return AmdOccupancy(
        gfx=limits.gfx,
        arch=limits.arch,
        unit=unit,
        workgroup_size=threads,
        wave_size=wave,
        arch_vgpr=arch,
        accum_vgpr=accum,
        sgpr=sgprs,
        lds_per_workgroup=lds,
        waves_per_workgroup=waves_per_wg,
        simds_per_cu=simds,
        vgprs_per_lane=rounded,
        lds_allocated=lds_alloc,
        max_waves_per_simd=limits.max_waves_per_simd,
        max_waves_per_cu=slots,
        workgroups_per_cu=workgroups,
        waves_per_cu=waves_cu,
        waves_per_simd=waves_cu / simds,
        occupancy_pct=100.0 * waves_cu / slots,
        limits={name: raw["waves"] if raw[name] is None else raw[name] for name in AMD_LIMIT_NAMES},
        limiters=tuple(name for name in AMD_LIMIT_NAMES if raw[name] is not None and raw[name] == workgroups),
        unlimited=tuple(name for name in AMD_LIMIT_NAMES if raw[name] is None),
        reason=reason,
        steps=tuple(steps),
    )
