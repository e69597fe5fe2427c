"""The next step, fitted to where a kernel comes from: a library kernel (cuBLAS, CUTLASS, cuDNN, NCCL, ATen...) is
changed through its call, never through source-level or Triton knobs; a Triton or user CUDA kernel through its
knobs (:mod:`iotrace.trace.reports.origin` classifies the name)."""

from __future__ import annotations

from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.reports.origin import call_advice

__all__ = ["KNOBS", "LIMITER_KNOBS", "next_step"]

#: Per occupancy limiter (iotrace.occupancy), what the kernel's author changes to lift it.
LIMITER_KNOBS: dict[str, tuple[str, str]] = {
    "registers": ("fewer registers per program: lower num_warps or smaller BLOCK sizes",
                  "fewer registers per thread (__launch_bounds__ or -maxrregcount)"),
    "shared_mem": ("less shared memory per program: fewer num_stages or smaller BLOCK sizes",
                   "less shared memory per block (smaller tiles) or a larger carveout "
                   "(cudaFuncAttributePreferredSharedMemoryCarveout)"),
    "warps": ("smaller programs (lower num_warps): the block's warps fill the SM's warp slots in too few blocks",
              "smaller blocks: the block's warps fill the SM's warp slots in too few blocks"),
    "blocks": ("larger programs (higher num_warps): the SM ran out of block slots before warp slots",
               "larger blocks: the SM ran out of block slots before warp slots"),
    "barriers": ("fewer named barriers per program", "fewer named barriers per block"),
}

#: Per topic, what a kernel's author changes: (for Triton, for user CUDA).
KNOBS: dict[str, tuple[str, str]] = {
    "memory": ("Move fewer bytes: fuse it with its neighbours, load narrower types, reuse tiles from shared memory "
               "or L2 (a larger BLOCK_M/BLOCK_N reads each input fewer times); more FLOP/s will not help.",
               "Move fewer bytes: fuse it with its neighbours, use narrower types, reuse data from shared memory or "
               "L2 (larger tiles read each input fewer times); more FLOP/s will not help."),
    "compute": ("Use a faster pipe: tl.dot on bf16/fp16 (or tf32) inputs runs on the tensor cores; remove redundant "
                "instructions.",
                "Use a faster pipe (tensor cores through mma/wmma or a library GEMM, lower precision) or remove "
                "redundant instructions."),
    "latency": ("Hide latency: more programs in flight (smaller BLOCK sizes give more programs, num_stages for "
                "pipelined loads), more independent work per program; the warp stalls say which wait dominates.",
                "Hide latency: more independent work per thread, more loads in flight (prefetch, cp.async pipelines), "
                "more resident warps; the warp stalls say which wait dominates."),
    "occupancy": ("Fewer registers or less shared memory per program: lower num_warps or num_stages, smaller BLOCK "
                  "sizes.",
                  "Fewer registers (__launch_bounds__, -maxrregcount) or less shared memory per block."),
    "small-grid": ("Launch more programs: smaller BLOCK sizes, or split the reduction dimension across programs "
                   "(split-K, split over the KV length) and combine the partial results.",
                   "Launch more blocks: smaller blocks, or split the work (split-K, split over the KV length) and "
                   "combine the partial results; or fuse it into a kernel that has more parallel work."),
    "tail": ("Choose BLOCK sizes that give a whole number of waves, or a persistent kernel that loops over tiles.",
             "Size the grid to a whole number of waves (blocks a multiple of SMs x blocks per SM), or make the kernel "
             "persistent (one wave that loops over the work)."),
    "old-build": ("Triton compiles for the device it runs on; the build is not the cause.",
                  "Compile for the device's architecture (nvcc -gencode arch=compute_XY,code=sm_XY)."),
}


def next_step(facts: KernelFacts, topic: str, plugin_knobs: str = "", limiter: str = "") -> str:
    """What to try for ``topic`` on this kernel: the library call's advice, or the author's knobs (with the iotrace
    plugin's own parameters named where the kernel is one); for occupancy, the knob of the binding ``limiter``."""
    origin = facts.origin
    if origin.library:
        return call_advice(origin, topic)
    if topic == "occupancy" and limiter in LIMITER_KNOBS:
        triton, cuda = LIMITER_KNOBS[limiter]
        return "Raise occupancy with " + (triton if origin.family == "triton" else cuda) + "."
    triton, cuda = KNOBS[topic]
    text = triton if origin.family == "triton" else cuda
    return text + (f" In this iotrace kernel, tune {plugin_knobs}." if plugin_knobs else "")
