"""The records every report returns beside its table: findings in plain words, and what could not be shown.

A :class:`Finding` is one sentence a person can act on, with the evidence (metric, value, threshold), what to try,
the rule that drew it (:mod:`iotrace.trace.findings`) and, where one can be bounded, the :class:`Gain`: an upper
bound on the time the advice can save, so findings across a whole file rank by microseconds. An
:class:`Unavailable` says which metric a report needed and the ncu section that collects it, so a missing counter
reads as "not available: needs metric X (collect with `ncu --section Y`)", never as a zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Basis", "Evidence", "Finding", "Gain", "Unavailable"]

#: Where a number comes from: counted by the profiler (measured), arithmetic on counted values (derived), or
#: iotrace's own calculator or cost model (modelled).
Basis = Literal["measured", "derived", "modelled"]


@dataclass(frozen=True)
class Evidence:
    """One number behind a finding: the metric (or iotrace quantity), its value and the threshold it crossed."""

    metric: str
    value: float | str | None
    threshold: str = ""
    unit: str = ""

    def text(self) -> str:
        shown = f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.metric} = {shown}{unit}" + (f" ({self.threshold})" if self.threshold else "")


@dataclass(frozen=True)
class Gain:
    """An upper bound on the time a finding's advice can save: ``fraction`` of the row's total time ``of_ns``, with
    the reasoning in words (which identity bounds it)."""

    fraction: float
    of_ns: float | None
    reasoning: str

    @property
    def ns(self) -> float | None:
        return None if self.of_ns is None else self.fraction * self.of_ns

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": round(self.fraction, 6), "of_ns": self.of_ns, "ns": self.ns, "reasoning": self.reasoning}


@dataclass(frozen=True)
class Finding:
    """A short sentence in plain words, its evidence and what to try; ``rule`` names the rule that drew it and
    ``gain`` bounds what following ``try_next`` can save (None where no bound can be stated)."""

    report: str
    text: str
    evidence: tuple[Evidence, ...] = ()
    try_next: str = ""
    basis: Basis = "measured"
    kernel_id: int | None = None
    kernel: str | None = None
    severity: Literal["info", "warning"] = "warning"
    rule: str = ""
    gain: Gain | None = None
    #: The kernel row's share of the file's kernel time, in percent (None where the file has no durations).
    share_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["try"] = out.pop("try_next")
        out["evidence"] = [asdict(e) for e in self.evidence]
        out["gain"] = None if self.gain is None else self.gain.to_dict()
        return out


@dataclass(frozen=True)
class Unavailable:
    """A report (or part of one) that the trace cannot support, and how to collect what it needs."""

    report: str
    metric: str
    collect: str
    kernel_id: int | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def line(self) -> str:
        more = f"; {self.detail}" if self.detail else ""
        return f"{self.report} not available: needs metric {self.metric} (collect with `{self.collect}`){more}"

    def to_dict(self) -> dict[str, Any]:
        return {"report": self.report, "metric": self.metric, "collect": self.collect, "kernel_id": self.kernel_id,
                "line": self.line}
