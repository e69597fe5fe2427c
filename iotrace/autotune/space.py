"""The space a tune searches: the kernel's configs for one shape, dtype and card, optionally narrowed.

Configs are plain dicts; :func:`config_key` gives each one canonical text (sorted keys, JSON) so the cache, the
recorded sweeps and the exported best configs name a config the same way whatever order its keys were built in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from iotrace.errors import InvalidValueError, IotraceError
from iotrace.tuned import shape_bucket

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import Config, KernelSpec, Shape

__all__ = ["EmptySpaceError", "config_key", "kernel_space", "neighbours", "shape_bucket", "shape_text"]


class EmptySpaceError(IotraceError):
    """A tune with nothing to search: the kernel offers no config, or ``--fix`` removed every one."""


def config_key(config: Mapping[str, Any]) -> str:
    """The canonical text of a config: ``{"BLOCK_M": 64, ...}`` with sorted keys and no spaces."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def shape_text(shape: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def kernel_space(spec: KernelSpec, shape: Shape, dtype: str, card: Card, backend: str = "triton",
                 fix: Mapping[str, Any] | None = None) -> list[Config]:
    """The kernel's configs for this shape on ``card``, keeping only those that match every ``fix`` value.

    ``fix`` narrows a big space to a slice (``BLOCK_K=64,num_stages=3``): each key must be a tuning parameter and
    each value one the space holds, or the message lists what it does hold. A list or tuple keeps any of its values
    (``{"num_stages": (3, 4)}``).
    """
    configs = list(spec.space(shape, dtype, card, backend))
    if not configs:
        raise EmptySpaceError(f"{spec.name} offers no config for {shape_text(shape)} {dtype} on {card.name}",
                              "try another shape or dtype; the kernel's space() returned an empty list")
    for key, value in (fix or {}).items():
        held = sorted({c[key] for c in configs if key in c}, key=lambda v: (str(type(v)), v))
        if not held:
            params = sorted({k for c in configs for k in c})
            raise InvalidValueError(f"--fix {key}={value!r}: {spec.name} has no tuning parameter {key}",
                                    f"its parameters are {', '.join(params)}")
        switch = all(isinstance(v, bool) for v in held)
        wanted = [bool(v) if switch and v in (0, 1) else v for v in (value if isinstance(value, (list, tuple))
                                                                      else [value])]
        configs = [c for c in configs if c.get(key) in wanted and isinstance(c.get(key), bool) == switch]
        if not configs:
            raise EmptySpaceError(f"--fix {key}={value!r} leaves no {spec.name} config for {shape_text(shape)} on "
                                  f"{card.name}", f"{key} takes {', '.join(str(v) for v in held)} here")
    return configs


def neighbours(configs: list[Config], index: int) -> list[int]:
    """Configs one step away from ``configs[index]``: one parameter moved to the next or previous value it takes
    in the space, every other parameter equal. The local search of the model-guided strategy walks these."""
    here = configs[index]
    values: dict[str, list[Any]] = {}
    for config in configs:
        for key, value in config.items():
            if value not in values.setdefault(key, []):
                values[key].append(value)
    for key in values:
        values[key].sort(key=lambda v: (str(type(v)), v))
    by_key = {config_key(c): i for i, c in enumerate(configs)}
    found = []
    for key, options in values.items():
        position = options.index(here[key])
        for step in (-1, 1):
            if 0 <= position + step < len(options):
                moved = config_key({**here, key: options[position + step]})
                if moved in by_key:
                    found.append(by_key[moved])
    return found
