"""The next step, fitted to where a kernel comes from: a library kernel (cuBLAS, CUTLASS, cuDNN, NCCL, ATen...) is
changed through its call, never through source-level or Triton knobs; a Triton or user CUDA kernel through its
knobs (:mod:`iotrace.trace.reports.origin` classifies the name)."""

from __future__ import annotations

from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.reports.origin import call_advice

__all__ = ["AMD_KNOBS", "AMD_LIMITER_KNOBS", "KNOBS", "LIMITER_KNOBS", "next_step"]

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
    # Balanced (ncu's SOLBottleneck: both units within 10 points, neither at 80%): relieving one unit leaves the
    # other as near its peak, so the advice cuts both and never says one of them "will not help".
    "balanced": ("Cut both the bytes and the instructions: fuse it with its neighbours, load narrower types (fewer "
                 "bytes, and tl.dot on bf16/fp16 runs on the tensor cores), reuse tiles from shared memory or L2 (a "
                 "larger BLOCK_M/BLOCK_N); relieving only compute or only memory leaves the other as near its peak.",
                 "Cut both the bytes and the instructions: fuse it with its neighbours, use narrower types (fewer "
                 "bytes, and a faster pipe: tensor cores through mma/wmma or a library GEMM), reuse data from shared "
                 "memory or L2, remove redundant instructions; relieving only compute or only memory leaves the other "
                 "as near its peak."),
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


# An AMD kernel's knobs, in ROCm's words. HIP source: clang's amdgpu_waves_per_eu / amdgpu_flat_work_group_size
# attributes cap VGPRs for more waves (https://clang.llvm.org/docs/AttributeReference.html#amdgpu-waves-per-eu);
# Triton on ROCm keeps num_warps/num_stages and adds waves_per_eu and matrix_instr_nonkdim (ROCm docs, "Optimizing
# Triton kernels", https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/
# optimizing-triton-kernel.html).
_WAVES_PER_EU = "__attribute__((amdgpu_waves_per_eu(N)))"
#: Per AMD occupancy limiter (iotrace.occupancy_amd.AMD_LIMIT_NAMES): (for Triton, for HIP).
AMD_LIMITER_KNOBS: dict[str, tuple[str, str]] = {
    "vgprs": ("fewer VGPRs per program: smaller BLOCK sizes or fewer num_stages, or waves_per_eu to ask the compiler "
              "for more waves per SIMD",
              f"fewer VGPRs per work-item ({_WAVES_PER_EU} asks the compiler for N waves per SIMD; smaller tiles, "
              "fewer accumulators in AGPRs, which share the VGPR file)"),
    "sgprs": ("fewer scalar registers per program (fewer uniform values live at once)",
              "fewer SGPRs per wavefront (fewer uniform values and kernel arguments live at once)"),
    "lds": ("less LDS per program: fewer num_stages or smaller BLOCK sizes",
            "less LDS per workgroup (smaller tiles, fewer buffered stages)"),
    "waves": ("smaller programs (lower num_warps): the workgroup's wavefronts fill the CU's wave slots in too few "
              "workgroups",
              "smaller workgroups: the workgroup's wavefronts fill the CU's wave slots in too few workgroups"),
    "workgroups": ("larger programs (higher num_warps): the CU ran out of workgroup slots before wave slots",
                   "larger workgroups: the CU ran out of workgroup slots before wave slots"),
}
#: Per topic, what an AMD kernel's author changes: (for Triton, for HIP).
AMD_KNOBS: dict[str, tuple[str, str]] = {
    "memory": ("Move fewer bytes: fuse it with its neighbours, load narrower types, reuse tiles from LDS or L2 (a "
               "larger BLOCK_M/BLOCK_N reads each input fewer times); more FLOP/s will not help.",
               "Move fewer bytes: fuse it with its neighbours, use narrower types, reuse data from LDS or L2 (larger "
               "tiles read each input fewer times); more FLOP/s will not help."),
    "balanced": ("Cut both the bytes and the instructions: fuse it with its neighbours, load narrower types (fewer "
                 "bytes, and tl.dot on bf16/fp16 runs on the matrix cores), reuse tiles from LDS or L2 (a larger "
                 "BLOCK_M/BLOCK_N); relieving only compute or only memory leaves the other as near its peak.",
                 "Cut both the bytes and the instructions: fuse it with its neighbours, use narrower types (fewer "
                 "bytes, and a faster pipe: the matrix cores through MFMA or a library GEMM), reuse data from LDS or "
                 "L2, remove redundant instructions; relieving only compute or only memory leaves the other as near "
                 "its peak."),
    "compute": ("Use a faster pipe: tl.dot on bf16/fp16 inputs runs on the matrix cores (MFMA; matrix_instr_nonkdim "
                "picks the instruction); remove redundant instructions.",
                "Use a faster pipe (the matrix cores through MFMA builtins or a library GEMM such as hipBLASLt or "
                "Composable Kernel, lower precision) or remove redundant instructions."),
    "latency": ("Hide latency: more programs in flight (smaller BLOCK sizes give more programs, num_stages for "
                "pipelined loads, waves_per_eu), more independent work per program.",
                "Hide latency: more independent work per work-item, more loads in flight, more resident wavefronts "
                "per SIMD; rocprof-compute's Wavefront panel shows how long waves wait."),
    "occupancy": ("Fewer VGPRs or less LDS per program: lower num_warps or num_stages, smaller BLOCK sizes, "
                  "waves_per_eu.",
                  f"Fewer VGPRs ({_WAVES_PER_EU}, smaller tiles) or less LDS per workgroup."),
    "small-grid": ("Launch more programs: smaller BLOCK sizes, or split the reduction dimension across programs "
                   "(split-K, split over the KV length) and combine the partial results.",
                   "Launch more workgroups: smaller workgroups, or split the work (split-K, split over the KV length) "
                   "and combine the partial results; or fuse it into a kernel that has more parallel work."),
    "tail": ("Choose BLOCK sizes that give a whole number of waves, or a persistent kernel that loops over tiles.",
             "Size the grid to a whole number of waves (workgroups a multiple of CUs x workgroups per CU), or make the "
             "kernel persistent (one wave that loops over the work)."),
    "old-build": ("Triton compiles for the device it runs on; the build is not the cause.",
                  "Compile for the device's gfx target (hipcc --offload-arch=gfxNNN)."),
}


def next_step(facts: KernelFacts, topic: str, plugin_knobs: str = "", limiter: str = "") -> str:
    """What to try for ``topic`` on this kernel: the library call's advice, or the author's knobs (with the iotrace
    plugin's own parameters named where the kernel is one); for occupancy, the knob of the binding ``limiter``."""
    origin, amd = facts.origin, facts.vocab.amd
    if origin.library:
        # A library's memory advice (fuse, a narrower dtype, batch) cuts bytes and instructions alike: a balanced
        # kernel's call gets it.
        return call_advice(origin, "memory" if topic == "balanced" else topic, amd)
    limiters = AMD_LIMITER_KNOBS if amd else LIMITER_KNOBS
    if topic == "occupancy" and limiter in limiters:
        triton, cuda = limiters[limiter]
        return "Raise occupancy with " + (triton if origin.family == "triton" else cuda) + "."
    triton, cuda = (AMD_KNOBS if amd else KNOBS)[topic]
    text = triton if origin.family == "triton" else cuda
    return text + (f" In this iotrace kernel, tune {plugin_knobs}." if plugin_knobs else "")
