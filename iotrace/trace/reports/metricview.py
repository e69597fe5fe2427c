"""Per-kernel lookup into the long ``metrics`` table: the one place reports read counters by name."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

__all__ = ["MetricView"]


class MetricView:
    """``view.get(kernel_id, "dram__bytes.sum")`` → float or None; built once per trace in one pass."""

    def __init__(self, metrics: pd.DataFrame) -> None:
        self._by_kernel: dict[int, dict[str, float]] = {}
        ids = metrics["kernel_id"].to_numpy()
        names = metrics["metric"].to_numpy()
        values = metrics["value"].to_numpy(dtype=float)
        for kid, name, value in zip(ids.tolist(), names.tolist(), values.tolist(), strict=True):
            self._by_kernel.setdefault(kid, {})[name] = value

    def __bool__(self) -> bool:
        return bool(self._by_kernel)

    def of(self, kernel_id: int) -> dict[str, float]:
        return self._by_kernel.get(kernel_id, {})

    def get(self, kernel_id: int, name: str) -> float | None:
        value = self._by_kernel.get(kernel_id, {}).get(name)
        return None if value is None or not math.isfinite(value) else value

    def first(self, kernel_id: int, names: Iterable[str]) -> tuple[str, float] | None:
        """The first of ``names`` the kernel has, with its value."""
        for name in names:
            value = self.get(kernel_id, name)
            if value is not None:
                return name, value
        return None

