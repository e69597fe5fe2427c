"""A kernel plugin for the autotuner's tests: y = 2 · x, with one deliberately wrong config.

The config ``{"BLOCK": 256, "num_warps": 4, "OFF_BY_ONE": True}`` adds 1 to every element: it compiles, launches and
occupies the SM like its neighbours, so only the check against the reference can tell it apart. The tuner must
reject it (Triton's own autotuner would happily pick it if it were fastest).

Loaded with ``IOTRACE_PLUGINS=iotrace_tune_kernel`` and this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
import triton
import triton.language as tl

from iotrace.plugins import Cost, KernelSpec, Tolerance, TritonLaunch, hookimpl


@triton.jit
def _double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, OFF_BY_ONE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask) * 2.0
    if OFF_BY_ONE:  # the deliberate bug
        y += 1.0
    tl.store(y_ptr + offs, y, mask=mask)


WRONG = {"BLOCK": 256, "num_warps": 4, "OFF_BY_ONE": True}


def _double_launch(x: torch.Tensor, y: torch.Tensor, config: Mapping[str, int]) -> TritonLaunch:
    """The launch, stated once: launch_kernel calls it on real tensors, compile_units derives the compile from it."""
    n = x.numel()
    return TritonLaunch(_double_kernel, (triton.cdiv(n, config["BLOCK"]), 1, 1), {"x_ptr": x, "y_ptr": y, "n": n},
                        {"BLOCK": config["BLOCK"], "OFF_BY_ONE": config["OFF_BY_ONE"]},
                        num_warps=config["num_warps"], num_stages=1)  # no loop: nothing for stages to pipeline


class DoubleSpec(KernelSpec):
    name: ClassVar[str] = "tune-double"
    summary: ClassVar[str] = "y = 2 · x, one config deliberately wrong (autotuner tests)"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32",)
    shape_keys: ClassVar[tuple[str, ...]] = ("n",)
    default_shape: ClassVar[dict[str, int]] = {"n": 100_003}
    # The whole shape is checked under the interpreter: each check then takes a noticeable fraction of a second,
    # which the cache tests need to stop a sweep half way.
    interpreter_budget: ClassVar[int] = 1 << 24

    def make_inputs(self, shape, dtype, device, seed):
        gen = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(shape["n"], generator=gen).to(device)}

    def make_outputs(self, inputs):
        return {"y": torch.empty_like(inputs["x"])}

    def reference(self, inputs):
        return {"y": inputs["x"].double() * 2.0}

    def launch_kernel(self, inputs, outputs, config, backend="triton"):
        _double_launch(inputs["x"], outputs["y"], config)()

    def tolerance(self, dtype):
        return Tolerance(1e-6, 1e-6)

    def cost(self, shape, dtype):
        return Cost(float(shape["n"]), 8.0 * shape["n"], "fp32", "FLOPs = n; bytes = read x + write y = 8·n")

    def space(self, shape, dtype, card, backend="triton"):
        right = [{"BLOCK": b, "num_warps": w, "OFF_BY_ONE": False} for b in (128, 256, 512, 1024) for w in (1, 2, 4)]
        return [*right, dict(WRONG)]

    def default_config(self, shape, dtype, card, backend="triton"):
        return {"BLOCK": 1024, "num_warps": 4, "OFF_BY_ONE": False}

    def compile_units(self, shape: Mapping[str, int], dtype, config, backend="triton"):
        x = torch.empty(shape["n"], dtype=torch.float32, device="meta")  # shapes and strides only, no memory
        return [_double_launch(x, torch.empty_like(x), config).unit()]


@hookimpl
def iotrace_kernels():
    return [DoubleSpec()]
