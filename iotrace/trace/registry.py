"""The trace formats' plugin manager: built-in parsers, ``iotrace.trace`` entry points, and registered objects.

Separate from the kernel plugin manager (``iotrace.plugins``) so reading a trace never imports Triton; both are
built by :mod:`iotrace.plugin_manager`. Nothing is registered at import; :func:`trace_plugin_manager` does the
work once, when first asked.

Built-in formats are registered lazily: each is a plugin (named by its module) returning a :class:`BuiltinParser`
that sniffs with its format's declaration in ``iotrace.trace.formats._sniff`` and imports the format's module only
to parse, so reading a Kineto trace does not import (or, without bytecode caches, compile) the Nsight readers.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

import pluggy

from iotrace.plugin_manager import ENV_NO_AUTOLOAD, build, collect, hookimpl
from iotrace.trace import hookspecs
from iotrace.trace.formats import _sniff
from iotrace.trace.parser import Head, TraceParser

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

__all__ = ["BUILTINS", "BUILTIN_FORMATS", "ENTRY_POINT_GROUP", "ENV_NO_AUTOLOAD", "BuiltinParser", "parsers",
           "trace_plugin_manager"]

#: Modules shipped with iotrace that register trace formats: module -> its format's declaration (name, tool,
#: priority, sniff), in registration order, which breaks ties of priority.
BUILTINS: dict[str, type[_sniff.BuiltinFormat]] = {
    fmt.implementation.partition(":")[0]: fmt for fmt in _sniff.BUILTIN_FORMATS}
BUILTIN_FORMATS = tuple(BUILTINS)
ENTRY_POINT_GROUP = "iotrace.trace"


class BuiltinParser(TraceParser):
    """A built-in format: sniffs without importing its module, which it imports (once) to parse."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.declaration = BUILTINS[module]()
        # The declaration's metadata, on the instance (as before) so a reader of this parser sees the format's.
        self.name, self.tool, self.priority = self.declaration.name, self.declaration.tool, self.declaration.priority
        self._parser: TraceParser | None = None

    def sniff(self, head: Head) -> bool:
        return self.declaration.sniff(head)

    def parse(self, head: Head) -> TraceTables:
        return self.parser().parse(head)

    def parser(self) -> TraceParser:
        """The format module's own parser instance (imported on first use)."""
        if self._parser is None:
            module, _, class_name = self.declaration.implementation.partition(":")
            self._parser = getattr(importlib.import_module(module), class_name)()
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
    return build(hookspecs, ((name, _BuiltinPlugin(name)) for name in BUILTIN_FORMATS), ENTRY_POINT_GROUP,
                 what="trace plugin", installed="trace-format plugin", contract="iotrace's trace hook spec",
                 contract_file="iotrace/trace/hookspecs.py")


def parsers() -> list[TraceParser]:
    """Every registered trace parser, highest priority first (asked again each call: plugins may be added)."""
    found = collect(trace_plugin_manager(), "iotrace_trace_parsers", TraceParser, what="trace plugin",
                    noun="trace format")
    return sorted(found.values(), key=lambda p: -p.priority)
