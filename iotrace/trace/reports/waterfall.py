"""Where each step's time went: every instant of a step charged once, to one row of :data:`step_roles.CATEGORIES`.

A step's span runs from its host mark's start to the next step's start (the host time between them is the step's:
the scheduler, sampling and Python that make the next step), or, for the last step of a run, to the later of its
mark's end and its GPU work's end. Where the gap to the next step is longer than the median step, the steps are not
back to back (a new request, a repetition's reset) and the gap is charged to no step; :attr:`Waterfall.uncharged_ns`
says how much.

Inside a span, each instant is charged to the highest role (``step_roles.DEVICE_ROLES`` order) of what runs then:

- on a GPU trace, the kernels and copies on the device, whichever step launched them; an instant with none is
  ``idle`` (the device waits for the host: launch overhead, what a CUDA graph removes) while the step's mark is open,
  ``host_between`` after it;
- on a CPU trace (no kernels), the CPU ops on the step's thread, each instant charged to the outermost op with a
  recognised role (``aten::linear`` is a matrix product however its ``aten::t`` and ``aten::addmm`` are called), an
  instant in no op is ``idle`` (Python and framework time) inside the mark and ``host_between`` after.

So the rows sum to the span exactly (integer nanoseconds), which the tests check, and a category's time can be
recomputed from the trace with plain ``json``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from iotrace.trace.reports.step_roles import CATEGORIES, DEVICE_ROLES, kernel_role, op_role

if TYPE_CHECKING:
    import pandas as pd

    from iotrace.trace.reports.steps import Steps
    from iotrace.trace.tables import TraceTables

__all__ = ["Waterfall", "step_spans", "waterfall"]

_IDLE, _BETWEEN = len(DEVICE_ROLES), len(DEVICE_ROLES) + 1


@dataclass
class Waterfall:
    """Per step: its span and the nanoseconds of each category (``frame``: step, span_start_ns, span_end_ns,
    span_ns and one ``<category>_ns`` column each); ``device`` says what was charged ("gpu" kernels or "cpu" ops),
    ``other_names`` the unrecognised kernels or ops with their time (ns, largest first)."""

    frame: pd.DataFrame
    device: str
    other_names: list[tuple[str, float]] = field(default_factory=list)
    uncharged_ns: int = 0

    def totals(self, steps: list[int] | None = None) -> dict[str, int]:
        """Each category's nanoseconds over ``steps`` (default: all)."""
        rows = self.frame if steps is None else self.frame[self.frame["step"].isin(steps)]
        return {c: int(rows[f"{c}_ns"].sum()) for c in CATEGORIES}


def step_spans(steps: Steps) -> tuple[np.ndarray, np.ndarray, int]:
    """Each step's span (start, end in ns) as the module docstring defines it, and the gap time charged to none."""
    frame = steps.frame
    start = frame["start_ns"].to_numpy(dtype=np.int64)
    own_end = np.maximum(frame["end_ns"].to_numpy(dtype=np.int64), frame["work_end_ns"].to_numpy(dtype=np.int64))
    end = own_end.copy()
    if len(start) > 1:
        typical = float(np.median(own_end - start))
        gap = start[1:] - own_end[:-1]
        joined = gap <= typical
        end[:-1] = np.where(joined, start[1:], np.minimum(own_end[:-1], start[1:]))
        uncharged = int(np.clip(start[1:] - end[:-1], 0, None).sum())
    else:
        uncharged = 0
    return start, end, uncharged


def waterfall(tables: TraceTables, steps: Steps) -> Waterfall:
    """The waterfall of every step of ``steps`` in ``tables`` (see the module docstring)."""
    import pandas as pd

    start, end, uncharged = step_spans(steps)
    mark_end = steps.frame["end_ns"].to_numpy(dtype=np.int64)
    if tables.rows("kernels") and not np.isnan(tables.column("kernels", "start_ns")).all():
        device = "gpu"
        lo, hi, role, names = _device_intervals(tables)
    else:
        device = "cpu"
        lo, hi, role, names = _host_intervals(tables, steps)
    charged = _charge(lo, hi, role, start, end, mark_end)
    frame = pd.DataFrame({"step": steps.frame["step"].to_numpy(), "span_start_ns": start, "span_end_ns": end,
                          "span_ns": end - start})
    for index, category in enumerate(CATEGORIES):
        frame[f"{category}_ns"] = charged[:, index]
    return Waterfall(frame, device, names, uncharged)


def _device_intervals(tables: TraceTables) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[str, float]]]:
    """Kernels and copies as (start, end, role index), and the unrecognised kernels' names by total time."""
    k_start, k_end = tables.column("kernels", "start_ns"), tables.column("kernels", "end_ns")
    names = tables.column("kernels", "name")
    timed = ~np.isnan(k_start) & ~np.isnan(k_end)
    distinct: dict[str, int] = {}
    codes = np.fromiter((distinct.setdefault(str(n), len(distinct)) for n in names[timed]), dtype=np.int64,
                        count=int(timed.sum()))
    role_of = np.array([DEVICE_ROLES.index(kernel_role(n)) for n in distinct], dtype=np.int64)
    roles = role_of[codes] if len(codes) else np.zeros(0, dtype=np.int64)
    lo, hi = k_start[timed].astype(np.int64), k_end[timed].astype(np.int64)
    other = Counter()
    durations = (hi - lo).astype(np.float64)
    for name, code in distinct.items():
        if role_of[code] == DEVICE_ROLES.index("other"):
            other[name] = float(durations[codes == code].sum())
    if tables.rows("transfers"):
        t_start, t_end = tables.column("transfers", "start_ns"), tables.column("transfers", "end_ns")
        ok = ~np.isnan(t_start) & ~np.isnan(t_end)
        lo = np.concatenate([lo, t_start[ok].astype(np.int64)])
        hi = np.concatenate([hi, t_end[ok].astype(np.int64)])
        roles = np.concatenate([roles, np.full(int(ok.sum()), DEVICE_ROLES.index("copy"), dtype=np.int64)])
    return lo, hi, roles, other.most_common()


def _host_intervals(tables: TraceTables, steps: Steps) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                 list[tuple[str, float]]]:
    """The CPU ops on the steps' threads as disjoint charged intervals: each outermost op with a recognised role, and
    each top-level op (at the lowest priority, ``other``) for the instants no recognised op covers."""
    if not tables.rows("host_ops"):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), []
    threads = {(p, t) for p, t in zip(steps.frame["process"].astype("float64").fillna(-1).tolist(),
                                      steps.frame["thread"].astype("float64").fillna(-1).tolist(), strict=True)}
    process = np.nan_to_num(tables.column("host_ops", "process"), nan=-1)
    thread = np.nan_to_num(tables.column("host_ops", "thread"), nan=-1)
    wanted = np.array([(p, t) in threads for p, t in zip(process.tolist(), thread.tolist(), strict=True)],
                      dtype=bool)
    start = tables.column("host_ops", "start_ns")[wanted].astype(np.int64)
    end = tables.column("host_ops", "end_ns")[wanted].astype(np.int64)
    names = tables.column("host_ops", "name")[wanted]
    keys = np.stack([process[wanted], thread[wanted]]) if len(start) else np.zeros((2, 0))
    named = _named_ranges(tables, threads, set(steps.frame["name"]))
    if named is not None:  # ranges that say what their ops do (iotrace/attention-decode around aten::matmul)
        start, end = np.concatenate([start, named[0]]), np.concatenate([end, named[1]])
        names = np.concatenate([names, named[2]])
        keys = np.concatenate([keys, named[3]], axis=1)
    order = np.lexsort((-end, start, keys[1], keys[0])) if len(start) else np.zeros(0, dtype=np.int64)
    other = DEVICE_ROLES.index("other")
    lo, hi, roles = [], [], []
    other_time: Counter[str] = Counter()
    stack: list[tuple[int, bool]] = []  # (end, a recognised op is open at or above this level)
    last_key = None
    for i in order.tolist():
        key = (keys[0][i], keys[1][i])
        if key != last_key:
            stack, last_key = [], key
        s, e, name = int(start[i]), int(end[i]), str(names[i])
        while stack and stack[-1][0] <= s:
            stack.pop()
        covered = bool(stack) and stack[-1][1]
        role = op_role(name)
        if not stack:  # a top-level op: the floor its instants are charged to when nothing inside is recognised
            lo.append(s), hi.append(e), roles.append(other)
            if role == "other":
                other_time[name] += e - s
        if role != "other" and not covered:
            lo.append(s), hi.append(e), roles.append(DEVICE_ROLES.index(role))
        stack.append((e, covered or role != "other"))
    return (np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64), np.array(roles, dtype=np.int64),
            other_time.most_common())


def _named_ranges(tables: TraceTables, threads: set[tuple[float, float]], marks: set[str],
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The ranges on the steps' threads whose name has a role (``record_function("iotrace/attention-decode")``, as
    iotrace's torch path names its kernels under a profiler), as extra ops: the step marks themselves left out, and a
    range of no recognised role too (it would turn the Python inside it into "other")."""
    if not tables.rows("ranges"):
        return None
    ranges = tables.ranges
    ranges = ranges[(ranges["domain"] == "user_annotation") & ranges["start_ns"].notna() & ranges["end_ns"].notna()]
    keep = [op_role(str(n)) != "other" and str(n) not in marks and not str(n).startswith("iotrace/step ")
            for n in ranges["name"]]
    ranges = ranges[keep]
    process = ranges["process"].astype("float64").fillna(-1).to_numpy()
    thread = ranges["thread"].astype("float64").fillna(-1).to_numpy()
    on = np.array([(p, t) in threads for p, t in zip(process.tolist(), thread.tolist(), strict=True)], dtype=bool)
    if not on.any():
        return None
    ranges = ranges[on]
    return (ranges["start_ns"].to_numpy(dtype=np.int64), ranges["end_ns"].to_numpy(dtype=np.int64),
            ranges["name"].to_numpy(dtype=object), np.stack([process[on], thread[on]]))


def _charge(lo: np.ndarray, hi: np.ndarray, role: np.ndarray, start: np.ndarray, end: np.ndarray,
            mark_end: np.ndarray) -> np.ndarray:
    """[steps x categories] nanoseconds: each elementary segment of the spans charged to its highest active role, or
    to idle / host_between where none is active (before / after the step's mark ends)."""
    out = np.zeros((len(start), len(CATEGORIES)), dtype=np.int64)
    if not len(start):
        return out
    cuts = np.unique(np.concatenate([lo, hi, start, end, np.clip(mark_end, start, end)]))
    seg_lo, seg_hi = cuts[:-1], cuts[1:]
    length = seg_hi - seg_lo
    active = np.zeros((len(DEVICE_ROLES), len(seg_lo)), dtype=bool)
    for index in range(len(DEVICE_ROLES)):
        mine = role == index
        if not mine.any():
            continue
        delta = np.zeros(len(cuts) + 1, dtype=np.int64)
        np.add.at(delta, np.searchsorted(cuts, lo[mine]), 1)
        np.add.at(delta, np.searchsorted(cuts, hi[mine]), -1)
        active[index] = np.cumsum(delta)[:len(seg_lo)] > 0
    step = np.searchsorted(start, seg_lo, side="right") - 1
    inside = (step >= 0) & (seg_lo < end[np.clip(step, 0, None)])
    step = np.clip(step, 0, None)
    any_active = active.any(axis=0)
    category = np.where(any_active, active.argmax(axis=0),
                        np.where(seg_lo < mark_end[step], _IDLE, _BETWEEN))
    np.add.at(out, (step[inside], category[inside]), length[inside])
    return out
