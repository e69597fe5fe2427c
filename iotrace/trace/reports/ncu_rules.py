"""Nsight Compute's own rule results (its "guided analysis"), as a report file stores them: read back, not recomputed.

:class:`StoredRule` is one stored result with its message in plain words (ncu's ``@section:ID:Words@``,
``@url:Words:Link@``, ``@source:...:Words@`` and ``@sass:...:Words@`` link markup rendered as text);
:func:`stored_rules` gives a launch group's results, largest estimated speedup first; :func:`rules_status` the one
line to print where a file holds none; :func:`bound_verdict` what the SOLBottleneck rule's title says bounds the
kernel; :func:`rule_results_of` how many results (and errors) launches hold, for those not profiled, whose results are
the rules failing on the missing metrics. The rows come from the ``rules`` table
(:data:`iotrace.trace.tables.RULE_COLUMNS`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from iotrace.trace.formats.ncu_rep import NOT_PROFILED_NOTE
from iotrace.trace.formats.ncu_rep_rules import NO_RULES
from iotrace.trace.tables import TraceTables

__all__ = ["NOT_PROFILED_NOTE", "StoredRule", "bound_verdict", "plain_message", "rule_results_of", "rules_status",
           "stored_rules"]

#: SOLBottleneck titles in every corpus report (ncu 2021.2-2024.3) and the bound each names. The rule (ncu's
#: SpeedOfLight rule file) says "Latency Issue" and "Small Grid" where compute and memory both stay under 60% of peak
#: (Small Grid: because the grid fills less than one wave), "Balanced Throughput" where they are within 10 points and
#: under 80%, and "High Throughput" where one passes 80%: its message names the section to look at (compute or memory).
_BOUND: dict[str, str | None] = {"High Compute Throughput": "compute", "High Memory Throughput": "memory",
                                 "Latency Issue": "latency", "Small Grid": "latency",
                                 "Balanced Throughput": "balanced", "High Throughput": None}
_SECTION_RUN = re.compile(r"@section:[^:@\n]*:[^@\n]*@(?: and @section:[^:@\n]*:[^@\n]*@)*")
_SECTION = re.compile(r"@section:[^:@\n]*:([^@\n]*)@")
_LINK = re.compile(r"@(url|source|sass):([^@\n]*)@")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@dataclass(frozen=True)
class StoredRule:
    """One rule result of one launch as the report stores it; ``message`` in plain words. ``focus_metrics`` are
    (metric, value, why it was picked); ``speedup_pct`` ncu's estimate (None before ncu 2023.x and for rules without
    one), ``speedup_type`` "local" (this problem's hardware efficiency) or "global" (the whole workload's runtime)."""

    rule_id: str
    rule_name: str
    section: str
    severity: str | None
    title: str | None
    message: str | None
    focus_metrics: tuple[tuple[str, float | None, str], ...]
    speedup_pct: float | None
    speedup_type: str | None
    kernel_id: int

    def to_dict(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "rule_name": self.rule_name, "section": self.section,
                "severity": self.severity, "title": self.title, "message": self.message,
                "focus_metrics": [{"name": n, "value": v, "info": i} for n, v, i in self.focus_metrics],
                "speedup_pct": self.speedup_pct, "speedup_type": self.speedup_type, "kernel_id": self.kernel_id}

    def text(self) -> str:
        """One line: the title (or rule name), severity and estimate, then the message's first sentence."""
        facts = [self.severity] if self.severity and self.severity != "none" else []
        if self.speedup_pct is not None:
            facts.append(f"est. {self.speedup_pct:.1f}% {self.speedup_type or ''} speedup".replace("  ", " "))
        head = f"{self.title or self.rule_name} ({', '.join(facts)})" if facts else self.title or self.rule_name
        first = _SENTENCE_END.split(self.message, maxsplit=1)[0] if self.message else ""
        return f"ncu {self.rule_id}: {head}" + (f": {first}" if first else "")


def plain_message(text: str) -> str:
    """``text`` with ncu's link markup as words: a run of ``@section:ID:Words@`` references ("A and B") becomes "the
    A and B sections" (no second "the" or "section" where the sentence has them), ``@url:Words:Link@`` "Words (Link)",
    ``@source:...:Words@`` and ``@sass:...:Words@`` their last field (the link's text)."""
    def section_run(match: re.Match[str]) -> str:
        names = _SECTION.findall(match.group())
        before, after = match.string[:match.start()], match.string[match.end():]
        words = " and ".join(names)
        if re.search(r"\bthe $", before, re.IGNORECASE) is None:
            start = not before.strip() or before.rstrip().endswith((".", "!", "?"))
            words = ("The " if start else "the ") + words
        if re.match(r" (sections?|tables?)\b", after) is None:
            words += " sections" if len(names) > 1 else " section"
        return words

    def link(match: re.Match[str]) -> str:
        kind, fields = match.groups()
        if kind == "url":
            words, _, address = fields.partition(":")
            return f"{words} ({address})" if address else words
        return fields.rsplit(":", 1)[-1]

    return _LINK.sub(link, _SECTION_RUN.sub(section_run, text))


def stored_rules(tables: TraceTables, launch_ids: list[int]) -> list[StoredRule]:
    """The stored rule results of a launch group: those of its first launch (``launch_ids[0]``, as
    :func:`iotrace.trace.reports.launch_groups.group_launches` lists them; identical launches get identical advice),
    largest estimated speedup first, then those without an estimate in the file's order."""
    if not launch_ids or not tables.rows("rules"):
        return []
    column = {name: tables.column("rules", name) for name in ("kernel_id", "rule_id", "rule_name", "section",
                                                              "severity", "title", "message", "focus_metrics",
                                                              "speedup", "speedup_type")}
    rules = []
    for i in (int(i) for i in (column["kernel_id"] == launch_ids[0]).nonzero()[0]):
        speedup = float(column["speedup"][i])
        focus = json.loads(column["focus_metrics"][i] or "[]")
        rules.append(StoredRule(
            rule_id=column["rule_id"][i], rule_name=column["rule_name"][i], section=column["section"][i],
            severity=column["severity"][i], title=column["title"][i],
            message=plain_message(column["message"][i]) if column["message"][i] else None,
            focus_metrics=tuple((m["name"], m["value"], m["info"]) for m in focus),
            speedup_pct=None if math.isnan(speedup) else speedup, speedup_type=column["speedup_type"][i],
            kernel_id=int(column["kernel_id"][i])))
    # sorted is stable: ties, and the rules without an estimate, keep the file's order.
    return sorted(rules, key=lambda r: (r.speedup_pct is None, -(r.speedup_pct or 0.0)))


def rules_status(tables: TraceTables) -> str | None:
    """The one line to print where ``tables`` hold no rule results (why there are none), or rule results without
    any speedup estimate (Nsight Compute before 2023.x stores none); None where they hold estimates."""
    if tables.rows("rules"):
        if not np.isnan(tables.column("rules", "speedup").astype(float)).all():
            return None
        version = str(tables.meta.get("version") or "")
        why = ("estimates are stored from 2023.x on" if version[:4].isdigit() and int(version[:4]) < 2023 else
               "the rules this capture ran stored none")
        return (f"the file's Nsight Compute rule results carry no speedup estimates (Nsight Compute "
                f"{version or 'version not stated'}; {why}): they are shown per kernel, not ranked by time")
    for note in tables.meta.get("notes", []):
        if note.startswith(NO_RULES):
            return note
    if tables.meta.get("format") != "ncu-rep":
        return f"{NO_RULES}: only Nsight Compute reports (.ncu-rep) store them, and this is {tables.meta.get('format')}"
    return f"{NO_RULES} that could be read (see the notes on its rule results)"


def bound_verdict(rules: Sequence[StoredRule]) -> str | None:
    """What ncu's SOLBottleneck rule says bounds the kernel: "compute", "memory", "latency" or "balanced"; None where
    the rules hold no SOLBottleneck result with a title it knows (no rule results, or a capture without its section)."""
    for rule in rules:
        # An error is the rule failing (a launch without the metrics it reads), not a verdict.
        if rule.rule_id != "SOLBottleneck" or rule.severity == "error" or rule.title not in _BOUND:
            continue
        verdict = _BOUND[rule.title]
        if verdict is None and rule.message:  # "High Throughput": the section it sends you to says which unit
            compute = "Compute Workload Analysis" in rule.message
            memory = "Memory Workload Analysis" in rule.message
            verdict = "compute" if compute and not memory else "memory" if memory and not compute else None
        if verdict is not None:
            return verdict
    return None


def rule_results_of(tables: TraceTables, launch_ids: Sequence[int]) -> tuple[int, int]:
    """(rule results, of them errors) the file stores for the launches ``launch_ids``: for launches that were not
    profiled, what the report leaves out (an NvRules error, MsgType 4, is a rule that could not run)."""
    if not launch_ids or not tables.rows("rules"):
        return 0, 0
    mine = np.isin(tables.column("rules", "kernel_id"), list(launch_ids))
    errors = mine & (tables.column("rules", "severity") == "error")
    return int(mine.sum()), int(errors.sum())
