"""One kernel call as one value: which kernel, at which shape and dtype, on which card, through which backend.

A :class:`KernelCall` is validated once, where it is made: the shape is the kernel's own (every key checked, defaults
filled in), the dtype and backend are ones the kernel has, and its operands fit in the card's memory;
:meth:`KernelCall.make` also resolves a preset, the default dtype and the card. The runner, the tuner, a
profiled run's plan and manifest, and a run's result carry it instead of five loose values.
:meth:`KernelCall.check_launch` checks a config's launches against CUDA's grid and block limits before anything is
compiled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iotrace.plugins import checks
from iotrace.plugins.spec import DEFAULT_BACKEND

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import KernelSpec, Shape

__all__ = ["MAX_BLOCKS", "CallFields", "KernelCall"]

#: CUDA's largest grid, in blocks along x, y and z: 2^31 - 1 along x, 65535 along y and z, the same for every compute
#: capability since 3.0 (CUDA C++ Programming Guide, "Compute Capabilities", Table "Technical Specifications per
#: Compute Capability": "Maximum x-dimension of a grid of thread blocks", "Maximum y- or z-dimension ...").
MAX_BLOCKS = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class KernelCall:
    """``spec`` at ``shape`` and ``dtype`` on ``card`` through ``backend``; make it with :meth:`make`."""

    spec: KernelSpec
    shape: Shape
    dtype: str
    card: Card
    backend: str = DEFAULT_BACKEND

    def __post_init__(self) -> None:
        # Validated here, once: every holder of a call can trust its shape, dtype and backend.
        spec = self.spec
        checks.check_backend(spec, self.backend)
        object.__setattr__(self, "shape", spec.check_shape(self.shape))
        spec.check_dtype(self.dtype)
        self._check_memory()

    def _check_memory(self) -> None:
        """Refuse a shape whose operands cannot all be in the card's memory at once.

        The cost model's bytes are the minimum traffic: each input read once, each output written once. A run holds
        its inputs and outputs apart (``make_inputs``, ``make_outputs``), so it allocates at least that many bytes
        (more where a kernel reads only part of an input). Checked here, for every kernel and every command that
        makes a call, so a shape no card can hold is never reported "correct" on the reduced shape the interpreter
        checks, nor compiled.
        """
        needed = self.spec.cost(self.shape, self.dtype).bytes
        memory = self.card.memory_bytes
        if needed > memory:
            from iotrace.derivations import num
            from iotrace.errors import InvalidValueError

            shape = ",".join(f"{k}={v}" for k, v in self.shape.items())
            raise InvalidValueError(
                f"{self.spec.name} at {shape} ({self.dtype}) needs {num(needed)} B of operands in device memory, more "
                f"than the {num(memory)} B ({self.card.memory_gb:g} GiB) of {self.card.name}",
                "give a smaller shape (the bytes are the kernel's cost model: "
                f"{self.spec.cost(self.shape, self.dtype).formula.split('; ')[-1]})")

    def check_launch(self, config: Mapping[str, Any], units: Sequence[Any] | None = None) -> None:
        """Refuse ``config`` when a launch of it cannot start on any NVIDIA GPU: a grid over CUDA's limits
        (:data:`MAX_BLOCKS`) or a block over the card's threads per block. Reads the launches the kernel states for
        the compiler (``compile_units``: tensors on the meta device, nothing allocated or compiled; ``units`` where
        the caller has built them already), so it costs milliseconds and runs before the compile.

        :raises InvalidValueError: naming the launch, the dimension, its size and the limit.
        """
        from iotrace.errors import InvalidValueError

        if units is None:
            units = self.spec.compile_units(self.shape, self.dtype, dict(config), self.backend)
        for unit in units:
            name = getattr(unit, "function", None) or getattr(unit, "kernel", self.spec.name)
            for axis, blocks, limit in zip("xyz", unit.grid, MAX_BLOCKS, strict=True):
                if blocks > limit:
                    raise InvalidValueError(
                        f"{self.spec.name}: {name}'s grid {' × '.join(map(str, unit.grid))} has {blocks} blocks along "
                        f"{axis}, over CUDA's limit of {limit} (2^31 - 1 along x, 65535 along y and z)",
                        "give a smaller shape, or larger tiles (BLOCK_* in --config)")
            threads = unit.threads_per_block
            if threads > self.card.sm_limits.max_threads_per_block:
                raise InvalidValueError(
                    f"{self.spec.name}: {name} launches {threads} threads per block, over the "
                    f"{self.card.sm_limits.max_threads_per_block} of CC {self.card.cc}",
                    "use fewer warps (num_warps in --config)")

    @classmethod
    def make(cls, spec: KernelSpec, shape: Mapping[str, int] | None = None, dtype: str | None = None,
             card: Card | str | None = None, backend: str = DEFAULT_BACKEND, *,
             preset: str | None = None) -> KernelCall:
        """Validate and resolve: ``preset`` or ``shape`` (neither: the kernel's default shape), ``dtype`` (None: the
        kernel's first), ``card`` (a Card, a CardBook name, or None: ``$IOTRACE_CARD``, then the local GPU).

        >>> from iotrace.plugins import kernel
        >>> KernelCall.make(kernel("rmsnorm"), card="h100").dtype
        'fp16'

        :raises InvalidValueError: an unknown backend, shape key, preset or dtype, with what the kernel takes.
        """
        from iotrace.cards import Card as CardType
        from iotrace.cards import detect

        checks.check_backend(spec, backend)  # before the card: a wrong backend or preset is the first thing to say
        chosen = checks.requested_shape(spec, preset, shape)  # checked once, in __post_init__
        resolved_card = card if isinstance(card, CardType) else detect(card)
        return cls(spec, chosen, dtype or spec.dtypes[0], resolved_card, backend)

    @property
    def kernel(self) -> str:
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as manifests and results record it."""
        return {"kernel": self.spec.name, "backend": self.backend, "shape": dict(self.shape), "dtype": self.dtype,
                "card": self.card.key}


class CallFields:
    """``kernel``, ``backend``, ``shape`` and ``dtype`` of a record that holds a ``call`` (a run's result, a tune's
    result, a profiled run's plan and manifest), read from the call rather than restated."""

    call: KernelCall

    @property
    def kernel(self) -> str:
        return self.call.spec.name

    @property
    def backend(self) -> str:
        return self.call.backend

    @property
    def shape(self) -> Shape:
        return self.call.shape

    @property
    def dtype(self) -> str:
        return self.call.dtype
