"""The records a self-check writes: steps with their status and rows, and the whole run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Step:
    """One numbered step of the self-check: what it measured (rows of plain values), and its status."""

    name: str
    #: "ok": it ran and everything held; "failed": it ran and something failed; "skipped": it could not run here.
    status: str = "ok"
    reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def skip(self, reason: str) -> Step:
        self.status, self.reason = "skipped", reason
        return self

    def fail(self, reason: str) -> Step:
        self.status, self.reason = "failed", reason
        return self


@dataclass
class SelfcheckResult:
    """The whole run: where and how it ran, and its steps in order."""

    mode: str                       # "gpu" or "cpu"
    quick: bool
    environment: dict[str, Any]
    steps: list[Step]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(step.status != "failed" for step in self.steps)

    @property
    def ran_on(self) -> str:
        """What the run's titles name: the GPU it ran on, or on a CPU the card whose sizes it assumed (a CPU run
        names no GPU it never saw)."""
        env = self.environment
        if self.mode == "gpu":
            return str(env.get("device") or env["card_name"])
        return f"no GPU: sizes of {env['card']} ({env['card_name']}) assumed"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "quick": self.quick, "ok": self.ok, "seconds": round(self.seconds, 1),
                "environment": self.environment, "steps": [asdict(step) for step in self.steps]}
