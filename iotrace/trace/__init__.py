"""Trace-side helpers. Importing this package imports nothing heavy."""

# The public API, imported lazily so `import iotrace.trace` stays light (pandas loads on first use).
__all__ = ["RankSet", "TraceFormatError", "TraceTables", "TraceToolError", "load", "load_ranks"]

from iotrace.trace.errors import TraceFormatError, TraceToolError


def __getattr__(name: str):
    if name == "load":
        from iotrace.trace.loader import load

        return load
    if name in ("load_ranks", "RankSet"):
        from iotrace.trace import ranks

        return getattr(ranks, name)
    if name == "TraceTables":
        from iotrace.trace.tables import TraceTables

        return TraceTables
    raise AttributeError(f"module 'iotrace.trace' has no attribute {name!r}")
