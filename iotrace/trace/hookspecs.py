"""Hook specification of trace formats (pluggy project name ``iotrace``). The docstring is the contract.

A plugin adds a format by returning :class:`iotrace.trace.parser.TraceParser` instances. It reaches iotrace
through the ``iotrace.trace`` entry-point group of an installed package (a group of its own, so loading trace
formats never imports kernel plugins), or by ``iotrace.trace.registry.trace_plugin_manager().register(obj)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.plugin_manager import hookimpl, hookspec

if TYPE_CHECKING:
    from iotrace.trace.parser import TraceParser

__all__ = ["hookimpl", "hookspec", "iotrace_trace_parsers"]  # hookimpl: the one marker, also importable from here

# --- trace formats ----------------------------------------------------------------------------------------


@hookspec
def iotrace_trace_parsers() -> list[TraceParser]:
    """Return the trace formats this plugin reads.

    Parameters: none; iotrace calls the hook without arguments.

    :return: a list (or tuple) of :class:`iotrace.trace.parser.TraceParser` instances, each with a non-empty
        ``name`` unique across all plugins; anything else (another type, an unnamed parser, a name two plugins
        return) is an error naming the plugin (both plugins, for a clash). :func:`iotrace.trace.load` asks them
        in descending ``priority`` (ties in registration order, built-ins first) whether they recognise a
        file's first bytes, and the first that does reads the file.

    Asked on every :func:`iotrace.trace.load`, so a plugin registered later is seen. Use in a plugin module::

        from iotrace.trace.hookspecs import hookimpl  # the same marker as iotrace.plugins.hookimpl
        from iotrace.trace.parser import Head, TraceParser

        class MyFormatParser(TraceParser):
            name, tool, priority = "my-format", "My profiler", 60
            magic = b"MYPROF\\x00"  # or override sniff(head) for a test magic bytes cannot express

            def parse(self, head: Head):
                ...  # read head.path into iotrace.trace.tables.TraceTables

        @hookimpl
        def iotrace_trace_parsers():
            return [MyFormatParser()]
    """
