"""The KernelSpec contract: what every iotrace kernel plugin provides.

A kernel is one class deriving from :class:`KernelSpec`, living in one file beside its Triton (or CUDA
C++) kernels and launcher. The runner, the CLI and the autotuner use only the methods below, so a
third-party kernel is listed, run, costed, compiled and tuned exactly like a built-in one.

This module imports torch only under ``TYPE_CHECKING``: kernel files import torch themselves.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from iotrace.errors import InvalidValueError

if TYPE_CHECKING:
    import torch

    from iotrace.cards import Card

__all__ = [
    "DTYPE_BYTES",
    "DTYPE_PEAK",
    "Baselines",
    "Config",
    "Cost",
    "CudaUnit",
    "KernelSpec",
    "Shape",
    "Tolerance",
    "TritonUnit",
]

Shape = dict[str, int]
Config = dict[str, Any]
#: Same-run baselines of a kernel: a name -> a callable that does the comparable work (see KernelSpec.baselines).
Baselines = dict[str, Callable[[], object]]

#: Bytes per element of each dtype name a spec may support.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8e4m3": 1, "int8": 1}

#: The CardBook peak that bounds tensor-core work in each input dtype (iotrace.cards.PRECISIONS).
DTYPE_PEAK = {"fp32": "tf32_tensor", "fp16": "fp16_tensor", "bf16": "bf16_tensor", "fp8e4m3": "fp8_tensor",
              "int8": "int8_tensor"}


@dataclass(frozen=True)
class Cost:
    """Identity 4 applied to one kernel call: the work and the minimum traffic to and from device memory.

    ``peak`` names the CardBook peak that bounds the work (e.g. ``fp16_tensor`` for a tensor-core GEMM,
    ``fp32`` for element-wise math); ``formula`` states how both numbers were counted.
    """

    flops: float
    bytes: float
    peak: str
    formula: str

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf


@dataclass(frozen=True)
class Tolerance:
    """Allowed error against the reference: ``|out - ref| <= atol + rtol * |ref|`` element-wise."""

    atol: float
    rtol: float


@dataclass(frozen=True)
class TritonUnit:
    """One Triton kernel launch, as the compiler needs it to report static resources for a target.

    ``module`` and ``function`` name the ``@triton.jit`` function so a compile worker can import it with the
    interpreter off. ``args`` holds every runtime argument: a pointer as its Triton type (``"*fp16"``), a
    float scalar as its type (``"fp32"``), an integer as the value it will have, so the compile specialises
    it as a launch would (equal to 1, divisible by 16); ``constexprs`` holds the meta-parameters.
    """

    module: str
    function: str
    args: dict[str, str | int]
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    grid: tuple[int, int, int]

    @property
    def threads_per_block(self) -> int:
        return self.num_warps * 32


@dataclass(frozen=True)
class CudaUnit:
    """One CUDA C++ kernel launch: its source, name and geometry, compiled with nvcc for resources."""

    source: str
    kernel: str
    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    dynamic_smem: int = 0
    options: tuple[str, ...] = ()

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


class KernelSpec(ABC):
    """The contract of an iotrace kernel plugin.

    Subclasses set the class attributes and implement the abstract methods. Shapes are dicts of named
    positive integers (``{"M": 4096, "N": 4096, "K": 4096}``); configs are dicts of tuning parameters.
    """

    #: Unique kernel name, used on the command line and in the NVTX range ``iotrace/<name>``.
    name: ClassVar[str] = ""
    #: One line: what the kernel computes.
    summary: ClassVar[str] = ""
    #: dtype names it accepts (keys of :data:`DTYPE_BYTES`).
    dtypes: ClassVar[tuple[str, ...]] = ()
    #: Backends it can run on: ``"triton"``, ``"cuda"`` (CUDA C++ through CuPy).
    backends: ClassVar[tuple[str, ...]] = ("triton",)
    #: The names of the shape's dimensions, in order.
    shape_keys: ClassVar[tuple[str, ...]] = ()
    #: Shape keys that are on/off switches (0 or 1, default 0), e.g. ``bias`` or ``residual``.
    shape_flags: ClassVar[tuple[str, ...]] = ()
    #: Flags that choose among more than two schemes: the values each takes (default still 0).
    flag_values: ClassVar[dict[str, tuple[int, ...]]] = {}
    #: Named shapes from real models.
    presets: ClassVar[dict[str, Shape]] = {}
    #: A shape small enough to check under the Triton interpreter in seconds, ragged on purpose.
    default_shape: ClassVar[Shape] = {}
    #: The work (in :meth:`reduce_shape`'s units, by default the product of the dims) the Triton interpreter
    #: checks in a few seconds on one core; bigger shapes are checked reduced on the CPU.
    interpreter_budget: ClassVar[int] = 200_000

    # --- shapes -------------------------------------------------------------------------------------------

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        """Validate a shape (every key present, positive integers, flags 0 or 1 or one of their ``flag_values``);
        subclasses add their own limits."""
        shape = {**dict.fromkeys(self.shape_flags, 0), **shape}
        missing = [k for k in self.shape_keys if k not in shape]
        extra = [k for k in shape if k not in self.shape_keys]
        if missing or extra:
            raise InvalidValueError(
                f"shape {dict(shape)} for {self.name} " + (f"lacks {', '.join(missing)}" if missing else
                                                          f"has unknown keys {', '.join(extra)}"),
                f"give {', '.join(self.shape_keys)}, e.g. --shape " + ",".join(
                    f"{k}={v}" for k, v in self.default_shape.items()))
        out = {}
        for key in self.shape_keys:
            value = shape[key]
            if key in self.shape_flags:
                allowed = self.flag_values.get(key, (0, 1))
                if value not in allowed or isinstance(value, bool):
                    raise InvalidValueError(f"{self.name} shape {key}={value!r} must be one of "
                                            f"{', '.join(map(str, allowed))}", f"{key}=1 turns it on" if
                                            allowed == (0, 1) else f"see `iotrace kernels` for what {key} means")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidValueError(f"{self.name} shape {key}={value!r} must be a whole number >= 1",
                                        f"e.g. {key}={self.default_shape.get(key, 128)}")
            out[key] = value
        return out

    def shape_for(self, preset: str | None = None, shape: Mapping[str, int] | None = None) -> Shape:
        """The shape a command asked for: a named preset, a free shape, or the default, checked."""
        if preset is not None:
            if preset not in self.presets:
                raise InvalidValueError(f"{self.name} has no preset {preset!r}",
                                        f"its presets are {', '.join(self.presets)}")
            return self.check_shape(self.presets[preset])
        return self.check_shape(shape if shape is not None else self.default_shape)

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        """A shape of the same kind small enough to check under the interpreter: halve the largest dimension until
        the product of the dims fits ``max_elements``, keeping every reduced size odd (ragged against every block)."""
        dims = {k: v for k, v in shape.items() if k not in self.shape_flags}
        if math.prod(dims.values()) <= max_elements:
            return dict(shape)
        while math.prod(dims.values()) > max_elements and max(dims.values()) > 1:
            key = max(dims, key=dims.__getitem__)
            dims[key] = max(1, (dims[key] // 2) | 1)
        return {**shape, **dims}

    def check_dtype(self, dtype: str) -> str:
        if dtype not in self.dtypes:
            raise InvalidValueError(f"{self.name} does not support dtype {dtype!r}",
                                    f"use one of {', '.join(self.dtypes)}")
        return dtype

    # --- data ---------------------------------------------------------------------------------------------

    @abstractmethod
    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        """Fresh random inputs for ``shape`` (a new ``seed`` gives new data)."""

    @abstractmethod
    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Uninitialised output buffers for ``inputs``; the runner poisons them before each launch."""

    @abstractmethod
    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The expected outputs, computed in torch with fp32 (or wider) accumulation."""

    @abstractmethod
    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = "triton") -> None:
        """Run the kernel once, writing into ``outputs`` (the raw launch; call :meth:`launch`)."""

    def launch(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
               backend: str = "triton") -> None:
        """Run the kernel once inside the NVTX range ``iotrace/<name>``, the config in a nested range.

        Profilers filter on that range (``ncu --nvtx-include``, the nsys timeline report), so every launch
        iotrace makes, for checking, timing or tuning, goes through here.
        """
        from iotrace.nvtx_ranges import kernel_range

        with kernel_range(self.name, config):
            self.launch_kernel(inputs, outputs, config, backend)

    @abstractmethod
    def tolerance(self, dtype: str) -> Tolerance:
        """The error allowed against :meth:`reference` for outputs of ``dtype``."""

    def output_tolerance(self, output: str, dtype: str) -> Tolerance:
        """The error allowed for one named output; by default :meth:`tolerance` for all of them."""
        return self.tolerance(dtype)

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """Same-run baselines for speed ratios: a name -> a callable doing the comparable work on the inputs' device
        (cuBLAS, SDPA, eager torch, a copy of the bytes the kernel must move). Built once (allocations happen here),
        then timed many times beside the kernel. None by default; only timed on a GPU."""
        return {}

    def quality(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Figures of merit beyond pass/fail (e.g. a lossy kernel's error against the exact answer); none by default."""
        return {}

    # --- cost and tuning ----------------------------------------------------------------------------------

    @abstractmethod
    def cost(self, shape: Shape, dtype: str) -> Cost:
        """FLOPs and minimum bytes of one call (identity 4 for this kernel)."""

    @abstractmethod
    def space(self, shape: Shape, dtype: str, card: Card, backend: str = "triton") -> list[Config]:
        """Every config worth trying for ``shape`` on ``card``."""

    @abstractmethod
    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = "triton") -> Config:
        """A sensible config for this card class without tuning."""

    @abstractmethod
    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = "triton") -> Sequence[TritonUnit | CudaUnit]:
        """The launches one call makes, for static compilation (registers, shared memory, occupancy)."""

    #: Values a config may take beyond those in :meth:`space` (e.g. a GROUP_M the space does not sweep).
    extra_config_values: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def check_config(self, config: Mapping[str, Any], shape: Shape, dtype: str, card: Card,
                     backend: str = "triton") -> Config:
        """Refuse a config whose keys or values the space for this shape and card does not hold.

        Every value must appear for its key somewhere in :meth:`space` (or in :attr:`extra_config_values`): that
        keeps out block sizes the kernel cannot tile, tensor-memory features the card lacks and misaligned TMA.
        """
        space = self.space(shape, dtype, card, backend)
        allowed: dict[str, set[Any]] = {}
        for candidate in space:
            for key, value in candidate.items():
                allowed.setdefault(key, set()).add(value)
        for key, values in self.extra_config_values.items():
            allowed.setdefault(key, set()).update(values)
        unknown = [k for k in config if k not in allowed]
        if unknown:
            raise InvalidValueError(f"{self.name} has no tuning parameter {', '.join(unknown)}",
                                    f"its parameters are {', '.join(allowed)}")
        checked = {}
        for key, value in config.items():
            switch = all(isinstance(v, bool) for v in allowed[key])
            if switch and not isinstance(value, bool) and value in (0, 1):
                value = bool(value)  # USE_TMA=1 on the command line means True
            if value not in allowed[key] or isinstance(value, bool) != switch:
                options = ", ".join(str(v) for v in sorted(allowed[key], key=lambda v: (str(type(v)), v)))
                raise InvalidValueError(f"{self.name} {key}={value!r} is not valid for this shape on {card.name}",
                                        f"use one of {options}")
            checked[key] = value
        return checked
