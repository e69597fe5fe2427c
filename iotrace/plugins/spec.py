"""The KernelSpec contract: what every iotrace kernel plugin provides.

A kernel is one class deriving from :class:`KernelSpec`, living in one file beside its Triton (or CUDA
C++) kernels and launcher. The runner, the CLI and the autotuner use only the methods below, so a
third-party kernel is listed, run, costed, compiled and tuned exactly like a built-in one.

The contract, in the order of :class:`KernelSpec`'s body: class attributes that describe the kernel, the
methods a plugin must implement (abstract), and the methods it may override (each with a default). Below
those, clearly marked, are helpers iotrace calls on a spec; they are not part of the contract and live in
:mod:`iotrace.plugins.checks`.

Records a spec returns: :class:`Cost`, :class:`Tolerance`, and for static compilation :class:`TritonUnit`
(usually derived from a :class:`TritonLaunch`, the one statement of a Triton launch) or :class:`CudaUnit`.

This module imports torch only under ``TYPE_CHECKING``: kernel files import torch themselves.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from iotrace.plugins import checks

if TYPE_CHECKING:
    import torch

    from iotrace.cards import Card

__all__ = [
    "DEFAULT_BACKEND",
    "DTYPE_BYTES",
    "DTYPE_PEAK",
    "Baselines",
    "Config",
    "Cost",
    "CudaUnit",
    "KernelSpec",
    "Shape",
    "Tolerance",
    "TritonLaunch",
    "TritonUnit",
]

Shape = dict[str, int]
Config = dict[str, Any]
#: Same-run baselines of a kernel: a name -> a callable that does the comparable work (see KernelSpec.baselines).
Baselines = dict[str, Callable[[], object]]

#: The backend a method of the contract runs when the caller names none.
DEFAULT_BACKEND = "triton"

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
    Build one with :meth:`TritonLaunch.unit` rather than by hand, so it cannot drift from the launch.
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


#: Triton's name of each torch dtype a kernel argument may have (``str(tensor.dtype)`` without ``torch.``).
_TRITON_POINTEE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
                   "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "int8": "i8", "int16": "i16",
                   "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1"}


@dataclass(frozen=True)
class TritonLaunch:
    """One launch of a ``@triton.jit`` kernel, stated once: calling it launches, :meth:`unit` describes it for the
    compiler.

    A kernel file builds its launches in one function from the tensors it launches on. The launcher calls that
    function with real tensors and calls the result; ``compile_units`` calls it with ``device="meta"`` tensors of
    the shapes the runner makes (shapes and strides, no memory) and returns ``[launch.unit()]``. So the arguments,
    strides, constexprs, grid, warps and stages the compiler sees are the ones the GPU gets.

    ``args`` holds every runtime argument by its parameter name: a tensor, an ``int`` or a ``float``;
    ``constexprs`` every ``tl.constexpr`` parameter. Example::

        def _scale_launch(x, y, config):
            n = x.numel()
            return TritonLaunch(_scale_kernel, (triton.cdiv(n, config["BLOCK"]), 1, 1),
                                {"x_ptr": x, "y_ptr": y, "n": n, "alpha": 1.5}, {"BLOCK": config["BLOCK"]},
                                num_warps=config["num_warps"], num_stages=1)

        _scale_launch(x, y, config)()                                     # the launcher
        [_scale_launch(torch.empty(n, device="meta"), ...).unit()]        # compile_units
    """

    #: The ``@triton.jit`` function (a ``JITFunction``, or an ``InterpretedFunction`` under the interpreter).
    kernel: Any
    grid: tuple[int, int, int]
    args: Mapping[str, Any]
    constexprs: Mapping[str, Any]
    num_warps: int
    num_stages: int

    def __call__(self) -> None:
        """Launch the kernel on the tensors in :attr:`args`."""
        self.kernel[self.grid](**self.args, **self.constexprs, num_warps=self.num_warps, num_stages=self.num_stages)

    def unit(self) -> TritonUnit:
        """The :class:`TritonUnit` of this launch: tensors become their Triton pointer type, floats ``"fp32"``
        (what Triton makes of a Python float), integers stay values so the compile specialises them as a launch
        does.

        :raises ValueError: when :attr:`args` and :attr:`constexprs` do not name the kernel's parameters exactly.
        """
        names = list(self.kernel.arg_names)
        given = [*self.args, *self.constexprs]
        if sorted(given) != sorted(names):
            raise ValueError(f"the launch of {self.kernel.fn.__name__} names {sorted(given)}, but the kernel takes "
                             f"{names}")
        args: dict[str, str | int] = {}
        for name, value in self.args.items():
            if hasattr(value, "data_ptr"):
                args[name] = "*" + _TRITON_POINTEE[str(value.dtype).removeprefix("torch.")]
            elif isinstance(value, bool):
                args[name] = "i1"
            elif isinstance(value, float):
                args[name] = "fp32"
            else:
                args[name] = int(value)
        grid = (*self.grid, *(1,) * (3 - len(self.grid)))
        return TritonUnit(self.kernel.fn.__module__, self.kernel.fn.__name__, args, dict(self.constexprs),
                          self.num_warps, self.num_stages, grid)  # type: ignore[arg-type]


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

    Subclasses set the class attributes and implement the abstract methods; the other methods of the contract
    have defaults they may override. Shapes are dicts of named positive integers (``{"M": 4096, "N": 4096,
    "K": 4096}``); configs are dicts of tuning parameters (``{"BLOCK_M": 128, "num_warps": 8}``). Every method
    that takes ``backend`` is called with one of :attr:`backends`, :attr:`default_backend` when the caller names
    none.
    """

    # --- the contract: class attributes -------------------------------------------------------------------

    #: Unique kernel name, used on the command line and in the NVTX range ``iotrace/<name>``.
    name: ClassVar[str] = ""
    #: One line: what the kernel computes.
    summary: ClassVar[str] = ""
    #: dtype names it accepts (keys of :data:`DTYPE_BYTES`).
    dtypes: ClassVar[tuple[str, ...]] = ()
    #: Backends it can run on: ``"triton"``, ``"cuda"`` (CUDA C++ through CuPy).
    backends: ClassVar[tuple[str, ...]] = (DEFAULT_BACKEND,)
    #: The backend of a call that names none (every ``backend`` parameter below defaults to it).
    default_backend: ClassVar[str] = DEFAULT_BACKEND
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
    #: Values a config may take beyond those in :meth:`space` (e.g. a GROUP_M the space does not sweep).
    extra_config_values: ClassVar[dict[str, tuple[Any, ...]]] = {}

    # --- the contract: methods a plugin implements --------------------------------------------------------

    @abstractmethod
    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        """Make fresh random inputs for one call.

        :param shape: a shape :meth:`check_shape` accepted.
        :param dtype: one of :attr:`dtypes`.
        :param device: the torch device to allocate on: ``"cuda"``, or ``"cpu"`` under the interpreter.
        :param seed: the random seed; a new seed gives new data, the same seed the same data.
        :returns: the input tensors by name. A launch parameter that is not data (a flag, a length the launch needs
            on the host) may ride along as a 0-d CPU tensor.

        Example::

            def make_inputs(self, shape, dtype, device, seed):
                gen = torch.Generator().manual_seed(seed)
                return {"x": torch.randn(shape["n"], generator=gen).to(device)}
        """

    @abstractmethod
    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Allocate the output buffers for one call; the runner poisons them before each launch.

        :param inputs: what :meth:`make_inputs` returned.
        :returns: uninitialised output tensors by name, on the inputs' device.

        Example::

            def make_outputs(self, inputs):
                return {"y": torch.empty_like(inputs["x"])}
        """

    @abstractmethod
    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Compute the expected outputs in torch, with fp32 (or wider) accumulation.

        :param inputs: what :meth:`make_inputs` returned.
        :returns: one tensor for each output of :meth:`make_outputs`, same names, compared under :meth:`tolerance`.

        Example::

            def reference(self, inputs):
                return {"y": inputs["x"].double() * 1.5}
        """

    @abstractmethod
    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        """Run the kernel once, writing into ``outputs``. iotrace calls :meth:`launch`, which wraps this in the
        kernel's NVTX range; a plugin implements this and never calls it directly.

        :param inputs: what :meth:`make_inputs` returned.
        :param outputs: what :meth:`make_outputs` returned; write every output.
        :param config: one config of :meth:`space` (or :meth:`default_config`).
        :param backend: one of :attr:`backends`.

        Do no host synchronisation here (no ``.item()``, no device-to-host copy): timed launches are captured in
        CUDA graphs. Example::

            def launch_kernel(self, inputs, outputs, config, backend="triton"):
                _scale_launch(inputs["x"], outputs["y"], config)()   # a TritonLaunch, see compile_units
        """

    @abstractmethod
    def tolerance(self, dtype: str) -> Tolerance:
        """The error allowed against :meth:`reference` for outputs of ``dtype``.

        :param dtype: one of :attr:`dtypes`.
        :returns: the :class:`Tolerance` every output is held to (see :meth:`output_tolerance` for one output).

        Example::

            def tolerance(self, dtype):
                return {"fp16": Tolerance(2e-3, 2e-3), "bf16": Tolerance(1.6e-2, 1.6e-2)}[self.check_dtype(dtype)]
        """

    @abstractmethod
    def cost(self, shape: Shape, dtype: str) -> Cost:
        """FLOPs and minimum bytes to and from device memory of one call (identity 4 for this kernel).

        :param shape: a shape :meth:`check_shape` accepted.
        :param dtype: one of :attr:`dtypes`.
        :returns: a :class:`Cost`; its ``formula`` says how both numbers were counted.

        Example::

            def cost(self, shape, dtype):
                return Cost(float(shape["n"]), 8.0 * shape["n"], "fp32", "FLOPs = n; bytes = read x + write y = 8·n")
        """

    @abstractmethod
    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        """Every config worth trying for ``shape`` on ``card``: the autotuner's search space.

        :param shape: a shape :meth:`check_shape` accepted.
        :param dtype: one of :attr:`dtypes`.
        :param card: the :class:`iotrace.cards.Card` to tune for (its ``sm_limits.cc``, ``sm_count``, ...).
        :param backend: one of :attr:`backends`.
        :returns: configs, each a dict of the same keys; :meth:`check_config` accepts exactly their values (and
            :attr:`extra_config_values`).

        Example::

            def space(self, shape, dtype, card, backend="triton"):
                return [{"BLOCK": b, "num_warps": w} for b in (256, 1024) for w in (2, 4)]
        """

    @abstractmethod
    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        """A sensible config for this card class without tuning.

        :param shape: a shape :meth:`check_shape` accepted.
        :param dtype: one of :attr:`dtypes`.
        :param card: the :class:`iotrace.cards.Card` it will run on.
        :param backend: one of :attr:`backends`.
        :returns: one config with the keys of :meth:`space`'s configs.

        Example::

            def default_config(self, shape, dtype, card, backend="triton"):
                return {"BLOCK": 1024, "num_warps": 4}
        """

    @abstractmethod
    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> Sequence[TritonUnit | CudaUnit]:
        """The launches one call makes, for static compilation (registers, shared memory, occupancy) on the CPU.

        :param shape: a shape :meth:`check_shape` accepted.
        :param dtype: one of :attr:`dtypes`.
        :param config: one config of :meth:`space`.
        :param backend: one of :attr:`backends`.
        :returns: one :class:`TritonUnit` or :class:`CudaUnit` per kernel launch of :meth:`launch_kernel`, in
            launch order, for contiguous tensors of the shapes :meth:`make_inputs` makes.

        State a Triton launch once, as a :class:`TritonLaunch`, and derive the unit from it on ``meta`` tensors,
        so the compiler sees what the launcher passes. Example::

            def compile_units(self, shape, dtype, config, backend="triton"):
                x = torch.empty(shape["n"], dtype=torch.float32, device="meta")
                return [_scale_launch(x, torch.empty_like(x), config).unit()]
        """

    # --- the contract: methods a plugin may override ------------------------------------------------------

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        """Validate a shape; override to add the kernel's own limits, starting from ``super().check_shape(shape)``.

        :param shape: dimension name -> value, as given on the command line or by a preset; flags may be left out.
        :returns: the shape with every key of :attr:`shape_keys`, flags defaulted to 0.
        :raises iotrace.errors.InvalidValueError: a key missing or unknown, a dimension not a whole number >= 1, a
            flag not 0 or 1 (or one of its :attr:`flag_values`), or a limit of the kernel broken.

        Example::

            def check_shape(self, shape):
                out = super().check_shape(shape)
                if out["gamma"] > 32:
                    raise InvalidValueError(f"gamma={out['gamma']} is past 32", "draft at most 32 tokens a step")
                return out
        """
        return checks.check_shape_keys(self, shape)

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        """A shape of the same kind small enough to check under the interpreter.

        :param shape: a checked shape, possibly far too big to interpret.
        :param max_elements: the work allowed, :attr:`interpreter_budget`.
        :returns: ``shape`` itself (as a new dict) when it fits, else a smaller one that keeps what the kernel
            specialises on. By default the largest dimension is halved until the product of the dims fits, keeping
            every reduced size odd (ragged against every block).

        Example::

            def reduce_shape(self, shape, max_elements):
                small = super().reduce_shape(shape, max_elements)
                return {**small, "K": 16 * ((small["K"] // 16) | 1)}   # keep K a multiple of 16
        """
        return checks.halve_to_fit(self, shape, max_elements)

    def output_tolerance(self, output: str, dtype: str) -> Tolerance:
        """The error allowed for one named output.

        :param output: a name of :meth:`make_outputs`.
        :param dtype: one of :attr:`dtypes`.
        :returns: by default :meth:`tolerance` for every output.

        Example::

            def output_tolerance(self, output, dtype):
                return Tolerance(1e-5, 0.0) if output == "lse" else self.tolerance(dtype)
        """
        return self.tolerance(dtype)

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """Same-run baselines for speed ratios, timed beside the kernel (only on a GPU).

        :param inputs: what :meth:`make_inputs` returned, on the GPU.
        :param shape: the checked shape of ``inputs``.
        :param dtype: their dtype name.
        :returns: a name -> a callable doing the comparable work on the inputs' device (cuBLAS, SDPA, eager torch,
            a copy of the bytes the kernel must move). Built once (allocations happen here), then called many
            times. None by default.

        Example::

            def baselines(self, inputs, shape, dtype):
                a, b = inputs["a"], inputs["b"]
                return {"torch.matmul (cuBLAS)": lambda: torch.matmul(a, b)}
        """
        return {}

    def quality(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Figures of merit beyond pass/fail, reported beside the check.

        :param inputs: what :meth:`make_inputs` returned.
        :param outputs: the outputs after a launch.
        :returns: a name -> a number (e.g. a lossy kernel's cosine against the exact answer); none by default.

        Example::

            def quality(self, inputs, outputs):
                exact = inputs["x"].double() * 1.5
                return {"max_abs_err": float((outputs["y"].double() - exact).abs().max())}
        """
        return {}

    # --- not part of the contract: helpers iotrace calls on a spec (iotrace.plugins.checks) ---------------
    # A plugin does not override these; they keep their names here so callers write spec.shape_for(...).

    def shape_for(self, preset: str | None = None, shape: Mapping[str, int] | None = None) -> Shape:
        """The shape a command asked for: a named preset, a free shape, or the default, checked."""
        return checks.shape_for(self, preset, shape)

    def check_dtype(self, dtype: str) -> str:
        """``dtype`` when this kernel supports it, else an :class:`iotrace.errors.InvalidValueError`."""
        return checks.check_dtype(self, dtype)

    def check_config(self, config: Mapping[str, Any], shape: Shape, dtype: str, card: Card,
                     backend: str = DEFAULT_BACKEND) -> Config:
        """Refuse a config whose keys or values the space for this shape and card does not hold (see
        :func:`iotrace.plugins.checks.check_config`)."""
        return checks.check_config(self, config, shape, dtype, card, backend)

    def launch(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
               backend: str = DEFAULT_BACKEND) -> None:
        """Run the kernel once inside the NVTX range ``iotrace/<name>``, the config in a nested range.

        Profilers filter on that range (``ncu --nvtx-include``, the nsys timeline report), so every launch
        iotrace makes, for checking, timing or tuning, goes through here.
        """
        checks.launch_in_range(self, inputs, outputs, config, backend)
