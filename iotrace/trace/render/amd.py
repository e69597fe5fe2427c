"""The kernel card's AMD lines, one wording for the terminal, Markdown and HTML renderers.

An AMD kernel is described by what its code object grants (VGPRs, SGPRs, LDS per workgroup, scratch, wave size) and
its occupancy in waves per CU and SIMD (:mod:`iotrace.trace.reports.amd_occupancy`); NVIDIA's registers/thread and
shared memory/block lines stay as they are for every other kernel.
"""

from __future__ import annotations

from typing import Any

from iotrace.trace.reports.occupancy import OccupancyRow
from iotrace.trace.reports.vendor import AMD_FORMATS

__all__ = ["amd_card", "amd_occupancy_text", "is_amd_report"]


def _plural(n: float, one: str) -> str:
    return f"{n:g} {one}" + ("" if n == 1 else "s")


def is_amd_report(report: Any) -> bool:
    """A report of an AMD tool's file, or whose kernels carry AMD resources: its tables use AMD's headings."""
    return report.meta.get("format") in AMD_FORMATS or any(
        k.occupancy is not None and k.occupancy.amd is not None for k in report.kernels)


def amd_card(k: Any) -> str | None:
    """The AMD kernel card's launch part, "grid 2×128×1 workgroups, workgroup 256×1×1 work-items, VGPRs 128 arch +
    384 accum, 112 SGPRs, LDS 65,536 B per workgroup, scratch 0 B per work-item, wave64"; None for other kernels."""
    occ = k.occupancy
    if occ is None or occ.amd is None:
        return None
    grid = "×".join("?" if v is None else str(v) for v in k.grid)
    block = "×".join("?" if v is None else str(v) for v in k.block)
    return f"grid {grid} workgroups, workgroup {block} work-items, {occ.amd.text()}"


def amd_occupancy_text(occ: OccupancyRow | None) -> str | None:
    """"theoretical 12.5% = 4 of 32 waves per CU (1 wave per SIMD, 1 workgroup per CU; iotrace, gfx942), limited by
    VGPRs, LDS"; None for an NVIDIA row or one whose gfx target is unknown."""
    if occ is None or occ.amd_result is None:
        return None
    r = occ.amd_result
    return (f"theoretical {r.occupancy_pct:.4g}% = {r.waves_per_cu} of {r.max_waves_per_cu} waves per {r.unit} "
            f"({_plural(r.waves_per_simd, 'wave')} per SIMD, {_plural(r.workgroups_per_cu, 'workgroup')} per "
            f"{r.unit}; iotrace, {r.gfx}), limited by {', '.join(occ.limiters) or '—'}")
