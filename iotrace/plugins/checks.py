"""Helpers iotrace runs on a kernel plugin's behalf; not part of the contract a plugin author implements.

:class:`iotrace.plugins.spec.KernelSpec` keeps a method of the same name for each (``spec.check_shape(...)``,
``spec.shape_for(...)``, ``spec.check_dtype(...)``, ``spec.check_config(...)``, ``spec.launch(...)``), which calls
the function here; a plugin overrides ``check_shape`` or ``reduce_shape`` only to add its own rules.

This module imports nothing heavy: kernel files import torch and Triton themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from iotrace.errors import InvalidValueError

if TYPE_CHECKING:
    import torch

    from iotrace.cards import Card

__all__ = ["SpecFields", "check_backend", "check_config", "check_dtype", "check_shape_keys", "compiled_on_first_call",
           "halve_to_fit", "launch_in_range", "requested_shape", "shape_for"]

# The shapes of iotrace.plugins.spec.Shape and .Config, spelled out: spec.py imports this module, not the reverse.
Shape = dict[str, int]
Config = dict[str, Any]


class SpecFields(Protocol):
    """What these helpers read of a kernel spec; every :class:`~iotrace.plugins.spec.KernelSpec` has all of it."""

    name: str
    backends: tuple[str, ...]
    dtypes: tuple[str, ...]
    shape_keys: tuple[str, ...]
    shape_flags: tuple[str, ...]
    flag_values: Mapping[str, tuple[int, ...]]
    default_shape: Mapping[str, int]
    presets: Mapping[str, Mapping[str, int]]
    extra_config_values: Mapping[str, Any]

    def check_shape(self, shape: Mapping[str, int]) -> Shape: ...

    def space(self, shape: Shape, dtype: str, card: Card, backend: str) -> list[Config]: ...

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str) -> None: ...


def check_shape_keys(spec: SpecFields, shape: Mapping[str, int]) -> Shape:
    """``shape`` with its flags defaulted to 0, once every key of ``spec.shape_keys`` is present, no other key is,
    each dimension is a whole number >= 1 and each flag is 0 or 1 (or one of its ``flag_values``).

    :raises InvalidValueError: naming the key at fault and a shape that would do.
    """
    shape = {**dict.fromkeys(spec.shape_flags, 0), **shape}
    missing = [k for k in spec.shape_keys if k not in shape]
    extra = [k for k in shape if k not in spec.shape_keys]
    if missing or extra:
        raise InvalidValueError(
            f"shape {dict(shape)} for {spec.name} " + (f"lacks {', '.join(missing)}" if missing else
                                                      f"has unknown keys {', '.join(extra)}"),
            f"give {', '.join(spec.shape_keys)}, e.g. --shape " + ",".join(
                f"{k}={v}" for k, v in spec.default_shape.items()))
    out = {}
    for key in spec.shape_keys:
        value = shape[key]
        if key in spec.shape_flags:
            allowed = spec.flag_values.get(key, (0, 1))
            if value not in allowed or isinstance(value, bool):
                raise InvalidValueError(f"{spec.name} shape {key}={value!r} must be one of "
                                        f"{', '.join(map(str, allowed))}", f"{key}=1 turns it on" if
                                        allowed == (0, 1) else f"see `iotrace kernels` for what {key} means")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidValueError(f"{spec.name} shape {key}={value!r} must be a whole number >= 1",
                                    f"e.g. {key}={spec.default_shape.get(key, 128)}")
        out[key] = value
    return out


def requested_shape(spec: SpecFields, preset: str | None = None,
                    shape: Mapping[str, int] | None = None) -> Mapping[str, int]:
    """The shape a command asked for, not yet checked: a named preset, a free shape, or the default.

    :raises InvalidValueError: an unknown preset, listing the kernel's.
    """
    if preset is not None:
        if preset not in spec.presets:
            raise InvalidValueError(f"{spec.name} has no preset {preset!r}",
                                    f"its presets are {', '.join(spec.presets)}")
        return spec.presets[preset]
    return shape if shape is not None else spec.default_shape


def shape_for(spec: SpecFields, preset: str | None = None, shape: Mapping[str, int] | None = None) -> Shape:
    """The shape a command asked for (:func:`requested_shape`), checked by ``spec.check_shape``."""
    return spec.check_shape(requested_shape(spec, preset, shape))


def check_backend(spec: SpecFields, backend: str) -> str:
    """``backend`` itself when ``spec`` has it.

    :raises InvalidValueError: listing the backends it does have.
    """
    if backend not in spec.backends:
        raise InvalidValueError(f"{spec.name} has no {backend!r} backend", f"use one of {', '.join(spec.backends)}")
    return backend


def halve_to_fit(spec: SpecFields, shape: Shape, max_elements: int) -> Shape:
    """Halve the largest dimension of ``shape`` until the product of its dims fits ``max_elements``, keeping every
    reduced size odd (ragged against every block); flags are kept as they are."""
    dims = {k: v for k, v in shape.items() if k not in spec.shape_flags}
    if math.prod(dims.values()) <= max_elements:
        return dict(shape)
    while math.prod(dims.values()) > max_elements and max(dims.values()) > 1:
        key = max(dims, key=dims.__getitem__)
        dims[key] = max(1, (dims[key] // 2) | 1)
    return {**shape, **dims}


def check_dtype(spec: SpecFields, dtype: str) -> str:
    """``dtype`` itself when ``spec`` supports it.

    :raises InvalidValueError: listing the dtypes it does support.
    """
    if dtype not in spec.dtypes:
        raise InvalidValueError(f"{spec.name} does not support dtype {dtype!r}",
                                f"use one of {', '.join(spec.dtypes)}")
    return dtype


def check_config(spec: SpecFields, config: Mapping[str, Any], shape: Shape, dtype: str, card: Card,
                 backend: str) -> Config:
    """Refuse a config whose keys or values the space for this shape and card does not hold.

    Every value must appear for its key somewhere in ``spec.space`` (or in ``spec.extra_config_values``): that keeps
    out block sizes the kernel cannot tile, tensor-memory features the card lacks and misaligned TMA. A switch (a
    key whose values are all bools) also takes 0 or 1, as the command line writes it.

    :returns: the config with switches as bools.
    :raises InvalidValueError: naming the parameter or value at fault and the values allowed.
    """
    allowed: dict[str, set[Any]] = {}
    for candidate in spec.space(shape, dtype, card, backend):
        for key, value in candidate.items():
            allowed.setdefault(key, set()).add(value)
    for key, values in spec.extra_config_values.items():
        allowed.setdefault(key, set()).update(values)
    unknown = [k for k in config if k not in allowed]
    if unknown:
        raise InvalidValueError(f"{spec.name} has no tuning parameter {', '.join(unknown)}",
                                f"its parameters are {', '.join(allowed)}")
    checked = {}
    for key, value in config.items():
        switch = all(isinstance(v, bool) for v in allowed[key])
        if switch and not isinstance(value, bool) and value in (0, 1):
            value = bool(value)  # USE_TMA=1 on the command line means True
        if value not in allowed[key] or isinstance(value, bool) != switch:
            options = ", ".join(str(v) for v in sorted(allowed[key], key=lambda v: (str(type(v)), v)))
            raise InvalidValueError(f"{spec.name} {key}={value!r} is not valid for this shape on {card.name}",
                                    f"use one of {options}")
        checked[key] = value
    return checked


def launch_in_range(spec: SpecFields, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor],
                    config: Config, backend: str) -> None:
    """``spec.launch_kernel`` inside the NVTX range ``iotrace/<name>``, the config in a nested range.

    Profilers filter on that range (``ncu --nvtx-include``, the nsys timeline report), so every launch iotrace
    makes, for checking, timing or tuning, goes through here.
    """
    from iotrace.nvtx_ranges import kernel_range

    with kernel_range(spec.name, config):
        spec.launch_kernel(inputs, outputs, config, backend)


def compiled_on_first_call(fn: Callable[[], object]) -> Callable[[], object]:
    """A baseline that runs ``torch.compile(fn)``, compiled when first called: torch.compile imports dynamo (seconds),
    so a spec builds it in ``baselines`` at no cost until the baseline is timed."""
    compiled: list[Callable[[], object]] = []

    def call() -> object:
        if not compiled:
            import torch

            compiled.append(torch.compile(fn))
        return compiled[0]()

    return call

