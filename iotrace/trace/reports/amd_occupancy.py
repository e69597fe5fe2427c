"""An AMD kernel's launch resources and theoretical occupancy, in AMD's words, for the report's occupancy row.

An AMD kernel row carries what the code object grants each wave (``arch_vgpr``, ``accum_vgpr``, ``sgpr``,
``wave_size``), the LDS per workgroup (``smem_bytes``) and the scratch per work-item
(``local_mem_bytes_per_thread``); with the device's gfx target these give the occupancy through
:func:`iotrace.occupancy_amd.amd_occupancy` (waves per SIMD and per CU, every limit, the binding ones). NVIDIA's
``registers/thread`` and ``shared memory/block`` say nothing about such a kernel, so the kernel card prints these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from iotrace.errors import IotraceError
from iotrace.occupancy_amd import AmdOccupancy, amd_occupancy
from iotrace.trace.reports.records import Unavailable

__all__ = ["LIMITER_WORDS", "AmdResources", "amd_resources", "amd_theoretical", "device_gfx"]

#: iotrace.occupancy_amd's limit names in rocprof-compute's words (its "Wavefront launch stats" and "Wavefront
#: runtime stats": VGPRs, SGPRs, LDS allocation, https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/
#: conceptual/pipeline-metrics.html) and the CU's wave slots and workgroup (barrier) slots of iotrace.cu_limits.
LIMITER_WORDS = {"waves": "wave slots", "vgprs": "VGPRs", "sgprs": "SGPRs", "lds": "LDS",
                 "workgroups": "workgroup slots"}


def whole(value: Any) -> int | None:
    """A table cell as an int; None for a missing one (None, pandas' NA, NaN) or a non-number."""
    if value is None or value is pd.NA:
        return None
    try:
        if value != value:
            return None
    except TypeError:
        return None
    return int(value)


@dataclass(frozen=True)
class AmdResources:
    """What an AMD kernel's code object and dispatch grant it: the inputs of its occupancy."""

    arch_vgpr: int | None
    accum_vgpr: int | None
    sgpr: int | None
    lds_per_workgroup: int | None
    scratch_per_work_item: int | None
    wave_size: int | None
    workgroup_size: int | None

    def text(self) -> str:
        """The kernel card's resources: "VGPRs 128 arch + 384 accum, 112 SGPRs, LDS 65,536 B per workgroup,
        scratch 0 B per work-item, wave64" ("?" for what the file does not record)."""
        def known(value: int | None) -> str:
            return "?" if value is None else f"{value:,}"
        vgprs = f"VGPRs {known(self.arch_vgpr)} arch" + (f" + {known(self.accum_vgpr)} accum"
                                                         if self.accum_vgpr else "")
        return (f"{vgprs}, {known(self.sgpr)} SGPRs, LDS {known(self.lds_per_workgroup)} B per workgroup, "
                f"scratch {known(self.scratch_per_work_item)} B per work-item, wave{known(self.wave_size)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def amd_resources(kernel: pd.Series) -> AmdResources | None:
    """The AMD resources of a kernel row; None for a row no AMD tool wrote (no VGPR count nor wave size)."""
    if "arch_vgpr" not in kernel or (whole(kernel["arch_vgpr"]) is None and whole(kernel.get("wave_size")) is None):
        return None
    block = [whole(kernel[f"block_{a}"]) for a in "xyz"]
    size = block[0] * (block[1] or 1) * (block[2] or 1) if block[0] is not None else None
    lds = whole(kernel.get("smem_bytes"))
    if lds is None:
        lds = whole(kernel.get("static_smem_bytes"))
    return AmdResources(whole(kernel["arch_vgpr"]), whole(kernel.get("accum_vgpr")), whole(kernel.get("sgpr")), lds,
                        whole(kernel.get("local_mem_bytes_per_thread")), whole(kernel.get("wave_size")), size)


def amd_theoretical(kid: int, res: AmdResources, gfx: str | None) -> tuple[AmdOccupancy | None, str,
                                                                           list[Unavailable]]:
    """The occupancy of ``res`` on ``gfx``, a note where it could not be computed, and what is missing."""
    if gfx is None or res.workgroup_size is None or res.arch_vgpr is None:
        need = "the device's gfx target" if gfx is None else "Workgroup_Size" if res.workgroup_size is None \
            else "Arch_VGPR"
        return None, "", [Unavailable("theoretical occupancy", need, "rocprofv3 --kernel-trace", kid,
                                      "or --card NAME for the gfx target" if gfx is None else "")]
    try:
        result = amd_occupancy(gfx, res.workgroup_size, res.arch_vgpr, res.accum_vgpr or 0, res.sgpr or 0,
                               res.lds_per_workgroup or 0, res.wave_size)
    except IotraceError as exc:
        return None, f"not computed: {exc}", []
    return result, "", []


def device_gfx(tables: Any, device: Any, card: Any = None) -> str | None:
    """The gfx target of ``device`` (the file's ``devices.arch``, else the matched CardBook card's ``gfx``)."""
    devices = tables.devices
    if len(devices) and "arch" in devices:
        same = devices[devices["device"] == device] if device is not None and not pd.isna(device) else devices
        arch = (same if len(same) else devices)["arch"].dropna()
        arch = arch[arch.astype(str).str.startswith("gfx")]
        if len(arch):
            return str(arch.iloc[0])
    gfx = getattr(card, "gfx", None)
    return str(gfx) if gfx else None
