"""Conclusions, in one room: the :class:`~iotrace.trace.reports.records.Finding` record, the registry of rules that
draw findings from the reports' figures, and the ranking of findings by the time they can save.

Each rule states its condition on the data, cites where its threshold comes from, and bounds the gain of its advice
(:class:`~iotrace.trace.reports.records.Gain`); :func:`rank` orders the findings of a whole file by that bound in
microseconds. The analyses (:mod:`iotrace.trace.reports`) compute figures and draw no conclusions.
"""

from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.findings.ranking import rank
from iotrace.trace.findings.registry import (
                                             RULES,
                                             FileFacts,
                                             Rule,
                                             TimelineFacts,
                                             evaluate,
                                             evaluate_file,
                                             evaluate_timeline,
)
from iotrace.trace.findings.timeline_rules import floor_bounded

__all__ = ["RULES", "FileFacts", "KernelFacts", "Rule", "TimelineFacts", "evaluate", "evaluate_file",
           "evaluate_timeline", "floor_bounded", "rank"]
