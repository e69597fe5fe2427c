"""The report across the ranks of one distributed job: per-rank kernel time, communication against compute, the
overlap between them, idle GPU time, and the ranks that stand out (stragglers).

Input is a :class:`iotrace.trace.ranks.RankSet` (``load_ranks``), whose ranks are already checked to be one job's
distinct ranks (the files' ``distributedInfo``); ranks of the world size that no file holds are listed here in
:attr:`RankReport.missing`, never dropped silently.

Definitions, after Holistic Trace Analysis (HTA; facebookresearch/HolisticTraceAnalysis, docs "Communication
Computation Overlap" and hta/analyzers/communication_analysis.py):

* a **communication kernel** is one whose name contains ``ncclKernel`` or ``ncclDevKernel`` (HTA's
  ``is_comm_kernel``; RCCL keeps NCCL's kernel names) and, beyond HTA, a kernel of the other communication libraries
  the origin table knows (vLLM's custom all-reduce, PyTorch symmetric memory, NVSHMEM, DeepEP, TensorRT-LLM's
  all-reduce: :func:`iotrace.trace.reports.origin.is_communication`); every other kernel is **compute** (copies and
  sets are in ``TraceTables.transfers``, not kernels, as HTA's MEMORY kind is apart);
* the **overlap** of a rank is the time both some communication kernel and some compute kernel run, over the time
  some communication kernel runs (each kind's intervals merged first), so 100% means communication is fully hidden
  (over all the rank's kernels: a rank drives one GPU in the usual one-process-per-GPU launch);
* **idle** time is the single-trace timeline's (reports/timeline.py): the gaps in the union of kernel and copy
  intervals per device, over the span from the first to the last.

A **straggler** is a rank whose value stands apart from the others by the rule in :data:`STRAGGLER_RULE`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iotrace.trace.ranks import RankSet
from iotrace.trace.reports.records import Evidence, Finding
from iotrace.trace.reports.time_split import COMM_KERNEL, comm_mask, union_ns
from iotrace.trace.reports.timeline import IDLE_SHARE, _busy_intervals, _gaps
from iotrace.trace.tables import GPU_RANGE_DOMAINS, TraceTables

__all__ = ["COMM_KERNEL", "MAD_Z", "STRAGGLER_FLOOR", "STRAGGLER_RULE", "RankReport", "StragglerTest", "comm_mask",
           "outliers", "rank_report", "spans", "union_ns"]

#: The modified z-score cut-off of Iglewicz and Hoaglin, z_i = 0.6745 (x_i - median) / MAD > 3.5 (NIST/SEMATECH
#: e-Handbook of Statistical Methods, section 1.3.5.17 "Detection of Outliers").
MAD_Z = 3.5
#: 0.6745 is the 0.75 quantile of the standard normal: MAD / 0.6745 estimates the standard deviation (same source).
_MAD_SCALE = 0.6745
#: And at least 5% from the median: with ranks in lock step (MAD near 0) a 1% difference would have a huge z but no
#: effect worth chasing. iotrace's cut-off.
STRAGGLER_FLOOR = 0.05
#: The straggler rule in one sentence, as the reports print it.
STRAGGLER_RULE = (f"an outlier is a rank whose value is more than max({MAD_Z} x MAD / {_MAD_SCALE}, "
                  f"{STRAGGLER_FLOOR:.0%} of the median) from the median of the ranks (modified z-score of Iglewicz "
                  f"and Hoaglin, NIST/SEMATECH e-Handbook 1.3.5.17, with iotrace's 5% floor); needs 3 ranks or more")
#: HTA's iteration marker (hta/analyzers/straggler.py, extract_iteration_info): the profiler's step ranges.
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
#: The straggler tests: (metric, summary column, {side tested: what a rank outside the bound on that side means}).
_TESTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("step time", "step_ns", {"high": "its profiler steps take longer than the other ranks'"}),
    ("compute kernel time", "compute_ns", {"high": "it spends longer in compute kernels than the others (more "
                                                   "work, or a slower GPU)"}),
    # Collectives end together on every rank, so the rank that arrives last spends the least time in them and the
    # others wait for it: HTA's late-start reasoning (hta/analyzers/straggler.py).
    ("NCCL kernel time", "comm_ns", {"low": "the other ranks wait for it inside the collectives (the last to arrive "
                                            "spends the least time in them)",
                                     "high": "it waits in the collectives for slower peers"}),
)
#: The (metric, side) whose outlier is not the straggler itself but a rank held up by one.
_WAITING = frozenset({("NCCL kernel time", "high")})


@dataclass(frozen=True)
class StragglerTest:
    """One straggler test across the ranks: the numbers behind :data:`STRAGGLER_RULE` and the ranks it flags.

    ``lower_ns``/``upper_ns`` are the bounds a rank's value must stay within (None on a side that is not tested);
    ``flagged`` holds one dict per outlier rank (label, rank, value_ns, z, deviation_pct, side, and straggler: False
    for a rank held up by one, such as a high NCCL time). ``skipped`` says why
    the test did not run (fewer than 3 ranks with a value), else None.
    """

    metric: str
    meaning: dict[str, str]
    ranks: int
    median_ns: float | None
    mad_ns: float | None
    lower_ns: float | None
    upper_ns: float | None
    flagged: list[dict[str, Any]]
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def outliers(values: pd.Series, metric: str, sides: tuple[str, ...] = ("high",),
             meaning: dict[str, str] | None = None, labels: pd.Series | None = None) -> StragglerTest:
    """Apply :data:`STRAGGLER_RULE` to ``values`` (one per rank, indexed by rank label; NaN = no value).

    ``sides``: "high" flags values above the median, "low" below it; ``meaning``: what each side says of a rank.
    """
    meaning = meaning or {}
    values = values.dropna().astype("float64")
    if len(values) < 3:
        return StragglerTest(metric, meaning, len(values), None, None, None, None, [],
                             f"needs 3 ranks or more with a {metric}, has {len(values)}: with two the median sits "
                             "halfway between them and neither is an outlier")
    median = float(values.median())
    mad = float((values - median).abs().median())
    margin = max(MAD_Z * mad / _MAD_SCALE, STRAGGLER_FLOOR * abs(median))
    upper = median + margin if "high" in sides else None
    lower = median - margin if "low" in sides else None
    flagged = []
    for label, value in values.items():
        side = "high" if upper is not None and value > upper else "low" if lower is not None and value < lower else None
        if side is None:
            continue
        z = _MAD_SCALE * (value - median) / mad if mad > 0 else float("inf") * np.sign(value - median)
        flagged.append({"label": str(label), "rank": None if labels is None else labels.get(label),
                        "value_ns": float(value), "z": float(z),
                        "deviation_pct": 100.0 * (value - median) / median if median else None, "side": side,
                        "straggler": (metric, side) not in _WAITING})
    return StragglerTest(metric, meaning, len(values), median, mad, lower, upper, flagged)


def _label(tables: TraceTables) -> str:
    rank = tables.meta.get("rank")
    return str(rank) if rank is not None else Path(str(tables.meta.get("source"))).name


def _steps(tables: TraceTables) -> dict[int, float]:
    """Profiler step number -> its duration (ns), from the CPU-side ``ProfilerStep#N`` ranges."""
    ranges = tables.ranges.dropna(subset=["duration_ns"])
    ranges = ranges[~ranges["domain"].isin(GPU_RANGE_DOMAINS)]
    out: dict[int, float] = {}
    for name, duration in zip(ranges["name"], ranges["duration_ns"], strict=True):
        match = _STEP.fullmatch(str(name))
        if match:
            out[int(match.group(1))] = float(duration)
    return out


def _rank_row(tables: TraceTables) -> dict[str, Any]:
    kernels = tables.kernels
    comm = comm_mask(kernels["name"])
    timed = kernels.dropna(subset=["start_ns", "end_ns"])
    timed_comm = comm.loc[timed.index]
    starts, ends = timed["start_ns"].astype("int64").to_numpy(), timed["end_ns"].astype("int64").to_numpy()
    comm_busy = union_ns(starts[timed_comm.to_numpy()], ends[timed_comm.to_numpy()])
    compute_busy = union_ns(starts[~timed_comm.to_numpy()], ends[~timed_comm.to_numpy()])
    # overlap(A, B) = |A| + |B| - |A or B| for the unions A (communication) and B (compute).
    overlap = comm_busy + compute_busy - union_ns(starts, ends)
    busy = _busy_intervals(tables)  # the single-trace timeline's idle logic, so both reports count idle alike
    idle, _ = _gaps(busy, 0) if len(busy) else (pd.DataFrame(), None)
    span = int(idle["span_ns"].sum()) if len(idle) else None
    idle_ns = int(idle["idle_ns"].sum()) if len(idle) else None
    return {"label": _label(tables), "rank": tables.meta.get("rank"), "source": str(tables.meta.get("source")),
            "devices": int(kernels["device"].nunique()), "launches": int(kernels["launches"].sum()),
            "kernel_ns": float(kernels["duration_ns"].sum()),
            "compute_ns": float(kernels.loc[~comm, "duration_ns"].sum()),
            "comm_ns": float(kernels.loc[comm, "duration_ns"].sum()),
            "comm_launches": int(kernels.loc[comm, "launches"].sum()),
            "comm_busy_ns": comm_busy, "compute_busy_ns": compute_busy, "overlap_ns": overlap,
            "overlap_share": overlap / comm_busy if comm_busy > 0 else None,
            "span_ns": span, "idle_ns": idle_ns,
            "idle_share": idle_ns / span if span else None}


@dataclass
class RankReport:
    """The report across one job's ranks; renderers in iotrace/trace/render/ranks.py.

    ``summary``: one row per rank (label, rank, source, devices, launches, kernel/compute/comm ns, comm launches,
    comm/compute busy ns (merged intervals), overlap ns and share, span/idle ns and share, steps, step ns).
    ``kernels``: long table (name, kind, label, launches, total_ns) of the ``top`` kernel names by time over all
    ranks. ``stragglers``: one :class:`StragglerTest` per metric.
    """

    world_size: int | None
    backend: str | None
    missing: list[int]
    summary: pd.DataFrame
    kernels: pd.DataFrame
    stragglers: list[StragglerTest]
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return self.summary["label"].tolist()

    def ranks_line(self) -> str:
        """One line: which ranks are here, of what world size, and which are missing."""
        n = len(self.summary)
        if self.world_size is None:
            return f"{n} traces with no distributedInfo (rank, world size): compared as files, by name"
        line = f"{n} of {self.world_size} ranks ({self.backend or 'backend not stated'})"
        if self.missing:
            line += f"; missing ranks: {spans(self.missing)} (no file holds them; the figures cover the ranks here)"
        return line

    def kernel_matrix(self) -> pd.DataFrame:
        """Kernel time (ns) by name (rows, largest first) and rank label (columns); 0 where a rank ran none."""
        if self.kernels.empty:
            return pd.DataFrame(columns=self.labels)
        wide = self.kernels.pivot_table(index="name", columns="label", values="total_ns", aggfunc="sum",
                                        fill_value=0.0, sort=False)
        wide = wide.reindex(columns=self.labels, fill_value=0.0)
        return wide.loc[wide.sum(axis=1).sort_values(ascending=False, kind="stable").index]

    def to_dict(self) -> dict[str, Any]:
        kinds = self.kernels.drop_duplicates("name").set_index("name")["kind"] if len(self.kernels) else {}
        matrix = self.kernel_matrix()
        return {"world_size": self.world_size, "backend": self.backend, "ranks": len(self.summary),
                "missing": self.missing, "ranks_line": self.ranks_line(),
                "definitions": {"comm_kernel": f"{COMM_KERNEL.pattern} (HTA), or another communication library's "
                                "kernel (iotrace.trace.reports.origin.is_communication)",
                                "overlap": "time both communication and compute kernels run / time communication "
                                "kernels run (HTA)", "straggler": STRAGGLER_RULE},
                "summary": self.summary.to_dict("records"),
                "kernels": [{"name": name, "kind": kinds[name], "total_ns": float(row.sum()),
                             "per_rank_ns": {label: float(v) for label, v in row.items()}}
                            for name, row in matrix.iterrows()],
                "stragglers": [test.to_dict() for test in self.stragglers],
                "findings": [f.to_dict() for f in self.findings], "notes": self.notes}


def spans(numbers: list[int]) -> str:
    """[2, 3, 4, 7] -> "2-4, 7"."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def _kernels(ranks: list[TraceTables], labels: list[str], top: int) -> pd.DataFrame:
    rows = []
    for tables, label in zip(ranks, labels, strict=True):
        for row in tables.kernel_breakdown():
            rows.append({"name": row.name, "label": label, "launches": row.launches, "total_ns": row.total_ns})
    frame = pd.DataFrame(rows, columns=["name", "label", "launches", "total_ns"])
    if frame.empty:
        return frame.assign(kind=pd.Series(dtype=object))
    keep = frame.groupby("name", sort=False)["total_ns"].sum().sort_values(ascending=False, kind="stable").head(top)
    frame = frame[frame["name"].isin(keep.index)]
    return frame.assign(kind=np.where(comm_mask(frame["name"]), "comm", "compute")).reset_index(drop=True)


def _findings(summary: pd.DataFrame, tests: list[StragglerTest]) -> list[Finding]:
    out = []
    for test in tests:
        for hit in test.flagged:
            bound = test.upper_ns if hit["side"] == "high" else test.lower_ns
            verdict = "is a straggler by" if hit["straggler"] else "stands out by"
            out.append(Finding("ranks", f"Rank {hit['label']} {verdict} {test.metric}: "
                                        f"{hit['value_ns'] / 1e6:.3f} ms against a median of "
                                        f"{test.median_ns / 1e6:.3f} ms ({hit['deviation_pct']:+.0f}%): "
                                        f"{test.meaning.get(hit['side'], '')}.",
                               (Evidence(test.metric, round(hit["value_ns"] / 1e6, 3),
                                         f"{'>' if hit['side'] == 'high' else '<'} {bound / 1e6:.3f} ms", "ms"),),
                               "Compare this rank's kernels with the others' (the kernel table has one column per "
                               "rank), and check its host (data loading, CPU contention) and its GPU.",
                               "measured"))
    # Half of the communication exposed while it is over 10% of kernel time: iotrace's cut-offs.
    low = summary.dropna(subset=["overlap_share"])
    low = low[(low["overlap_share"] < 0.5) & (low["comm_ns"] > 0.1 * low["kernel_ns"])]
    if len(low):
        exposed = (low["comm_busy_ns"] - low["overlap_ns"]).median()
        out.append(Finding("ranks", f"On {_who(low)} under half of the NCCL kernel time overlaps compute (median "
                                    f"{low['overlap_share'].median() * 100:.0f}%; {exposed / 1e6:.3f} ms exposed per "
                                    "rank, median).",
                           (Evidence("overlap share (median)", round(float(low["overlap_share"].median()), 3),
                                     "< 0.5"),),
                           "Overlap collectives with compute: bucketed gradient all-reduce (DDP bucket_cap_mb), FSDP "
                           "prefetch, or a separate communication stream.", "measured"))
    idle = summary.dropna(subset=["idle_share"])
    idle = idle[idle["idle_share"] > IDLE_SHARE]
    if len(idle):
        out.append(Finding("ranks", f"The GPU of {_who(idle)} sat idle over {IDLE_SHARE:.0%} of the traced span "
                                    f"(median {idle['idle_share'].median() * 100:.0f}%).",
                           (Evidence("idle share (median)", round(float(idle["idle_share"].median()), 3),
                                     f"> {IDLE_SHARE}"),),
                           "Run `iotrace report` on one rank's file for its longest gaps and what ran either side.",
                           "measured"))
    return out


def _who(rows: pd.DataFrame) -> str:
    """ "rank 3" or "ranks 0-2, 5" (labels where the files state no rank)."""
    ranks = [int(r) for r in rows["rank"] if r is not None and r == r]
    if len(ranks) == len(rows):
        return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {spans(sorted(ranks))}"
    return ", ".join(rows["label"])


def rank_report(found: RankSet, top: int = 20) -> RankReport:
    """The report across ``found``'s ranks; ``top`` kernel names (by time over all ranks) in the kernel table."""
    labels = [_label(t) for t in found.ranks]
    if len(set(labels)) < len(labels):  # files with no rank and the same name in different folders
        labels = [str(t.meta.get("source")) for t in found.ranks]
    rows = [{**_rank_row(t), "label": label} for t, label in zip(found.ranks, labels, strict=True)]
    steps = [_steps(t) for t in found.ranks]
    # Steps every rank traced are compared, so a rank with one step more is not judged on a different step.
    common = set.intersection(*(set(s) for s in steps)) if steps else set()
    notes = []
    for row, own in zip(rows, steps, strict=True):
        chosen = [own[n] for n in sorted(common)] if common else list(own.values())
        row["steps"] = len(chosen)
        row["step_ns"] = float(np.mean(chosen)) if chosen else None
    if common:
        notes.append(f"step time: the mean of the profiler steps every rank traced ({spans(sorted(common))})")
    elif any(steps):
        notes.append("step time: the ranks traced different profiler steps; each rank's own steps are averaged")
    else:
        notes.append("step time: no ProfilerStep#N ranges in these traces (torch.profiler with schedule= and "
                     "prof.step() writes them)")
    summary = pd.DataFrame(rows)
    by_label = summary.set_index("label")
    tests = [outliers(by_label[column], metric, tuple(meaning), meaning, by_label["rank"])
             for metric, column, meaning in _TESTS]
    if not summary["comm_launches"].any():
        notes.append("no NCCL/RCCL kernels in these traces: communication and overlap are zero")
    backend = next((t.meta.get("backend") for t in found.ranks if t.meta.get("backend")), None)
    return RankReport(found.world_size, backend, list(found.missing), summary, _kernels(found.ranks, labels, top),
                      tests, _findings(summary, tests), notes)
