"""The trace formats' plugin manager: built-in parsers, ``iotrace.trace`` entry points, and registered objects.

Separate from the kernel plugin manager (``iotrace.plugins``) so reading a trace never imports Triton. Nothing
is registered at import; :func:`trace_plugin_manager` does the work once, when first asked.
"""

from __future__ import annotations

import importlib
import os
from functools import cache

import pluggy

from iotrace.errors import PluginError
from iotrace.trace import hookspecs
from iotrace.trace.parser import TraceParser

__all__ = ["BUILTIN_FORMATS", "ENTRY_POINT_GROUP", "parsers", "trace_plugin_manager"]

#: Modules shipped with iotrace that register trace formats.
BUILTIN_FORMATS = (
    "iotrace.trace.formats.ncu_rep", "iotrace.trace.formats.nsys_rep", "iotrace.trace.formats.nsys_sqlite",
    "iotrace.trace.formats.kineto", "iotrace.trace.formats.ncu_csv", "iotrace.trace.formats.nvprof_csv",
    "iotrace.trace.formats.nsys_stats_csv",
)
ENTRY_POINT_GROUP = "iotrace.trace"
#: Shared with the kernel plugins: set to 1 to skip installed entry points.
ENV_NO_AUTOLOAD = "IOTRACE_DISABLE_PLUGIN_AUTOLOAD"


@cache
def trace_plugin_manager() -> pluggy.PluginManager:
    """The process-wide trace plugin manager, validated: every hook implementation matches the spec."""
    pm = pluggy.PluginManager("iotrace")
    pm.add_hookspecs(hookspecs)
    try:
        for name in BUILTIN_FORMATS:
            pm.register(importlib.import_module(name), name=name)
        if os.environ.get(ENV_NO_AUTOLOAD) != "1":
            try:
                pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            except ImportError as exc:
                raise PluginError(f"an installed iotrace trace-format plugin cannot be imported: {exc}",
                                  f"reinstall or remove it, or set {ENV_NO_AUTOLOAD}=1") from exc
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = getattr(exc.plugin, "__name__", repr(exc.plugin))
        detail = " ".join(str(exc).split())
        raise PluginError(f"trace plugin {name!r} does not match iotrace's trace hook spec: {detail}",
                          "see iotrace/trace/hookspecs.py for the contract") from exc
    return pm


def parsers() -> list[TraceParser]:
    """Every registered trace parser, highest priority first (asked again each call: plugins may be added)."""
    pm = trace_plugin_manager()
    found: dict[str, TraceParser] = {}
    owner: dict[str, str] = {}
    for impl in pm.hook.iotrace_trace_parsers.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)
        given = impl.function()
        if not isinstance(given, (list, tuple)):
            raise PluginError(f"trace plugin {plugin_name!r}: iotrace_trace_parsers returned {type(given).__name__}",
                              "return a list of TraceParser instances")
        for parser in given:
            if not isinstance(parser, TraceParser) or not parser.name:
                raise PluginError(f"trace plugin {plugin_name!r} returned {parser!r}, not a named TraceParser",
                                  "derive from iotrace.trace.parser.TraceParser and set `name`")
            if parser.name in found:
                raise PluginError(f"trace format {parser.name!r} is provided by both {owner[parser.name]!r} and "
                                  f"{plugin_name!r}", "rename one")
            found[parser.name], owner[parser.name] = parser, plugin_name
    return sorted(found.values(), key=lambda p: -p.priority)
