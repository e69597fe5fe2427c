"""Reports on TraceTables: warp stalls, hierarchical roofline, occupancy, timeline and diff — tables plus findings.

Public API (imported lazily, so ``import iotrace.trace.reports`` loads no pandas)::

    from iotrace.trace import load
    from iotrace.trace.reports import build_report, diff_reports

    report = build_report(load("kernel.ncu-rep"), kernel="gemm", card="a10g")
    report.to_dict()          # the JSON of `iotrace report --json`
    report.stalls             # long tables: stalls, occupancy, roofline (one row per kernel and level)
    report.findings           # plain sentences with evidence and what to try

One analysis per module: ``stalls``, ``roofline``, ``occupancy``, ``timeline``, ``diff``; ``report`` assembles them
and ``iotrace.trace.render`` draws them.
"""

from typing import Any

__all__ = ["Diff", "Finding", "KernelReport", "Report", "Unavailable", "build_report", "diff_reports"]

_WHERE = {"Diff": "diff", "diff_reports": "diff", "Finding": "records", "Unavailable": "records",
          "KernelReport": "report", "Report": "report", "build_report": "report"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'iotrace.trace.reports' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"iotrace.trace.reports.{module}"), name)
