"""The records the three collectors share: where a capture's files go, and what a finished capture produced."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Capture", "CapturePaths"]


@dataclass(frozen=True)
class CapturePaths:
    """The files of one capture, all beside each other: ``<out>/<kernel>-<tool>-<UTC time>.*``."""

    stem: Path

    @classmethod
    def new(cls, out: Path, kernel: str, tool: str, stamp: str) -> CapturePaths:
        return cls(out / f"{kernel}-{tool}-{stamp}")

    def with_suffix(self, suffix: str) -> Path:
        return self.stem.parent / (self.stem.name + suffix)

    @property
    def manifest(self) -> Path:
        return self.with_suffix(".manifest.json")

    @property
    def log(self) -> Path:
        return self.with_suffix(".log")


@dataclass
class Capture:
    """What a collector produced: its own file, the file iotrace loads, and every profiler command it ran."""

    capture: Path | None = None
    export: Path | None = None
    commands: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0
