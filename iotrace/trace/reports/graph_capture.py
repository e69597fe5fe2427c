"""A trace recorded while an engine captured CUDA (or HIP) graphs: a warm-up, not a workload.

While a stream captures, its launches are recorded into a graph, not run (CUDA Programming Guide, "CUDA Graphs:
Creating a Graph Using Stream Capture"): the trace shows launch calls whose kernels barely run, and the launch-bound
stretches they make are the capture itself. vLLM and SGLang capture one graph per batch size at start-up (vLLM names
each capture's range by its size and mode, e.g. ``capture_8192_PIECEWISE``). So such a trace is said to be one, and
advice to "capture the stretch as a graph" is never given on it.

The signs, any of which is enough: a call that begins or ends a capture or instantiates a graph
(``cudaStreamBeginCapture``/``EndCapture``, ``cudaGraphInstantiate``, their ``cu*`` driver and ``hip*`` forms), or a
range named as vLLM names a capture. ``cudaStreamGetCaptureInfo`` and ``cudaStreamIsCapturing`` are not signs: NCCL
and PyTorch ask them on ordinary streams (the corpus's NCCL, V100 and vLLM H100 traces call them, none captures).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

__all__ = ["CAPTURE_CALLS", "capture_run"]

#: API calls that only a capture makes (CUDA Runtime API, "Graph Management" and "Stream Management"; HIP's the same).
CAPTURE_CALLS = re.compile(r"^(?:cuda|cu|hip)(?:StreamBeginCapture|StreamEndCapture|GraphInstantiate)\w*$")
#: vLLM's capture range names (the size captured and the graph mode).
CAPTURE_RANGE = re.compile(r"^capture_\d+_(?:PIECEWISE|FULL|FULL_AND_PIECEWISE|FULL_DECODE_ONLY)$")


def capture_run(tables: TraceTables) -> str | None:
    """One line saying the trace records graph captures (how many calls and ranges show it), or None."""
    calls = [str(n) for n in tables.column("api_calls", "name").tolist()] if tables.rows("api_calls") else []
    begins = sum(1 for n in calls if CAPTURE_CALLS.match(n) and "Begin" in n)
    instantiated = sum(1 for n in calls if CAPTURE_CALLS.match(n) and "Instantiate" in n)
    names = [str(n) for n in tables.column("ranges", "name").tolist()] if tables.rows("ranges") else []
    ranges = sorted({n for n in names if CAPTURE_RANGE.match(n)})
    if not (begins or instantiated or ranges):
        return None
    signs = [f"{begins} stream capture(s) begun" if begins else "", f"{instantiated} graph(s) instantiated"
             if instantiated else "", f"capture ranges {', '.join(ranges[:3])}{' …' if len(ranges) > 3 else ''}"
             if ranges else ""]
    return (f"this trace records CUDA graph capture ({'; '.join(s for s in signs if s)}): a warm-up, not a "
            "workload — captured launches are recorded, not run, so their stretches are not launch overhead to "
            "remove; profile the replays after start-up to see the engine's steps")
