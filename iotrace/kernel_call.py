"""One kernel call as one value: which kernel, at which shape and dtype, on which card, through which backend.

A :class:`KernelCall` is validated once, where it is made: the shape is the kernel's own (every key checked, defaults
filled in), the dtype and backend are ones the kernel has; :meth:`KernelCall.make` also resolves a preset, the default
dtype and the card. The runner, the tuner, a
profiled run's plan and manifest, and a run's result carry it instead of five loose values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iotrace.plugins import checks
from iotrace.plugins.spec import DEFAULT_BACKEND

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import KernelSpec, Shape

__all__ = ["CallFields", "KernelCall"]


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
