"""Every rule iotrace draws conclusions with, in one registry, and the function that applies them."""

from __future__ import annotations

from collections.abc import Iterable

from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.findings.kernel_rules import KERNEL_RULES
from iotrace.trace.findings.launch_rules import FILE_RULES, LAUNCH_RULES, FileFacts
from iotrace.trace.findings.rule import Rule
from iotrace.trace.findings.timeline_rules import TIMELINE_RULES, TimelineFacts
from iotrace.trace.reports.records import Finding

__all__ = ["RULES", "FileFacts", "Rule", "TimelineFacts", "evaluate", "evaluate_file", "evaluate_timeline", "rule"]

#: Kernel rules first, in the order a person reads them (verdict, launch checks, its causes), then the file's and
#: the timeline's.
RULES: tuple[Rule, ...] = (*KERNEL_RULES[:1], *LAUNCH_RULES, *KERNEL_RULES[1:], *FILE_RULES, *TIMELINE_RULES)


def rule(rule_id: str) -> Rule:
    """The registered rule of that id (KeyError names the known ones)."""
    for r in RULES:
        if r.id == rule_id:
            return r
    raise KeyError(f"no rule {rule_id!r}; the rules are {', '.join(r.id for r in RULES)}")


def evaluate(facts: KernelFacts) -> list[Finding]:
    """Every kernel rule's findings on one row; a row that was not profiled gets none (the file rule names it)."""
    if not facts.profiled:
        return []
    return [f for r in RULES if r.scope == "kernel" for f in r.check(facts)]


def evaluate_file(facts: FileFacts) -> list[Finding]:
    return [f for r in RULES if r.scope == "file" for f in r.check(facts)]


def evaluate_timeline(facts: TimelineFacts) -> tuple[list[Finding], list[str]]:
    """The timeline rules' findings, and one line for each rule that could not run (which data it lacks)."""
    findings: list[Finding] = []
    not_run: dict[str, list[str]] = {}  # reason -> the rules it stopped, so each reason is said once
    for r in RULES:
        if r.scope != "timeline":
            continue
        missing = None if r.requires is None else r.requires(facts)
        if missing is not None:
            not_run.setdefault(missing, []).append(r.id)
            continue
        findings += r.check(facts)
    return findings, [f"rule{'s' * (len(ids) > 1)} {', '.join(ids)} could not run: {reason}"
                      for reason, ids in not_run.items()]


def rule_table() -> Iterable[dict[str, str]]:
    """The registry as rows (id, report, condition, source) for the documentation and ``--json``."""
    return [{"id": r.id, "report": r.report, "scope": r.scope, "condition": r.condition, "source": r.source}
            for r in RULES]
