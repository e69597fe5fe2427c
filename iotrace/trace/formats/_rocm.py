"""What the AMD (ROCm) readers share: kernel names without the ``.kd`` suffix, work-item grids as block counts, copy
and HIP op names to copy directions, and agent descriptions to device rows.

Kernel names: rocprof reports a dispatch by its kernel descriptor symbol, the kernel's name plus ``.kd`` (AMDGPU
code objects name each kernel's descriptor ``<symbol>.kd``: LLVM AMDGPUUsage, "Kernel Descriptor"); demangled, a C++
kernel's ``_Z...v.kd`` reads ``void f<...>(...) [clone .kd]`` and a C one ``__amd_rocclr_fillBufferAligned.kd``.
rocpd's ``display_name`` already leaves it out. :func:`kernel_name` strips it in every AMD reader, so one kernel has
one name whichever AMD file it comes from, and the same name as in a Kineto trace of the run.

Grids: an HSA dispatch packet states its grid in work-items, not workgroups (HSA Platform System Architecture
Specification 1.2, 2.9.6 "Kernel Dispatch Packet": grid_size_x "X dimension of grid, in work-items"), and rocprof v1
writes only the totals ``grd`` (work-items) and ``wgr`` (work-items per workgroup). The kernels table counts blocks
as CUDA does (``grid_x`` in blocks, ``block_x`` in threads), so :func:`blocks` divides, rounding up: the last
workgroup of a dimension may be partial (HSA PSA 2.9.6).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["COPY_OPS", "blocks", "copy_op", "kernel_name", "leading_int"]

# " [clone .kd]" as a demangler prints the ".kd" suffix of a C++ symbol, or ".kd" on a C name (see the docstring).
_KD_SUFFIX = re.compile(r"(\s*\[clone \.kd\]|\.kd)$")

#: HIP op names of copies and fills as ROCclr names its commands and rocprof v1 / roctracer report them (ROCm/clr
#: rocclr/platform/command.hpp command types; matched the same way by HPCToolkit's roctracer translator:
#: "CopyHostToDevice", "CopyDeviceToHost", "CopyDeviceToDevice", "FillBuffer") -> (transfers.kind, copy_kind).
COPY_OPS: dict[str, tuple[str, str | None]] = {
    "CopyHostToDevice": ("memcpy HtoD", "HtoD"), "CopyDeviceToHost": ("memcpy DtoH", "DtoH"),
    "CopyDeviceToDevice": ("memcpy DtoD", "DtoD"), "CopyHostToHost": ("memcpy HtoH", "HtoH"),
    "FillBuffer": ("memset", None),
    # rocprofiler-sdk's memory copy operations as rocpd names them (rocprofiler-sdk include/rocprofiler-sdk/fwd.h,
    # rocprofiler_memory_copy_operation_t: ROCPROFILER_MEMORY_COPY_HOST_TO_DEVICE, ...).
    "MEMORY_COPY_HOST_TO_DEVICE": ("memcpy HtoD", "HtoD"), "MEMORY_COPY_DEVICE_TO_HOST": ("memcpy DtoH", "DtoH"),
    "MEMORY_COPY_DEVICE_TO_DEVICE": ("memcpy DtoD", "DtoD"), "MEMORY_COPY_HOST_TO_HOST": ("memcpy HtoH", "HtoH"),
}


def kernel_name(raw: str) -> str:
    """``raw`` without the kernel descriptor's ``.kd`` / `` [clone .kd]`` suffix (see the module docstring)."""
    return _KD_SUFFIX.sub("", raw.strip())


def blocks(work_items: int | None, workgroup: int | None) -> int | None:
    """Workgroups along one dimension from its size in work-items (HSA's grid), rounding a partial one up."""
    if work_items is None or workgroup is None or workgroup <= 0:
        return None
    return -(-work_items // workgroup)


def copy_op(name: str) -> tuple[str, str | None] | None:
    """(transfers.kind, copy_kind) of a copy or fill op name; None when the name is not one."""
    return COPY_OPS.get(name.strip())


def leading_int(text: Any) -> int | None:
    """The number at the start of a rocminfo value: ``"64(0x40)"`` -> 64, ``"4096(0x1000)KB"`` -> 4096."""
    match = re.match(r"\s*(\d+)", str(text)) if text is not None else None
    return int(match.group(1)) if match else None
