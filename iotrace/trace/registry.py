"""The trace formats' plugin manager: built-in parsers, ``iotrace.trace`` entry points, and registered objects.

Separate from the kernel plugin manager (``iotrace.plugins``) so reading a trace never imports Triton. Nothing
is registered at import; :func:`trace_plugin_manager` does the work once, when first asked.

Built-in formats are registered lazily: each is a plugin (named by its module) returning a :class:`BuiltinParser`
that sniffs with the light functions in ``iotrace.trace.formats._sniff`` and imports its format's module only to
parse, so reading a Kineto trace does not import (or, without bytecode caches, compile) the Nsight readers.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from typing import TYPE_CHECKING

import pluggy

from iotrace.errors import PluginError
from iotrace.trace import hookspecs
from iotrace.trace.formats import _sniff
from iotrace.trace.hookspecs import hookimpl
from iotrace.trace.parser import Head, TraceParser

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

__all__ = ["BUILTINS", "BUILTIN_FORMATS", "ENTRY_POINT_GROUP", "BuiltinParser", "parsers", "trace_plugin_manager"]

#: Modules shipped with iotrace that register trace formats: module -> (parser class, name, tool, priority, sniffer
#: in ``iotrace.trace.formats._sniff``). Name, tool and priority repeat the class's; :meth:`BuiltinParser.parse`
#: checks that they agree.
BUILTINS: dict[str, tuple[str, str, str, int, str]] = {
    "iotrace.trace.formats.ncu_rep": ("NcuRepParser", "ncu-rep", "Nsight Compute", 100, "ncu_rep"),
    "iotrace.trace.formats.nsys_rep": ("NsysRepParser", "nsys-rep", "Nsight Systems", 100, "nsys_rep"),
    "iotrace.trace.formats.nsys_sqlite": ("NsysSqliteParser", "nsys-sqlite", "Nsight Systems", 100, "nsys_sqlite"),
    "iotrace.trace.formats.kineto": ("KinetoParser", "kineto-json", "PyTorch profiler (Kineto)", 10, "kineto"),
    "iotrace.trace.formats.ncu_csv": ("NcuCsvParser", "ncu-csv", "Nsight Compute", 50, "ncu_csv"),
    "iotrace.trace.formats.nvprof_csv": ("NvprofCsvParser", "nvprof-csv", "nvprof", 45, "nvprof_csv"),
    "iotrace.trace.formats.nsys_stats_csv": ("NsysStatsCsvParser", "nsys-stats-csv", "Nsight Systems (nsys stats)", 40,
                                             "nsys_stats_csv"),
}
BUILTIN_FORMATS = tuple(BUILTINS)
ENTRY_POINT_GROUP = "iotrace.trace"
#: Shared with the kernel plugins: set to 1 to skip installed entry points.
ENV_NO_AUTOLOAD = "IOTRACE_DISABLE_PLUGIN_AUTOLOAD"


class BuiltinParser(TraceParser):
    """A built-in format: sniffs without importing its module, which it imports (once) to parse."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.class_name, self.name, self.tool, self.priority, sniffer = BUILTINS[module]
        self._sniff = getattr(_sniff, sniffer)
        self._parser: TraceParser | None = None

    def sniff(self, head: Head) -> bool:
        return self._sniff(head)

    def parse(self, head: Head) -> TraceTables:
        return self.parser().parse(head)

    def parser(self) -> TraceParser:
        """The format module's own parser instance (imported on first use)."""
        if self._parser is None:
            parser = getattr(importlib.import_module(self.module), self.class_name)()
            if (parser.name, parser.tool, parser.priority) != (self.name, self.tool, self.priority):
                raise PluginError(f"built-in trace format {self.module} says {parser.name!r}, {parser.tool!r}, "
                                  f"priority {parser.priority}; the registry lists {self.name!r}, {self.tool!r}, "
                                  f"priority {self.priority}", "make iotrace/trace/registry.py BUILTINS agree")
            self._parser = parser
        return self._parser

    def __repr__(self) -> str:
        return f"BuiltinParser({self.module!r})"


class _BuiltinPlugin:
    """The plugin object of one built-in format module, registered under the module's name."""

    def __init__(self, module: str) -> None:
        self.__name__ = module
        self._parsers = [BuiltinParser(module)]

    @hookimpl
    def iotrace_trace_parsers(self) -> list[TraceParser]:
        return list(self._parsers)


@cache
def trace_plugin_manager() -> pluggy.PluginManager:
    """The process-wide trace plugin manager, validated: every hook implementation matches the spec."""
    pm = pluggy.PluginManager("iotrace")
    pm.add_hookspecs(hookspecs)
    try:
        for name in BUILTIN_FORMATS:
            pm.register(_BuiltinPlugin(name), name=name)
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
