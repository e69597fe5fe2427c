"""iotrace: GPU inference kernels and profiler traces as FLOPs, bytes and occupancy on a named card.

Importing iotrace imports nothing heavy (no torch, pandas or plotly); each submodule pulls in what it needs.
Start with ``iotrace.cards`` (the CardBook), ``iotrace.identities`` (the six identities) and
``iotrace.occupancy`` (the exact occupancy calculator).
"""

from iotrace.errors import IotraceError

__all__ = ["IotraceError", "__version__"]

__version__ = "0.1.0"
