"""The words and tools a report uses for the GPU vendor its trace came from, so an AMD trace is read in AMD's terms.

A finding's sentence, its next step and the report's headings take their hardware words (SM or CU, warp or wavefront,
shared memory or LDS) and their tool advice (ncu or rocprof-compute, cudaMemcpyAsync or hipMemcpyAsync) from here:
never CUDA advice on an AMD kernel. AMD's terms are those of the ROCm documentation's "GPU architecture" glossary
(https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch.html) and rocprof-compute's "Performance model"
(https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/conceptual/performance-model.html): compute unit,
wavefront, workgroup, work-item, LDS, VGPR/SGPR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AMD", "AMD_FORMATS", "NVIDIA", "Vocabulary", "vocabulary_of"]


@dataclass(frozen=True)
class Vocabulary:
    """One vendor's words for the same hardware and the tools that measure it."""

    vendor: str
    sm: str               # the unit a block runs on
    block: str            # a group of threads scheduled together on one sm
    warp: str             # the lock-step group of threads
    thread: str
    shared_memory: str    # per-block on-chip scratchpad
    registers: str        # what limits a thread's registers
    runtime: str          # the runtime API prefix family
    async_copy: str       # the asynchronous host-device copy call
    kernel_profiler: str  # the tool that reads a kernel's counters
    kernel_profile_command: str
    timeline_profiler: str
    #: The rest have NVIDIA's words as defaults, so a Vocabulary built with the fields above stays NVIDIA's.
    memset_async: str = "cudaMemsetAsync"
    pin_host: str = "cudaHostAlloc / cudaHostRegister"
    graph: str = "CUDA graph"
    graph_how: str = "torch.cuda.graphs, torch.compile mode='reduce-overhead'"
    #: What records the runtime API calls, and the kernels' launch calls, in a trace.
    api_trace: str = ("nsys profile --trace=cuda records them; torch.profiler with ProfilerActivity.CPU and "
                      "ProfilerActivity.CUDA")
    launch_trace: str = "nsys --trace=cuda; torch.profiler"
    matrix_units: str = "tensor cores"
    scratch: str = "local memory"

    @property
    def amd(self) -> bool:
        return self.vendor == "amd"

    def same_check(self, nvidia_citation: str, tool_rule: str) -> str:
        """A threshold's citation: NVIDIA's text as it was; on AMD, that the rule makes the same check as the NVIDIA
        tool's rule it comes from (the threshold's source), so no NVIDIA tool reads as advice for an AMD trace."""
        return f"the same check as {tool_rule}" if self.amd else nvidia_citation


NVIDIA = Vocabulary(
    vendor="nvidia", sm="SM", block="block", warp="warp", thread="thread", shared_memory="shared memory",
    registers="registers/thread", runtime="CUDA", async_copy="cudaMemcpyAsync", kernel_profiler="ncu",
    kernel_profile_command="ncu --set full", timeline_profiler="nsys profile")

# rocprof-compute profiles kernels' counters (rocprofiler-compute docs, "Profile mode": `rocprof-compute profile`);
# rocprofv3 traces kernels and HIP calls (rocprofiler-sdk docs, "Using rocprofv3": --kernel-trace --hip-trace).
AMD = Vocabulary(
    vendor="amd", sm="CU", block="workgroup", warp="wavefront", thread="work-item", shared_memory="LDS",
    registers="VGPRs/SGPRs", runtime="HIP", async_copy="hipMemcpyAsync", kernel_profiler="rocprof-compute",
    kernel_profile_command="rocprof-compute profile", timeline_profiler="rocprofv3 --kernel-trace --hip-trace",
    memset_async="hipMemsetAsync", pin_host="hipHostMalloc / hipHostRegister", graph="HIP graph",
    # HIP graphs (ROCm HIP docs, "HIP graphs": https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_runtime_api/
    # hipgraph.html); PyTorch's graph capture records HIP graphs on ROCm (https://pytorch.org/docs/stable/notes/hip.html).
    graph_how="hipGraph capture (https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_runtime_api/hipgraph.html"
              "); in PyTorch on ROCm torch.cuda.graphs and torch.compile mode='reduce-overhead' capture HIP graphs",
    api_trace=("rocprofv3 --hip-trace records them; torch.profiler with ProfilerActivity.CPU and "
               "ProfilerActivity.CUDA, which on ROCm records the HIP calls"),
    launch_trace="rocprofv3 --kernel-trace --hip-trace; torch.profiler",
    # MFMA: the CDNA matrix cores (ROCm docs, "GPU architecture": https://rocm.docs.amd.com/en/latest/conceptual/
    # gpu-arch.html); scratch is a work-item's private spill memory (rocprof-compute "Scratch" in its memory chart).
    matrix_units="matrix cores (MFMA)", scratch="scratch memory")

#: Formats only AMD's tools write (iotrace.trace.formats._sniff).
AMD_FORMATS = frozenset({"rocpd-sqlite", "rocprof-csv", "rocprof-json", "rocprof-compute"})


def vocabulary_of(tables: Any) -> Vocabulary:
    """AMD's words for a trace an AMD tool wrote or whose devices are AMD's (a ROCm Kineto trace), else NVIDIA's."""
    if tables.meta.get("format") in AMD_FORMATS:
        return AMD
    devices = tables.devices
    if "vendor" in devices and len(devices) and (devices["vendor"] == "amd").any():
        return AMD
    return NVIDIA


#: What an AMD trace needs instead of an NVIDIA metric a report found missing, and the rocprof command that collects
#: it: rocprof-compute's roofline counters (`rocprof-compute profile --roof-only`, rocprofiler-compute docs "Profile
#: mode"), and rocprofv3's traces (rocprofiler-sdk docs "Using rocprofv3": --marker-trace for roctx ranges,
#: --hip-trace for the launching calls, --kernel-trace for each dispatch's resources, --pc-sampling-beta-enabled for
#: per-instruction samples). Keyed by the report the line is about.
AMD_NEEDS: dict[str, tuple[str, str]] = {
    "roofline": ("HBM bytes and FLOP counts (TCC_EA0_RDREQ/WRREQ, SQ_INSTS_VALU_*, SQ_INSTS_VALU_MFMA_MOPS_*)",
                 "rocprof-compute profile --roof-only"),
    "roofline FLOPs": ("SQ_INSTS_VALU_* and SQ_INSTS_VALU_MFMA_MOPS_*", "rocprof-compute profile --roof-only"),
    "time per NVTX range": ("roctx ranges", "rocprofv3 --marker-trace --kernel-trace"),
    "launch latency": ("each dispatch's launching HIP call", "rocprofv3 --hip-trace --kernel-trace"),
    "theoretical occupancy": ("each dispatch's workgroup size, VGPRs, SGPRs and LDS", "rocprofv3 --kernel-trace"),
    "achieved occupancy": ("SQ_ACCUM_PREV_HIRES (SQ_LEVEL_WAVES) / GRBM_GUI_ACTIVE per XCD", "rocprof-compute profile"),
    "source lines": ("PC samples per instruction", "rocprofv3 --pc-sampling-beta-enabled"),
}
#: A missing-metric line (or its detail) that names an NVIDIA tool.
_NVIDIA_TOOL = ("ncu", "nsys", "Nsight", "nvcc")
#: A source-line attribution on AMD needs the code object's line table as well as the samples (hipcc -g, as for
#: any Clang/LLVM build: ROCm docs, "Debugging with ROCgdb", compile with -g).
_AMD_DETAIL = {"source lines": "compile with hipcc -g for the line table", "theoretical occupancy":
               "or --card NAME for the gfx target"}


def in_amd_terms(report: str, metric: str, collect: str, detail: str = "") -> tuple[str, str, str, str]:
    """A missing-metric line's (report, metric, collect, detail) for an AMD trace: AMD's counter and rocprof command
    where the line names an NVIDIA tool (a report with no AMD counterpart keeps its words), else unchanged."""
    if any(tool in detail for tool in _NVIDIA_TOOL) or "compute capability" in detail:
        detail = _AMD_DETAIL.get(report, "")
    if not any(tool in collect for tool in _NVIDIA_TOOL) or report not in AMD_NEEDS:
        return report, metric, collect, detail
    needs, command = AMD_NEEDS[report]
    return report.replace("NVTX range", "roctx range"), needs, command, detail
