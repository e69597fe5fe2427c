"""iotrace kernel plugins as cost models for trace kernels: "DRAM bytes are 3.1× what the algorithm needs".

A trace kernel is an iotrace plugin when the caller names the plugin (``--plugin gemm``), or when it ran inside the
plugin's NVTX range ``iotrace/<kernel>`` (``iotrace.nvtx_ranges``). The cost needs the problem shape, which a
trace does not carry; without one the kernel is still known to be the plugin (its stall knobs are named), but no
cost is compared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import Cost

__all__ = ["KernelModel", "PluginMatch", "match_plugins"]

_RANGE = re.compile(r"(?:^|> )iotrace/([A-Za-z0-9_.-]+)")


@dataclass(frozen=True)
class KernelModel:
    """A plugin's cost of one call at one shape: the modelled FLOPs and minimum bytes (for a batched op costed by
    :mod:`~iotrace.trace.reports.op_roofline`, all the calls its batch makes)."""

    plugin: str
    shape: dict[str, int]
    dtype: str
    cost: Cost


@dataclass
class PluginMatch:
    """Which kernels are which plugin, their cost models, and the tuning parameters of each plugin's space."""

    models: dict[int, KernelModel] = field(default_factory=dict)
    plugin_of: dict[int, str] = field(default_factory=dict)
    params: dict[str, frozenset[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def params_of(self, kernel_id: int) -> frozenset[str]:
        name = self.plugin_of.get(kernel_id)
        return self.params.get(name, frozenset()) if name else frozenset()


def _space_keys(spec: object, shape: Mapping[str, int], dtype: str, card: Card | None) -> frozenset[str]:
    from iotrace.cards import lookup
    from iotrace.errors import IotraceError

    try:
        space = spec.space(shape, dtype, card or lookup("h100"))  # type: ignore[attr-defined]
    except IotraceError:
        return frozenset()
    return frozenset(key for config in space[:64] for key in config)


def match_plugins(kernels: pd.DataFrame, card: Card | None, plugin: str | None = None,
                  shape: Mapping[str, int] | None = None, dtype: str | None = None) -> PluginMatch:
    """Map selected kernels to iotrace plugins (named, or found in their NVTX path) and compute their costs.

    :raises PluginError: ``plugin`` names no installed kernel.
    :raises InvalidValueError: the shape or dtype is not one the plugin takes.
    """
    match = PluginMatch()
    wanted: dict[int, str] = {}
    if plugin is not None:
        wanted = {int(k): plugin for k in kernels["id"]}
    else:
        for kid, path in zip(kernels["id"].tolist(), kernels["nvtx_path"].tolist(), strict=True):
            if isinstance(path, str):
                found = _RANGE.search(path)
                if found:
                    wanted[int(kid)] = found.group(1)
    if not wanted:
        if shape is not None:
            match.notes.append("--shape given without --plugin and no kernel ran under an iotrace/<kernel> NVTX "
                               "range: no cost model applied")
        return match
    from iotrace.plugins import kernel as plugin_kernel
    from iotrace.plugins import kernels as installed

    specs = installed() if plugin is None else {plugin: plugin_kernel(plugin)}
    for name in sorted(set(wanted.values())):
        spec = specs.get(name)
        if spec is None:
            match.notes.append(f"kernels ran under iotrace/{name}, which is no installed plugin")
            continue
        chosen_dtype = spec.check_dtype(dtype or spec.dtypes[0])
        checked = spec.check_shape(shape) if shape is not None else None
        match.params[name] = _space_keys(spec, checked or spec.check_shape(spec.default_shape), chosen_dtype, card)
        cost = spec.cost(checked, chosen_dtype) if checked is not None else None
        if cost is None:
            match.notes.append(f"kernels of plugin {name}: give --shape (and --dtype) to compare the counters with "
                               "its cost model")
        for kid, owner in wanted.items():
            if owner != name:
                continue
            match.plugin_of[kid] = name
            if cost is not None and checked is not None:
                match.models[kid] = KernelModel(name, dict(checked), chosen_dtype, cost)
    return match
