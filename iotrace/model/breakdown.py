"""One decode step taken apart: each kernel's time against its roofline floor, and the floors against the step.

The step is run once eagerly with the ops recording every launch (plugin, shape, dtype, config). Each call's floor
is identity 4 on the card: max(FLOPs / peak, bytes / bandwidth) from the plugin's own cost model, the decode
attention costed at the context it really read. On a GPU the same step runs under the PyTorch profiler; the
Kineto trace is read back through iotrace's own trace loader and each kernel's measured time is matched to its
plugin by the Triton function names the plugin's ``compile_units`` state. The gap between the measured step and
the sum of floors is where the tok/s went; the part of the eager step not covered by kernel time is the launch
overhead a CUDA graph removes.

From a CPU run the floors are a GPU card's, costed at the dtype that card would run (the bench's wall dtype, not the
CPU's fp32), and no gap is drawn between them and the CPU's step: a CPU's time less a GPU's floors measures nothing.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.model.decoder import Decoder
    from iotrace.model.ops import KernelCallRecord, Ops

__all__ = ["decode_step_breakdown"]


def _floors(calls: list[KernelCallRecord], card: Card | None, context: int, dtype: str | None
            ) -> tuple[list[dict[str, Any]], str]:
    """Per plugin: launches, FLOPs and bytes of ``calls`` at ``dtype`` (None: each call's own), and the sum of their
    roofline floors on ``card``."""
    from iotrace.plugins.manager import kernel
    from iotrace.runner import roofline_of

    rows: dict[str, dict[str, Any]] = {}
    note = ""
    for call in calls:
        shape = dict(call.shape)
        if call.kernel == "attention-decode":
            shape["context"] = context  # costed at what it read, not the cache's capacity
        row = rows.setdefault(call.kernel, {"kernel": call.kernel, "launches": 0, "flops": 0.0, "bytes": 0.0,
                                            "floor_us": 0.0 if card is not None else None})
        spec = kernel(call.kernel)
        cost = spec.cost(spec.check_shape(shape), dtype or call.dtype)
        row["launches"] += 1
        row["flops"] += cost.flops
        row["bytes"] += cost.bytes
        if card is not None and row["floor_us"] is not None:
            try:
                row["floor_us"] += roofline_of(cost, card).floor_us
            except Exception as exc:  # a card without the peak or bandwidth this kernel needs
                row["floor_us"] = None
                note = f"floors n/a on {card.key}: {exc}"
    return list(rows.values()), note


def _function_names(calls: list[KernelCallRecord]) -> dict[str, str]:
    """Triton function name -> plugin, from each recorded call's compile units."""
    from iotrace.plugins.manager import kernel

    names: dict[str, str] = {}
    for call in calls:
        if not call.config:
            continue
        spec = kernel(call.kernel)
        for unit in spec.compile_units(spec.check_shape(call.shape), call.dtype, call.config):
            function = getattr(unit, "function", None) or getattr(unit, "kernel", None)
            if function:
                names[function] = call.kernel
    return names


def _measured(decoder: Decoder, token: torch.Tensor, calls_out: list[KernelCallRecord], ops: Ops
              ) -> tuple[dict[str, float], float, float]:
    """Kernel µs per plugin (and 'other'), kernel µs in all, and the eager step's wall µs, from a Kineto trace."""
    from torch.profiler import ProfilerActivity, profile

    from iotrace.trace.loader import load

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        decoder.decode(token, eager=True)
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6
    decoder.lens -= 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "decode-step.kineto.json"
        prof.export_chrome_trace(str(path))
        kernels = load(path).kernels
    by_function = _function_names(calls_out)
    per: dict[str, float] = defaultdict(float)
    for name, ns in zip(kernels["name"], kernels["duration_ns"], strict=True):
        plugin = next((p for f, p in by_function.items() if f in str(name)), "other (torch glue)")
        per[plugin] += float(ns) / 1e3
    return dict(per), sum(per.values()), wall_us


def decode_step_breakdown(decoder: Decoder, ops: Ops, card: Card | None, measured_step_s: float,
                          first_token: int, floor_dtype: str | None = None) -> dict[str, Any]:
    """The step table; ``measured_step_s`` is the timed loop's median step (graph replays on a GPU); the floors are
    costed at ``floor_dtype`` (None: the dtype each kernel ran in)."""
    token = torch.full((decoder.batch,), first_token, dtype=torch.int64, device=decoder.lens.device)
    context = int(decoder.lens.max()) + 1
    on_gpu = decoder.lens.device.type == "cuda"
    with ops.recording() as calls:
        if on_gpu:
            per, kernel_us, wall_us = _measured(decoder, token, calls, ops)
        else:
            t0 = time.perf_counter()
            decoder.decode(token, eager=True)
            wall_us = (time.perf_counter() - t0) * 1e6
            decoder.lens -= 1
            per, kernel_us = {}, None
    rows, note = _floors(calls, card, context, floor_dtype)
    for row in rows:
        row["measured_us"] = per.get(row["kernel"]) if on_gpu else None
    if on_gpu and "other (torch glue)" in per:
        rows.append({"kernel": "other (torch glue)", "launches": None, "flops": None, "bytes": None,
                     "floor_us": None, "measured_us": per["other (torch glue)"]})
    floors = [r["floor_us"] for r in rows if r["floor_us"] is not None]
    floor_sum = sum(floors) if floors and len(floors) == len([r for r in rows if r["flops"] is not None]) else None
    step_us = measured_step_s * 1e6
    dtype = floor_dtype or (calls[0].dtype if calls else None)
    return {
        "context": context, "card": None if card is None else card.key, "floor_dtype": dtype, "kernels": rows,
        "floor_sum_us": floor_sum, "step_us": step_us, "eager_step_us": wall_us, "kernel_sum_us": kernel_us,
        # A CPU step less a GPU's floors is no gap of anything: only a GPU run's is drawn.
        "gap_us": None if floor_sum is None or not on_gpu else step_us - floor_sum,
        "launch_overhead_us": None if kernel_us is None else max(0.0, wall_us - kernel_us),
        "note": note or _cpu_note(on_gpu, card, dtype),
    }


def _cpu_note(on_gpu: bool, card: Card | None, dtype: str | None) -> str:
    if on_gpu:
        return ""
    if card is None:
        return "no GPU: per-kernel times need one, and floors a card (--card)"
    return (f"no GPU: per-kernel times need one; the floors are {card.key}'s at {dtype}, the step time is this CPU's, "
            "so no gap is drawn between them")
