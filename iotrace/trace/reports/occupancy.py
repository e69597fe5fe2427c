"""Occupancy per kernel: iotrace's calculator beside the value the file stores, the achieved value, the limiter.

For ncu reports the inputs are the launch metrics (``launch__block_size``, ``launch__registers_per_thread``, shared
memory per block, the driver's reserve and the configured carveout ``launch__shared_mem_config_size``), so the
answer must equal ncu's ``sm__maximum_warps_per_active_cycle_pct`` (tests/test_occupancy_ncu.py proves the
calculator on the same files). For nsys and Kineto the inputs are the launch resources in the kernel table alone,
with the driver's default (largest) carveout assumed: a modelled value, labelled so. An AMD kernel row (VGPRs, SGPRs,
LDS per workgroup, wave size; :mod:`iotrace.trace.reports.amd_occupancy`) goes through iotrace's AMD calculator on the
device's gfx target instead: waves per SIMD and CU, limited by VGPRs, SGPRs, LDS, wave or workgroup slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pandas as pd

from iotrace.errors import IotraceError
from iotrace.occupancy import OccupancyResult, occupancy_of_recorded_launch
from iotrace.occupancy_amd import AmdOccupancy
from iotrace.trace.reports.amd_occupancy import LIMITER_WORDS, AmdResources, amd_resources, amd_theoretical
from iotrace.trace.reports.amd_occupancy import whole as _int
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.records import Unavailable

__all__ = ["ACHIEVED_GAP_PCT", "ESTIMATED", "OccupancyRow", "occupancy_row"]

#: Achieved occupancy this many points below theoretical is flagged. Nsight Compute's Occupancy rule reports gaps of
#: this size as an optimisation opportunity ("The difference between calculated theoretical (100.0%) and measured
#: achieved occupancy (86.7%) can be the result of warp scheduling overheads or workload imbalances", ncu
#: sections/Occupancy rule output); 10 points is iotrace's cut-off for "worth a sentence".
ACHIEVED_GAP_PCT = 10.0

#: The label of an occupancy CUPTI estimated from the launch (Kineto), not one the hardware counted.
ESTIMATED = "estimated by CUPTI"

_THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
_ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"

@dataclass(frozen=True)
class OccupancyRow:
    kernel_id: int
    kernel: str
    cc: str | None
    threads_per_block: int | None
    registers_per_thread: int | None
    smem_per_block: int | None
    theoretical_pct: float | None
    theoretical_pct_file: float | None
    theoretical_file_source: str
    achieved_pct: float | None
    achieved_source: str
    limiters: tuple[str, ...]
    basis: str
    assumptions: str = ""
    result: OccupancyResult | None = field(default=None, compare=False, repr=False)
    #: An AMD kernel's resources and, where the gfx target is known, its occupancy (None on NVIDIA rows).
    amd: AmdResources | None = field(default=None, compare=False)
    amd_result: AmdOccupancy | None = field(default=None, compare=False, repr=False)

    @property
    def active_blocks_per_sm(self) -> int | None:
        """Blocks (AMD: workgroups) one SM (CU) holds at once by the calculator; None where it could not compute."""
        if self.result is not None:
            return self.result.active_blocks_per_sm
        return None if self.amd_result is None else self.amd_result.workgroups_per_cu

    @property
    def agrees(self) -> bool | None:
        if self.theoretical_pct is None or self.theoretical_pct_file is None:
            return None
        return math.isclose(self.theoretical_pct, self.theoretical_pct_file, abs_tol=0.01)

    def to_dict(self) -> dict[str, Any]:
        return {"theoretical_pct": self.theoretical_pct, "theoretical_pct_ncu": self.theoretical_pct_file,
                "theoretical_pct_file_source": self.theoretical_file_source, "achieved_pct": self.achieved_pct,
                "achieved_source": self.achieved_source, "limiters": list(self.limiters), "cc": self.cc,
                "basis": self.basis, "agrees_with_file": self.agrees, "assumptions": self.assumptions,
                "active_blocks_per_sm": None if self.result is None else self.result.active_blocks_per_sm,
                "limits": None if self.result is None else dict(self.result.limits)} | self._amd_dict()

    def _amd_dict(self) -> dict[str, Any]:
        """The AMD keys: resources, gfx target, waves per SIMD and CU, workgroups per CU, limits and worked steps."""
        if self.amd is None:
            return {}
        amd = self.amd_result
        return {"resources": self.amd.to_dict(), "gfx": None if amd is None else amd.gfx,
                "active_blocks_per_sm": None if amd is None else amd.workgroups_per_cu,
                "workgroups_per_cu": None if amd is None else amd.workgroups_per_cu,
                "waves_per_cu": None if amd is None else amd.waves_per_cu,
                "waves_per_simd": None if amd is None else amd.waves_per_simd,
                "max_waves_per_cu": None if amd is None else amd.max_waves_per_cu,
                "limits": None if amd is None else {LIMITER_WORDS[k]: v for k, v in amd.limits.items()},
                "steps": [] if amd is None else list(amd.steps)}


@lru_cache(maxsize=4096)
def _calculate(cc: str, threads: int, regs: int, static: int, dynamic: int, reserved: int | None,
               config: int | None) -> OccupancyResult:
    return occupancy_of_recorded_launch(cc, threads, regs, static, dynamic, smem_reserved=reserved,
                                        smem_config=config)




#: rocprof-compute's achieved occupancy ("Wavefront Occupancy" = AVG(SQ_ACCUM_PREV_HIRES / $GRBM_GUI_ACTIVE_PER_XCD)
#: with coll_level SQ_LEVEL_WAVES, rocprofiler-compute src/rocprof_compute_soc/analysis_configs/gfx942/
#: 0200_system-speed-of-light.yaml), not read yet: it needs sysinfo.csv's num_xcd, which the tables do not keep.
def _amd_achieved(kid: int) -> Unavailable:
    return Unavailable("achieved occupancy", "SQ_ACCUM_PREV_HIRES (SQ_LEVEL_WAVES) / GRBM_GUI_ACTIVE per XCD",
                       "rocprof-compute profile", kid, "iotrace does not read it yet: it needs the XCD count "
                       "(rocprof-compute's sysinfo num_xcd), which the trace tables do not keep")


def _amd_row(kernel: pd.Series, view: MetricView, res: AmdResources,
             gfx: str | None) -> tuple[OccupancyRow, list[Unavailable]]:
    """An AMD kernel's theoretical occupancy on ``gfx``; achieved occupancy is named as not read (:func:`_amd_achieved`)
    where the file has rocprof-compute's counters for it."""
    kid = int(kernel["id"])
    result, assumptions, missing = amd_theoretical(kid, res, gfx)
    if view.get(kid, "GRBM_GUI_ACTIVE") is not None:
        missing.append(_amd_achieved(kid))
    limiters = () if result is None else tuple(LIMITER_WORDS[n] for n in result.limiters)
    row = OccupancyRow(kid, str(kernel["name"]), None, res.workgroup_size, None, res.lds_per_workgroup,
                       None if result is None else result.occupancy_pct, None, "", None, "", limiters,
                       "launch resources from the trace (modelled)", assumptions, None, res, result)
    return row, missing


def occupancy_row(kernel: pd.Series, view: MetricView, cc: str | None,
                  gfx: str | None = None) -> tuple[OccupancyRow, list[Unavailable]]:
    """One kernel's occupancy: computed from its launch resources, beside the file's stored values. ``gfx``: the
    device's gfx target, for an AMD kernel row (:func:`~iotrace.trace.reports.amd_occupancy.device_gfx`)."""
    res = amd_resources(kernel)
    if res is not None:
        return _amd_row(kernel, view, res, gfx)
    kid = int(kernel["id"])
    name = str(kernel["name"])
    metrics = view.of(kid)
    missing: list[Unavailable] = []
    block = [_int(kernel[f"block_{a}"]) for a in "xyz"]
    threads = (block[0] * (block[1] or 1) * (block[2] or 1)) if block[0] is not None else \
        _int(metrics.get("launch__block_size"))
    regs = _int(kernel["registers_per_thread"])
    if regs is None:
        regs = _int(metrics.get("launch__registers_per_thread"))
    static = _int(kernel["static_smem_bytes"])
    dynamic = _int(kernel["dynamic_smem_bytes"])
    if static is None and dynamic is None:
        static = _int(kernel["smem_bytes"])  # Kineto stores static + dynamic as one number
    if static is None:
        static = _int(metrics.get("launch__shared_mem_per_block_static"))
    if dynamic is None:
        dynamic = _int(metrics.get("launch__shared_mem_per_block_dynamic"))
    reserved = _int(metrics.get("launch__shared_mem_per_block_driver"))
    config = _int(metrics.get("launch__shared_mem_config_size"))
    from_ncu = view.get(kid, _THEORETICAL)
    # Only ncu stores the calculator's answer. Kineto's 2021 "theoretical occupancy %" is CUPTI's estimate that
    # also counts the grid's blocks per SM (0 for a one-block grid), so it is kept as an estimate, not compared.
    file_value, file_source = (from_ncu, _THEORETICAL) if from_ncu is not None else (None, "")
    achieved = view.get(kid, _ACHIEVED)
    if achieved is not None:
        achieved_source = f"measured ({_ACHIEVED})"
    elif pd.notna(kernel["achieved_occupancy_pct"]):
        achieved, achieved_source = float(kernel["achieved_occupancy_pct"]), "measured"
    elif pd.notna(kernel["est_achieved_occupancy_pct"]):
        achieved = float(kernel["est_achieved_occupancy_pct"])
        achieved_source = ESTIMATED + " (Kineto 'est. achieved occupancy %')"
    elif not metrics and pd.notna(kernel["theoretical_occupancy_pct"]):  # Kineto only; ncu fills it from its metric
        achieved = float(kernel["theoretical_occupancy_pct"])
        achieved_source = ESTIMATED + " (Kineto 2021 'theoretical occupancy %', grid size included)"
    else:
        achieved_source = ""
        if view:
            missing.append(Unavailable("achieved occupancy", _ACHIEVED, "ncu --section Occupancy", kid))
    result = None
    assumptions = ""
    if cc is None or threads is None or regs is None:
        need = "launch__block_size" if threads is None else "launch__registers_per_thread" if regs is None \
            else "the device's compute capability"
        missing.append(Unavailable("theoretical occupancy", need, "ncu --section LaunchStats", kid,
                                   "or --card NAME for the compute capability" if cc is None else ""))
    else:
        try:
            result = _calculate(cc, threads, regs, static or 0, dynamic or 0, reserved, config)
        except IotraceError as exc:
            assumptions = f"not computed: {exc}"
        if config is None and result is not None:
            assumptions = "driver's default (largest) shared-memory carveout assumed"
    basis = "measured launch resources" if config is not None else "launch resources from the trace (modelled)"
    row = OccupancyRow(kid, name, cc, threads, regs, None if static is None and dynamic is None else
                       (static or 0) + (dynamic or 0), None if result is None else result.occupancy_pct,
                       file_value, file_source, achieved, achieved_source,
                       () if result is None else result.limiters, basis, assumptions, result)
    return row, missing
