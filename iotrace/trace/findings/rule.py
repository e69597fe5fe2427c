"""The :class:`Rule` record: a condition on the data, where its threshold comes from, and the check that draws it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.reports.records import Evidence, Finding, Gain

__all__ = ["Rule", "finding"]


@dataclass(frozen=True)
class Rule:
    """One rule, as Nsight Compute's rules are written: an identifier, the report section it belongs to, its condition
    in words (stated on the data), the public source of its threshold, and the check. A kernel rule's ``check`` takes
    one :class:`KernelFacts` and returns its findings (none where the condition does not hold); a file rule's takes
    the whole selection (:class:`iotrace.trace.findings.launch_rules.FileFacts`), a timeline rule's the trace's
    :class:`iotrace.trace.reports.timeline.Timeline`."""

    id: str
    report: str
    condition: str
    source: str
    check: Callable[[Any], Sequence[Finding]]
    scope: str = "kernel"
    #: Why the rule cannot run on these facts (the data it needs is absent), or None where it can.
    requires: Callable[[Any], str | None] | None = None


def finding(rule: Rule, facts: KernelFacts, text: str, evidence: Sequence[Evidence], try_next: str, *,
            basis: str = "measured", fraction: float | None = None, reasoning: str = "",
            severity: str = "warning") -> Finding:
    """A finding of ``rule`` about the row ``facts``, its gain ``fraction`` × the row's time (None: not bounded)."""
    gain = None if fraction is None else Gain(max(0.0, min(1.0, fraction)), facts.total_ns, reasoning)
    return Finding(rule.report, text, tuple(evidence), try_next, basis, facts.kernel_id,  # type: ignore[arg-type]
                   facts.name, severity, rule.id, gain, facts.share_pct)  # type: ignore[arg-type]
