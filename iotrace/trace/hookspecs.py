"""Hook specification of trace formats (pluggy project name ``iotrace``). The docstring is the contract.

A plugin adds a format by returning :class:`iotrace.trace.parser.TraceParser` instances. It reaches iotrace
through the ``iotrace.trace`` entry-point group of an installed package (a group of its own, so loading trace
formats never imports kernel plugins), or by ``iotrace.trace.registry.trace_plugin_manager().register(obj)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from iotrace.trace.parser import TraceParser

hookspec = pluggy.HookspecMarker("iotrace")
hookimpl = pluggy.HookimplMarker("iotrace")

# --- trace formats ----------------------------------------------------------------------------------------


@hookspec
def iotrace_trace_parsers() -> list[TraceParser]:
    """Return the trace formats this plugin reads.

    :return: a list of :class:`iotrace.trace.parser.TraceParser` instances; each ``name`` must be unique across
        all plugins (a clash is an error naming both plugins). :func:`iotrace.trace.load` asks them in
        descending ``priority`` whether they recognise a file's first bytes.

    Use in a plugin module::

        from iotrace.trace.hookspecs import hookimpl

        @hookimpl
        def iotrace_trace_parsers():
            return [MyFormatParser()]
    """
