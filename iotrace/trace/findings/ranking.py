"""Findings across a whole file, ranked by the time their advice can save (:class:`~iotrace.trace.reports.records.Gain`
in nanoseconds): the report opens with what matters."""

from __future__ import annotations

from iotrace.trace.reports.records import Finding

__all__ = ["rank"]


def _key(item: tuple[int, Finding]) -> tuple[int, float, float, int, int]:
    order, f = item
    gain = f.gain
    ns = gain.ns if gain is not None and gain.ns is not None else None
    # What the capture did not profile comes first: it qualifies everything after it. Then bounded gains in time
    # (largest first); then bounded fractions without a time; then the unbounded, warnings before notes; ties keep
    # the order the rules were applied in (verdict before its causes).
    tier = -1 if f.report == "profiling" else 0 if ns is not None else 1 if gain is not None else 2
    return (tier, -(ns or 0.0), -(gain.fraction if gain is not None else 0.0), f.severity != "warning", order)


def rank(findings: list[Finding]) -> list[Finding]:
    """``findings`` ordered by estimated time saved, largest first; findings without a bound after, in order; the
    launches that were not profiled before all of them."""
    return [f for _, f in sorted(enumerate(findings), key=_key)]
