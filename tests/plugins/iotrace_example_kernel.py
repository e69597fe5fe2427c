"""A third-party kernel plugin, as another package would ship it: y = alpha · x in Triton.

Installed through the ``iotrace`` entry-point group (tests/test_plugins.py builds a real dist-info for it)
or loaded with ``IOTRACE_PLUGINS=iotrace_example_kernel``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
import triton
import triton.language as tl

from iotrace.plugins import Cost, KernelSpec, Tolerance, TritonLaunch, hookimpl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


ALPHA = 1.5


def _scale_launch(x: torch.Tensor, y: torch.Tensor, config: Mapping[str, int]) -> TritonLaunch:
    """The launch, stated once: launch_kernel calls it on real tensors, compile_units derives the compile from it."""
    n = x.numel()
    return TritonLaunch(_scale_kernel, (triton.cdiv(n, config["BLOCK"]), 1, 1),
                        {"x_ptr": x, "y_ptr": y, "n": n, "alpha": ALPHA}, {"BLOCK": config["BLOCK"]},
                        num_warps=config["num_warps"], num_stages=1)  # no loop: nothing for stages to pipeline


class ScaleSpec(KernelSpec):
    name: ClassVar[str] = "example-scale"
    summary: ClassVar[str] = "y = 1.5 · x (an example third-party plugin)"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32",)
    shape_keys: ClassVar[tuple[str, ...]] = ("n",)
    presets: ClassVar[dict[str, dict[str, int]]] = {"1m": {"n": 1 << 20}}
    default_shape: ClassVar[dict[str, int]] = {"n": 1000}

    def make_inputs(self, shape, dtype, device, seed):
        gen = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(shape["n"], generator=gen).to(device)}

    def make_outputs(self, inputs):
        return {"y": torch.empty_like(inputs["x"])}

    def reference(self, inputs):
        return {"y": inputs["x"].double() * ALPHA}

    def launch_kernel(self, inputs, outputs, config, backend="triton"):
        _scale_launch(inputs["x"], outputs["y"], config)()

    def tolerance(self, dtype):
        return Tolerance(1e-6, 1e-6)

    def cost(self, shape, dtype):
        return Cost(float(shape["n"]), 8.0 * shape["n"], "fp32", "FLOPs = n; bytes = read x + write y = 8·n")

    def space(self, shape, dtype, card, backend="triton"):
        return [{"BLOCK": b, "num_warps": w} for b in (256, 1024) for w in (2, 4)]

    def default_config(self, shape, dtype, card, backend="triton"):
        return {"BLOCK": 1024, "num_warps": 4}

    def compile_units(self, shape: Mapping[str, int], dtype, config, backend="triton"):
        x = torch.empty(shape["n"], dtype=torch.float32, device="meta")  # shapes and strides only, no memory
        return [_scale_launch(x, torch.empty_like(x), config).unit()]


@hookimpl
def iotrace_kernels():
    return [ScaleSpec()]
