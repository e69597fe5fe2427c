"""Capture in this process with the PyTorch profiler (Kineto, which collects kernel activity through CUPTI).

For machines with a GPU but neither Nsight tool: the kernel is launched ``launches`` times inside
``torch.profiler.record_function("iotrace/<kernel>")`` (Kineto records ``record_function`` ranges, not NVTX ones), with
``ProfilerActivity.CUDA`` collecting the kernels, and the trace is written as Chrome-trace JSON, which iotrace's Kineto
loader reads (https://pytorch.org/docs/stable/profiler.html, ``torch.profiler.profile`` and ``export_chrome_trace``).
One launch before the capture compiles the kernel, so compilation stays out of the trace.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from iotrace.errors import NoGpuError
from iotrace.nvtx_ranges import range_name
from iotrace.trace.profilers.capture import Capture, CapturePaths

if TYPE_CHECKING:
    from iotrace.plugins.spec import KernelSpec
    from iotrace.trace.profilers.child import RunPlan

__all__ = ["capture", "collector", "require_gpu"]


def require_gpu() -> None:
    """Refuse before anything is written: CUPTI sees only kernels that run on an NVIDIA GPU."""
    import torch

    from iotrace.kernels.backend import interpreting

    if not torch.cuda.is_available():
        raise NoGpuError("--cupti collects kernel activity from an NVIDIA GPU in this process, and torch.cuda sees "
                         "no GPU", "run it on a machine with an NVIDIA GPU and a CUDA build of torch")
    if interpreting():
        raise NoGpuError("--cupti with TRITON_INTERPRET=1 would run the kernel on the CPU, where CUPTI sees nothing",
                         "unset TRITON_INTERPRET (or set it to 0) to launch on the GPU")


def collector() -> dict[str, Any]:
    """The ``tool`` entry of the manifest for this collector."""
    import torch

    return {"name": "cupti", "product": "torch.profiler (Kineto/CUPTI)", "path": None, "version": torch.__version__,
            "version_text": f"torch {torch.__version__}, CUDA {torch.version.cuda}"}


def capture(spec: KernelSpec, plan: RunPlan, paths: CapturePaths, *, launches: int) -> Capture:
    """Launch the kernel ``launches`` times under the profiler and write ``<stem>.kineto.json``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    require_gpu()
    started = time.monotonic()
    inputs = spec.make_inputs(plan.shape, plan.dtype, "cuda", plan.seed)
    outputs = spec.make_outputs(inputs)
    spec.launch(inputs, outputs, plan.config, plan.backend)  # compile and warm up outside the capture
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(launches):
            with record_function(range_name(spec.name)):
                spec.launch(inputs, outputs, plan.config, plan.backend)
        torch.cuda.synchronize()
    trace = paths.with_suffix(".kineto.json")
    prof.export_chrome_trace(str(trace))
    return Capture(capture=trace, export=trace, seconds=time.monotonic() - started)
