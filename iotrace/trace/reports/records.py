"""The records every report returns beside its table: findings in plain words, and what could not be shown.

A :class:`Finding` is one sentence a person can act on, with the evidence (metric, value, threshold) and what to try.
An :class:`Unavailable` says which metric a report needed and the ncu section that collects it, so a missing counter
reads as "not available: needs metric X (collect with `ncu --section Y`)", never as a zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Basis", "Evidence", "Finding", "Unavailable"]

#: Where a number comes from: counted by the profiler, or computed by iotrace from a model.
Basis = Literal["measured", "modelled"]


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
class Finding:
    """A short sentence in plain words, its evidence and what to try."""

    report: str
    text: str
    evidence: tuple[Evidence, ...] = ()
    try_next: str = ""
    basis: Basis = "measured"
    kernel_id: int | None = None
    kernel: str | None = None
    severity: Literal["info", "warning"] = "warning"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["try"] = out.pop("try_next")
        out["evidence"] = [asdict(e) for e in self.evidence]
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
