"""Step 3: for every kernel Triton compiled during the run, iotrace's occupancy calculator against the driver's own
answer, ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` (CUDA Driver API, "Occupancy" section), called through
ctypes on libcuda so no extra package is needed. Zero mismatches is the target."""

from __future__ import annotations

import ctypes
from typing import Any

from iotrace.plugins.spec import KernelSpec
from iotrace.selfcheck.record import Step


def _driver_blocks(lib: ctypes.CDLL, function: int, threads: int, dynamic_smem: int) -> int:
    blocks = ctypes.c_int(0)
    status = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), ctypes.c_void_p(function),
                                                             ctypes.c_int(threads), ctypes.c_size_t(dynamic_smem))
    if status != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor returned CUresult {status}")
    return blocks.value


def _compiled_kernels(specs: list[KernelSpec]) -> list[tuple[str, Any]]:
    """(name, CompiledKernel) for each kernel the JIT cache holds (Triton 3.x: JITFunction.device_caches)."""
    import importlib

    import triton

    found = []
    for spec in specs:
        module = importlib.import_module(type(spec).__module__)
        for attr in dir(module):
            fn = getattr(module, attr)
            if not isinstance(fn, triton.runtime.jit.JITFunction):
                continue
            for caches in getattr(fn, "device_caches", {}).values():
                found.extend((f"{spec.name}:{attr}", kernel) for kernel in caches[0].values())
    return found


def compare(step: Step, specs: list[KernelSpec]) -> Step:
    import torch

    from iotrace.occupancy import occupancy

    lib = ctypes.CDLL("libcuda.so.1")
    props = torch.cuda.get_device_properties(0)
    cc = f"{props.major}.{props.minor}"
    mismatches = 0
    seen = set()
    for name, kernel in _compiled_kernels(specs):
        kernel._init_handles()  # loads the module: n_regs and the CUfunction exist from here
        threads = kernel.metadata.num_warps * 32
        shared = int(kernel.metadata.shared)
        key = (name, kernel.n_regs, shared, threads)
        if key in seen:
            continue
        seen.add(key)
        ours = occupancy(cc, threads, kernel.n_regs, 0, shared).active_blocks_per_sm
        driver = _driver_blocks(lib, kernel.function, threads, shared)
        mismatches += ours != driver
        step.rows.append({"kernel": name, "threads": threads, "registers": kernel.n_regs, "shared_bytes": shared,
                          "iotrace_blocks_per_sm": ours, "driver_blocks_per_sm": driver, "agree": ours == driver})
    step.figures = {"compiled_kernels": len(step.rows), "mismatches": mismatches, "cc": cc}
    if not step.rows:
        return step.fail("no compiled kernels found in Triton's cache (did step 2 run?)")
    if mismatches:
        step.fail(f"{mismatches} of {len(step.rows)} compiled kernels disagree with the driver")
    return step
