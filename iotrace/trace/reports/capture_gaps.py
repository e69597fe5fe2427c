"""What a trace did not capture, each in one line with the option that captures it: a trace with CUDA runtime calls
but no GPU activity, an Nsight Systems export without its CUDA trace, a PyTorch profiler trace whose CPU ops have no
input shapes (the op rooflines need them)."""

from __future__ import annotations

import pandas as pd

from iotrace.trace.tables import TraceTables

__all__ = ["capture_gaps"]

#: The options that capture each part (PyTorch profiler: https://pytorch.org/docs/stable/profiler.html; Nsight
#: Systems User Guide, "CLI Profile Command Switch Options", --trace).
TORCH_CUDA = "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])"
NSYS_CUDA = "nsys profile --trace=cuda,nvtx"
TORCH_SHAPES = "torch.profiler.profile(..., record_shapes=True)"


def _has_shapes(dims: pd.Series) -> bool:
    return bool(dims.map(lambda d: isinstance(d, list | tuple) and len(d) > 0).any())


def capture_gaps(tables: TraceTables) -> list[str]:
    """One line per part of the trace that was not captured, naming it and the option that captures it."""
    out = []
    fmt = str(tables.meta.get("format") or "")
    gpu_events = len(tables.kernels) + len(tables.transfers)
    n_calls = tables.rows("api_calls")
    kineto, nsys = fmt.startswith("kineto"), fmt.startswith("nsys")
    if gpu_events == 0 and n_calls > 0:
        fix = TORCH_CUDA if kineto else NSYS_CUDA if nsys else "a CUDA activity trace"
        out.append(f"GPU activity was not captured: the trace holds {n_calls} CUDA runtime call"
                   f"{'s' * (n_calls != 1)} but no kernel, copy or set (CUDA activities off, or CUPTI unavailable "
                   f"to the profiler); capture it with {fix}")
    elif gpu_events == 0 and nsys:
        out.append(f"the export has no CUDA trace (no kernels, copies or runtime calls): capture it with {NSYS_CUDA}")
    ops = tables.ops
    if kineto and len(ops) and not _has_shapes(ops["input_dims"]):
        out.append(f"the trace's {len(ops)} CPU ops carry no input shapes, so the op rooflines cannot be placed: "
                   f"capture them with {TORCH_SHAPES}")
    return out
