"""Which kernels of an export ran inside the kernel's NVTX range, and a ``--kernel`` regex that selects them.

Nsight Systems records the whole process, so its kernels are kept when ``kernels.nvtx_path`` (the ranges open on
the launching thread, joined by the loader) contains ``iotrace/<kernel>``. Nsight Compute was told to profile only
that range (``--nvtx-include``), so every kernel in its report is in it. Kineto joins ``record_function`` ranges the
same way Nsight Systems joins NVTX ones.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from iotrace.trace.nvtx_join import PATH_SEPARATOR

if TYPE_CHECKING:
    import pandas as pd

    from iotrace.trace.tables import TraceTables

__all__ = ["in_range", "name_regex"]


def in_range(tables: TraceTables, range_name: str, *, filtered_by_tool: bool) -> pd.DataFrame:
    """The kernel rows launched inside ``range_name`` (all rows when the tool already filtered on it)."""
    kernels = tables.kernels
    if filtered_by_tool:
        return kernels
    paths = kernels["nvtx_path"]
    inside = paths.map(lambda p: isinstance(p, str) and range_name in p.split(PATH_SEPARATOR))
    return kernels[inside.astype(bool)]


def name_regex(names: list[str]) -> str:
    """An anchored regex matching exactly these kernel names (for ``iotrace report --kernel``)."""
    unique = sorted(set(names))
    return "^(?:" + "|".join(re.escape(n) for n in unique) + ")$"
