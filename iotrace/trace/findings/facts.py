"""What a kernel rule reads: one kernel row's figures from the reports, the device it ran on, and its origin."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from iotrace.trace.reports.ncu_rules import StoredRule
from iotrace.trace.reports.occupancy import OccupancyRow
from iotrace.trace.reports.origin import Origin
from iotrace.trace.reports.roofline import RooflinePoint
from iotrace.trace.reports.stall_reasons import reason
from iotrace.trace.reports.vendor import NVIDIA, Vocabulary

__all__ = ["KernelFacts"]


@dataclass(frozen=True)
class KernelFacts:
    """One kernel row (a launch, a group of identical launches, or a name's launches in one configuration).

    ``total_ns`` is the row's time (every launch it stands for); ``file_ns`` the time of every row of the selection,
    so a finding's gain in time and the row's share of the file are both stated."""

    kernel_id: int
    name: str
    launches: int
    launch_ids: tuple[int, ...]
    profiled: bool
    grid: tuple[int | None, int | None, int | None]
    block: tuple[int | None, int | None, int | None]
    total_ns: float | None
    file_ns: float | None
    origin: Origin
    device_cc: str | None = None
    #: The device's SM count, and where it came from ("the file's device", "card rtx3090").
    sms: int | None = None
    sms_source: str = ""
    occupancy: OccupancyRow | None = None
    roofline: RooflinePoint | None = None
    #: The primary stall family's ranking (:func:`iotrace.trace.reports.stalls.primary`).
    stalls: pd.DataFrame = field(default_factory=pd.DataFrame)
    issue_active: float | None = None
    #: ``launch__waves_per_multiprocessor`` where the file stores it.
    waves_file: float | None = None
    plugin_params: frozenset[str] = frozenset()
    #: Nsight Compute's own rule results for this row, as the file stores them.
    stored: tuple[StoredRule, ...] = ()
    #: The trace vendor's words and tools (:mod:`iotrace.trace.reports.vendor`): an AMD kernel's findings say CUs,
    #: workgroups and rocprof-compute.
    vocab: Vocabulary = NVIDIA

    @property
    def waits(self) -> pd.DataFrame:
        """The stall ranking without the reasons that are not stalls ("selected": the issuing cycle), highest first."""
        if self.stalls.empty:
            return self.stalls
        return self.stalls[[not reason(r).not_a_stall for r in self.stalls["reason"]]]

    @property
    def blocks(self) -> int | None:
        if any(g is None for g in self.grid):
            return None
        return math.prod(int(g) for g in self.grid)  # type: ignore[arg-type]

    @property
    def threads_per_block(self) -> int | None:
        if any(b is None for b in self.block):
            return None
        return math.prod(int(b) for b in self.block)  # type: ignore[arg-type]

    @property
    def share_pct(self) -> float | None:
        if self.total_ns is None or not self.file_ns:
            return None
        return 100.0 * self.total_ns / self.file_ns

    @property
    def blocks_per_sm(self) -> int | None:
        """Blocks one SM holds at once, from iotrace's occupancy calculator (None where it could not compute)."""
        occ = self.occupancy
        result = None if occ is None else occ.result or getattr(occ, "amd_result", None)
        # NVIDIA's calculator says active_blocks_per_sm; AMD's (iotrace.occupancy_amd) workgroups_per_cu.
        per = getattr(result, "active_blocks_per_sm", getattr(result, "workgroups_per_cu", None))
        return None if per is None or per <= 0 else int(per)
