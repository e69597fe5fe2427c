"""Reports as JSON: numpy and pandas scalars made plain, NaN/NA/infinity written as null (JSON has no NaN)."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "plain"]


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            return str(value)
    try:
        if value != value:  # NaN, pandas.NA
            return None
    except TypeError:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value
    return str(value)


def dumps(data: Any) -> str:
    return json.dumps(plain(data), indent=2, allow_nan=False, ensure_ascii=False)
