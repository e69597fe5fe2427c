"""The rules that read a timeline (nsys, Kineto): Nsight Systems' expert-system rules, launch overhead, exposed
communication, and where the GPU sat idle.

Nsight Systems' rules and their default thresholds are those of ``nsys analyze`` (Nsight Systems User Guide, "Expert
Systems Analysis", https://docs.nvidia.com/nsight-systems/UserGuide/index.html#expert-systems-analysis): async memcpy
with pageable memory (``cuda_memcpy_async``), synchronous memcpy and memset (``cuda_memcpy_sync``,
``cuda_memset_sync``), synchronization APIs (``cuda_api_sync``), GPU gaps of 500 ms or more (``gpu_gaps``) and GPU time
utilization under 50% in 30 equal chunks of the span (``gpu_time_util``). They run here on nsys exports and Kineto
traces alike. Each takes :class:`TimelineFacts`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from iotrace.trace.findings.kernel_rules import BOUND
from iotrace.trace.findings.launch_rules import TINY_LAUNCH_NS, function_name
from iotrace.trace.findings.rule import Rule
from iotrace.trace.reports.origin import is_communication
from iotrace.trace.reports.records import Evidence, Finding, Gain
from iotrace.trace.reports.step_report import INFERENCE_OVERLAP
from iotrace.trace.reports.time_split import comm_mask, merge, union_ns
from iotrace.trace.reports.timeline import MEMCPY_SHARE, Timeline
from iotrace.trace.reports.vendor import Vocabulary, vocabulary_of
from iotrace.trace.tables import TraceTables

__all__ = ["GAP_NS", "LAUNCH_BOUND_RUN", "TIMELINE_RULES", "UTIL_CHUNKS", "UTIL_PCT", "WORKLOAD_SHARE_PCT",
           "TimelineFacts", "floor_bounded", "idle_left"]

NSYS_RULES = "Nsight Systems User Guide, 'Expert Systems Analysis'"
CUDA_GRAPHS_BLOG = "NVIDIA Technical Blog, 'Getting Started with CUDA Graphs'"
#: ``gpu_gaps``: "gap" argument, default 500 ms.
GAP_NS = 500_000_000
#: ``gpu_time_util``: "threshold" 50% and "chunks" 30, the defaults.
UTIL_PCT, UTIL_CHUNKS = 50.0, 30
#: Consecutive kernels, each shorter than its launch call, that make a launch-bound stretch (iotrace's cut-off: one
#: or two short kernels are noise; three in a row are a pattern a CUDA graph or fusion removes).
LAUNCH_BOUND_RUN = 3
#: Exposed communication (NCCL time no compute kernel hides) flagged from this share of the span (iotrace's cut-off).
EXPOSED_SHARE = 0.05
#: Pageable copies, and the GPU idle synchronous calls leave, are findings from this share of the span: nsys lists
#: every call, but a few microseconds of a long trace are noise beside the other findings (iotrace's cut-off).
CALL_FLOOR = 0.01
#: The tiny-launches finding names the kernels with the most time among them, this many (iotrace's choice: the first
#: few say where to start; the evidence counts them all).
TINY_NAMED = 3
#: From half of kernel time the top kernel is the workload: no other kernel, nor all of them, can be worth more than
#: tuning it (Amdahl 1967, "Validity of the single processor approach to achieving large scale computing capabilities").
WORKLOAD_SHARE_PCT = 50.0


@dataclass(frozen=True)
class TimelineFacts:
    """What a timeline rule reads: the trace's timeline figures and its tables (API calls, copies, ranges)."""

    line: Timeline
    tables: TraceTables
    #: True where the trace is an inference engine's (its steps were found): advice about training does not fit it.
    inference: bool = False
    #: What shows the trace records CUDA graph capture (:func:`iotrace.trace.reports.graph_capture.capture_run`):
    #: its launch-bound stretches are the capture, not overhead a graph would remove.
    capturing: str | None = None

    @property
    def vocab(self) -> Vocabulary:
        """The trace vendor's words: an AMD trace's advice names HIP calls and ROCm tools."""
        return vocabulary_of(self.tables)

    def nsys(self, rule: str, nvidia_citation: str) -> str:
        """The citation of Nsight Systems' ``rule``, whose check and default threshold this rule takes."""
        return self.vocab.same_check(nvidia_citation, f"nsys {rule} rule ({NSYS_RULES})")

    @property
    def span_ns(self) -> float | None:
        """The longest device span (first GPU operation's start to last one's end): what timeline gains are of."""
        split = self.line.split
        if split is None or split.devices.empty:
            return None
        return float(split.devices["span_ns"].max()) or None

    @property
    def busy(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per device, its GPU operations as disjoint sorted busy intervals (:attr:`TimeSplit.busy`)."""
        return {} if self.line.split is None else self.line.split.busy

    def gain(self, saved_ns: float, reasoning: str) -> Gain:
        """``saved_ns`` as a share of the span (the whole saving where the trace has no span)."""
        span = self.span_ns
        return Gain(min(1.0, saved_ns / span), span, reasoning) if span else Gain(1.0, saved_ns, reasoning)


RUNTIME_CALLS = ("the trace holds no CUDA runtime calls (nsys profile --trace=cuda records them; torch.profiler with "
                 "ProfilerActivity.CPU and ProfilerActivity.CUDA)")


def _needs_calls(facts: TimelineFacts) -> str | None:
    if not facts.tables.api_calls.empty:
        return None
    v = facts.vocab
    return RUNTIME_CALLS if not v.amd else f"the trace holds no {v.runtime} runtime calls ({v.api_trace})"


def _needs_memory_kinds(facts: TimelineFacts) -> str | None:
    copies = facts.tables.transfers
    if copies.empty:
        return None  # no copy to check: the rule has nothing to say, and nothing is missing
    if not (copies["src_kind"].notna() | copies["dst_kind"].notna()).any():
        return "the trace does not name its copies' host memory (pageable or pinned)"
    return None


def _needs_launch_times(facts: TimelineFacts) -> str | None:
    if facts.line.launches is None and len(facts.tables.kernels):
        return f"the trace keeps no launch call start and end per kernel ({facts.vocab.launch_trace})"
    return None


def _cpu_during(facts: TimelineFacts, start: int, end: int) -> str:
    """What the host did in [start, end): the API calls and ranges that overlap it, by time, in words."""
    parts = []
    calls = facts.tables.api_calls
    if len(calls):
        inside = calls[(calls["start_ns"] < end) & (calls["end_ns"] > start)]
        if len(inside):
            top = (inside.assign(t=np.minimum(inside["end_ns"], end) - np.maximum(inside["start_ns"], start))
                   .groupby("name")["t"].sum().sort_values(ascending=False).head(3))
            parts.append(", ".join(f"{name} {t / 1e6:.1f} ms" for name, t in top.items()))
    ranges = facts.tables.ranges.dropna(subset=["start_ns", "end_ns"])
    if len(ranges):
        inside = ranges[(ranges["start_ns"] < end) & (ranges["end_ns"] > start)]
        if len(inside):
            deepest = inside.sort_values(["depth", "start_ns"], ascending=[False, True], na_position="first")
            parts.append("in range " + ", ".join(dict.fromkeys(str(n) for n in deepest["name"].head(2))))
    return "; ".join(parts) or "no API call or range recorded on the host"


def _gpu_gaps(facts: TimelineFacts) -> list[Finding]:
    out = []
    for device, (s, e) in facts.busy.items():
        gap = s[1:] - e[:-1]
        long = np.flatnonzero(gap >= GAP_NS)
        if not len(long):
            continue
        total = float(gap[long].sum())
        worst = long[np.argsort(-gap[long], kind="stable")][:3]
        described = "; ".join(f"{gap[i] / 1e6:.0f} ms at {(e[i] - s[0]) / 1e6:.0f} ms "
                              f"({_cpu_during(facts, e[i], s[i + 1])})" for i in worst)
        out.append(Finding("timeline", f"GPU {device} sat idle in {len(long)} gap{'s' * (len(long) != 1)} of "
                                       f"{GAP_NS / 1e6:.0f} ms or more, {total / 1e6:.0f} ms in all: {described}.",
                           (Evidence("gaps >= 500 ms", len(long), facts.nsys("gpu_gaps",
                                                                             f"nsys gpu_gaps rule ({NSYS_RULES})")),
                            Evidence("their time", round(total / 1e6, 3), "", "ms")),
                           "Look at what the host does in each gap (above): data loading, synchronisation, Python "
                           "work between steps; overlap it with GPU work or move it off the critical path.",
                           "measured", rule=GPU_GAPS.id, gain=facts.gain(total, "the gaps' time is the most that "
                                                                                "filling them can save")))
    return out


GPU_GAPS = Rule("gpu-gaps", "timeline", f"a GPU idle for {GAP_NS / 1e6:.0f} ms or more at a stretch, within its "
                "first and last GPU operation", f"nsys gpu_gaps rule ({NSYS_RULES})", _gpu_gaps, scope="timeline")


def _gpu_util(facts: TimelineFacts) -> list[Finding]:
    out = []
    for device, (s, e) in facts.busy.items():
        span = int(e[-1] - s[0]) if len(s) else 0
        if span <= 0:
            continue
        edges = s[0] + np.arange(UTIL_CHUNKS + 1) * span / UTIL_CHUNKS
        busy = np.array([union_ns(np.clip(s, a, b), np.clip(e, a, b)) for a, b in itertools.pairwise(edges)])
        util = 100.0 * busy / (span / UTIL_CHUNKS)
        low = np.flatnonzero(util < UTIL_PCT)
        if not len(low):
            continue
        idle = float((span / UTIL_CHUNKS - busy[low]).sum())
        out.append(Finding("timeline", f"GPU {device} was under {UTIL_PCT:.0f}% busy in {len(low)} of {UTIL_CHUNKS} "
                                       f"equal stretches of its {span / 1e6:.1f} ms span (lowest "
                                       f"{util[low].min():.0f}%), {idle / 1e6:.1f} ms idle in them.",
                           (Evidence("low-utilisation chunks", len(low), f"utilisation < {UTIL_PCT:.0f}% in "
                                     f"{UTIL_CHUNKS} chunks (" + facts.nsys("gpu_time_util", "nsys gpu_time_util "
                                                                           f"rule, {NSYS_RULES}") + ")"),),
                           "Those stretches wait on the host or on dependencies: give the GPU work there (overlap "
                           "the host's work, larger batches, fewer synchronisations).", "measured",
                           rule=GPU_UTIL.id, gain=Gain(idle / span, float(span), "the idle time inside the "
                                                       "low-utilisation stretches")))
    return out


GPU_UTIL = Rule("gpu-utilization", "timeline", f"some of {UTIL_CHUNKS} equal chunks of a GPU's span under "
                f"{UTIL_PCT:.0f}% busy", f"nsys gpu_time_util rule ({NSYS_RULES})", _gpu_util, scope="timeline")


def _pageable(facts: TimelineFacts) -> list[Finding]:
    copies = facts.tables.transfers
    if copies.empty:
        return []
    pageable = copies[(copies["src_kind"] == "pageable") | (copies["dst_kind"] == "pageable")]
    calls = facts.tables.api_calls
    if len(pageable) and len(calls):
        async_ids = set(calls.loc[calls["name"].astype(str).str.contains("Async"), "correlation_id"].dropna())
        matched = pageable["correlation_id"].isin(async_ids)
        if pageable["correlation_id"].notna().any():
            pageable = pageable[matched]
    if pageable.empty:
        return []
    total = float(pageable["duration_ns"].sum())
    if facts.span_ns and total / facts.span_ns < CALL_FLOOR:
        return []
    size = pageable["bytes"].sum(min_count=1)
    return [Finding("timeline", f"{len(pageable)} asynchronous cop{'ies' if len(pageable) != 1 else 'y'} to or from "
                                f"pageable host memory ({'' if pd.isna(size) else f'{int(size):,} B, '}"
                                f"{total / 1e6:.3f} ms): the driver stages them through a pinned buffer, so they "
                                "neither overlap nor stay asynchronous.",
                    (Evidence("pageable async copies", len(pageable),
                              facts.nsys("cuda_memcpy_async", f"nsys cuda_memcpy_async rule ({NSYS_RULES})")),
                     Evidence("their time", round(total / 1e6, 3), "", "ms")),
                    f"Pin the host buffers ({facts.vocab.pin_host}; in PyTorch pin_memory=True and "
                    "non_blocking=True) so the copies run at full bandwidth and overlap compute.", "measured",
                    rule=PAGEABLE.id, gain=facts.gain(total, "the copies' time is the most pinning can save"))]


PAGEABLE = Rule("pageable-memcpy", "timeline", "asynchronous memcpys whose host side is pageable memory, >= "
                f"{CALL_FLOOR:.0%} of the span",
                f"nsys cuda_memcpy_async rule ({NSYS_RULES})", _pageable, scope="timeline",
                requires=_needs_memory_kinds)


def _gpu_busy(facts: TimelineFacts) -> tuple[np.ndarray, np.ndarray]:
    """Every device's GPU operations as one set of disjoint sorted busy intervals: the GPU is idle where none runs."""
    runs = list(facts.busy.values())
    if not runs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return merge(np.concatenate([s for s, _ in runs]).astype(np.int64),
                 np.concatenate([e for _, e in runs]).astype(np.int64))


def idle_left(busy: tuple[np.ndarray, np.ndarray], starts: np.ndarray, ends: np.ndarray) -> float:
    """The GPU idle that blocking host calls [starts, ends) leave, in ns, each instant counted once. A call that
    returns while the GPU is idle leaves it idle from the later of the call's start and the end of the GPU work it
    waited for, to the next GPU operation's start, at most the call's own duration: the host work between the call's
    return and that operation could have been done while the call waited. A call returning on a busy GPU, before the
    first GPU operation or after the last one leaves none (the wait itself is GPU time, which the call cannot save)."""
    s, e = busy
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if not len(s) or not len(ends):
        return 0.0
    before = np.searchsorted(s, ends, side="right") - 1  # the last busy run that started by the call's return
    after = before + 1
    ok = (before >= 0) & (after < len(s))
    ok[ok] &= e[before[ok]] <= ends[ok]  # the GPU is idle when the call returns
    if not ok.any():
        return 0.0
    gap_start = np.maximum(starts[ok], e[before[ok]])
    length = np.minimum(s[after[ok]] - gap_start, ends[ok] - starts[ok]).clip(min=0)
    return float(union_ns(gap_start, gap_start + length))


def _sync_calls(kind: str, rule_id: str, nsys: str, advice: str, amd_advice: str = ""):
    def check(facts: TimelineFacts) -> list[Finding]:
        calls = facts.tables.api_calls
        if calls.empty:
            return []
        mine = calls[calls["kind"] == kind]
        if kind in ("memcpy", "memset"):
            mine = mine[~mine["name"].astype(str).str.contains("Async")]
        mine = mine.dropna(subset=["start_ns", "end_ns"])
        if mine.empty:
            return []
        total = float(mine["duration_ns"].sum())
        busy = _gpu_busy(facts)
        if len(busy[0]):
            # A blocking call waits for GPU work: that wait is GPU time, not time the call costs. What it costs is
            # the GPU idle it leaves, which the host work after it could have covered (had it been issued during it).
            saved = idle_left(busy, mine["start_ns"].to_numpy(dtype=np.int64),
                              mine["end_ns"].to_numpy(dtype=np.int64))
            reasoning = ("the GPU idle each call leaves, from the end of the work it waited for to the host's next "
                         "GPU operation, at most the call's own time: the host work after it could have been issued "
                         "during it; the wait itself is GPU time the call cannot save")
        else:  # no GPU operation in the trace to tell idle from busy: the host's wait is all that bounds it
            saved, reasoning = total, ("the trace records no GPU operation: the host's wait in the calls is the "
                                       "most that overlapping it can save")
        if facts.span_ns and saved / facts.span_ns < CALL_FLOOR:
            return []
        names = ", ".join(f"{n} ×{c}" for n, c in mine["name"].value_counts().head(3).items())
        what = {"memcpy": "synchronous memcpy", "memset": "synchronous memset", "sync": "synchronization"}[kind]
        text = f"{len(mine)} {what} call{'s' * (len(mine) != 1)} ({names}) held the host {total / 1e6:.3f} ms in all"
        evidence = [Evidence(f"{what} calls", len(mine), facts.nsys(nsys, f"nsys {nsys} rule ({NSYS_RULES})")),
                    Evidence("host time in them", round(total / 1e6, 3), "", "ms")]
        if len(busy[0]):
            text += (f" and left the GPU idle {saved / 1e6:.3f} ms after them, until the host issued its next GPU "
                     "work")
            evidence.append(Evidence("GPU idle they leave", round(saved / 1e6, 3),
                                     f">= {CALL_FLOOR:.0%} of the span; at most each call's own time", "ms"))
        return [Finding("timeline", text + ".", tuple(evidence), (amd_advice or advice) if facts.vocab.amd else advice,
                        "measured", rule=rule_id, gain=facts.gain(saved, reasoning))]
    return check


SYNC_MEMCPY = Rule("sync-memcpy", "timeline", "synchronous (non-Async) memcpy calls leaving the GPU idle after "
                   f"them >= {CALL_FLOOR:.0%} of the span", f"nsys cuda_memcpy_sync rule "
                   f"({NSYS_RULES})", _sync_calls("memcpy", "sync-memcpy", "cuda_memcpy_sync",
                                                  "Use cudaMemcpyAsync on a stream with pinned host memory (PyTorch: "
                                                  ".to(device, non_blocking=True) from pinned tensors), so the host "
                                                  "does not wait for the copy.",
                                                  # hipMemcpyAsync (HIP runtime API reference, "Memory management").
                                                  "Use hipMemcpyAsync on a stream with pinned host memory "
                                                  "(hipHostMalloc; PyTorch on ROCm: .to(device, non_blocking=True) "
                                                  "from pinned tensors), so the host does not wait for the copy."),
                   scope="timeline",
                   requires=_needs_calls)
SYNC_MEMSET = Rule("sync-memset", "timeline", "synchronous (non-Async) memset calls leaving the GPU idle after "
                   f"them >= {CALL_FLOOR:.0%} of the span", f"nsys cuda_memset_sync rule "
                   f"({NSYS_RULES})", _sync_calls("memset", "sync-memset", "cuda_memset_sync",
                                                  "Use cudaMemsetAsync on the work's stream.",
                                                  "Use hipMemsetAsync on the work's stream."), scope="timeline",
                   requires=_needs_calls)
SYNC_API = Rule("sync-api", "timeline", "calls that block the host until the GPU finishes (device, stream or event "
                f"synchronize, stream wait) leaving the GPU idle after them >= {CALL_FLOOR:.0%} of the span",
                f"nsys cuda_api_sync rule ({NSYS_RULES})",
                _sync_calls("sync", "sync-api", "cuda_api_sync",
                            "Synchronise only where the host needs a result (in PyTorch, .item(), .cpu() and "
                            "printing a tensor synchronise); use events between streams instead of a device-wide "
                            "synchronize."), scope="timeline", requires=_needs_calls)


def _launch_bound(facts: TimelineFacts) -> list[Finding]:
    split = facts.line.launches
    if split is None or split.per_kernel.empty or facts.capturing:
        return []
    out = []
    graph_starts = _graph_kernel_starts(facts.tables)
    for device, rows in split.per_kernel.groupby("device", sort=True):
        rows = rows.sort_values("start", kind="stable")
        short = ((rows["end"] - rows["start"]) < rows["api_ns"]).to_numpy()
        # Runs of consecutive short kernels: a run id that changes at every long kernel, and wherever a CUDA graph's
        # kernels ran between two of them (the graph's work is not launch-bound; the split leaves graph kernels out).
        starts = rows["start"].to_numpy()
        graphs = graph_starts.get(int(device), np.zeros(0, dtype=np.int64))
        between = np.searchsorted(graphs, starts) - np.searchsorted(graphs, np.concatenate([starts[:1], starts[:-1]]))
        run = np.cumsum(~short | (between > 0))
        spans, inside, kernels = 0.0, 0.0, 0
        for _, members in rows[short].groupby(run[short]):
            if len(members) < LAUNCH_BOUND_RUN:
                continue
            spans += float(members["end"].max() - members["start"].min())
            inside += float((members["end"] - members["start"]).sum())
            kernels += len(members)
        if kernels == 0:
            continue
        total = split.per_kernel["end"].max() - split.per_kernel["start"].min()
        out.append(Finding("timeline", f"GPU {device}: {kernels} kernels run in launch-bound stretches (each shorter "
                                       f"than its launch call, {LAUNCH_BOUND_RUN} or more in a row), covering "
                                       f"{spans / 1e6:.3f} ms ({spans / total:.0%} of the span) with only "
                                       f"{inside / 1e6:.3f} ms of kernel time in them.",
                           (Evidence("kernels in launch-bound stretches", kernels, f"kernel time < its launch call's, "
                                     f"{LAUNCH_BOUND_RUN}+ in a row (iotrace; TraceLens / HTA kernel-launch "
                                     "overhead)"),
                            Evidence("stretch span", round(spans / 1e6, 3), "", "ms")),
                           f"Capture the stretch as a {facts.vocab.graph} ({facts.vocab.graph_how}) or fuse its "
                           "kernels, so one launch replaces many.", "measured",
                           rule=LAUNCH_BOUND.id, gain=facts.gain(spans - inside, "the stretches' span less their "
                                                              "kernel time: the launch overhead a graph removes")))
    return out


def _graph_kernel_starts(tables: TraceTables) -> dict[int, np.ndarray]:
    """Per device, the sorted start times of the kernels CUDA graphs ran."""
    graph = tables.column("kernels", "graph_launch_id")
    ran = ~np.isnan(graph)
    if not ran.any():
        return {}
    device = np.nan_to_num(tables.column("kernels", "device")[ran], nan=-1).astype(np.int64)
    start = np.nan_to_num(tables.column("kernels", "start_ns")[ran], nan=-1).astype(np.int64)
    return {int(d): np.sort(start[device == d]) for d in np.unique(device)}


LAUNCH_BOUND = Rule("launch-bound", "timeline", f"{LAUNCH_BOUND_RUN} or more consecutive kernels, each shorter than "
                    "its launch API call", "HTA kernel-launch overhead analysis (facebookresearch/"
                    "HolisticTraceAnalysis); the run length is iotrace's", _launch_bound, scope="timeline",
                    requires=_needs_launch_times)


def _tiny_launches(facts: TimelineFacts) -> list[Finding]:
    kernels = facts.tables.kernels
    if kernels.empty or facts.capturing:
        return []  # while graphs are captured the launches are the capture, not overhead a graph would remove
    duration = kernels["duration_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    # One launch per row, not run by a CUDA graph (its launches are already one), not a collective (its launch is
    # the protocol's, not fusable): the launches a fusion or a graph would merge.
    mine = kernels[(duration < TINY_LAUNCH_NS) & (kernels["launches"].to_numpy() == 1)
                   & kernels["graph_launch_id"].isna().to_numpy() & ~comm_mask(kernels["name"]).to_numpy()]
    if len(mine) < LAUNCH_BOUND_RUN:
        return []
    total = float(mine["duration_ns"].sum())
    by_function = (mine.assign(function=mine["name"].astype(str).map(function_name))
                   .groupby("function", sort=False)["duration_ns"].agg(["count", "sum"])
                   .sort_values("sum", ascending=False, kind="stable"))
    top = "; ".join(f"{name} ×{int(row['count'])} ({row['sum'] / 1e6:.3f} ms)"
                    for name, row in by_function.head(TINY_NAMED).iterrows())
    more = len(by_function) - TINY_NAMED
    limit = f"{TINY_LAUNCH_NS / 1e3:g} µs"
    v, functions = facts.vocab, len(by_function)
    return [Finding("timeline", f"{len(mine)} launches under {limit} each ({total / 1e6:.3f} ms of kernel time in "
                                f"all, {functions} kernel function{'s' * (functions != 1)}): fuse them or capture a "
                                f"{v.graph}. Most time: {top}" + (f"; and {more} more." if more > 0 else "."),
                    (Evidence("launches under " + limit, len(mine), f"< {limit} each: " + v.same_check(
                        f"mostly launch cost ({CUDA_GRAPHS_BLOG})", f"NVIDIA's launch-cost timing ({CUDA_GRAPHS_BLOG})")
                              + "; not in a graph, not communication"),
                     Evidence("their time", round(total / 1e6, 3), "", "ms")),
                    f"Fuse them (torch.compile fuses elementwise and reduction kernels into one) or capture the "
                    f"sequence as a {v.graph} ({v.graph_how}), so one launch replaces many; more "
                    f"{v.block}s per launch cannot help a launch this short.", "measured", rule=TINY_LAUNCHES.id,
                    gain=facts.gain(total, "fusing or capturing them saves at most their own time"))]


TINY_LAUNCHES = Rule("tiny-launches", "timeline", f"{LAUNCH_BOUND_RUN} or more launches under {TINY_LAUNCH_NS / 1e3:g} "
                     "µs each, outside CUDA graphs, not communication: one finding for all of them",
                     f"{CUDA_GRAPHS_BLOG} (a few µs of every launch are not the kernel's work)", _tiny_launches,
                     scope="timeline")


def _exposed(facts: TimelineFacts) -> list[Finding]:
    split = facts.line.split
    if split is None:
        return []
    out = []
    for row in split.devices.to_dict("records"):
        if row["communication_share"] < EXPOSED_SHARE:
            continue
        out.append(Finding("timeline", f"GPU {row['device']}: communication kernels run "
                                       f"{row['communication_ns'] / 1e6:.1f} ms ({row['communication_share']:.0%} of "
                                       "the span) with no compute kernel beside them: exposed, not overlapped.",
                           (Evidence("exposed communication share", round(row["communication_share"], 3),
                                     f">= {EXPOSED_SHARE} (iotrace; HTA's communication-computation overlap)"),),
                           INFERENCE_OVERLAP if facts.inference else
                           "Overlap the collectives with compute: bucket gradients so all-reduce starts during the "
                           "backward pass (DDP bucket_cap_mb), or prefetch (FSDP forward/backward prefetch); check "
                           "for a slow rank the others wait for (iotrace report across the ranks).", "measured",
                           rule=EXPOSED.id, gain=Gain(float(row["communication_share"]), float(row["span_ns"]),
                                                      "exposed communication is the most overlap can hide")))
    return out


EXPOSED = Rule("comm-exposed", "timeline", f"communication kernels alone on the GPU for >= {EXPOSED_SHARE:.0%} of the "
               "span", "HTA's communication-computation overlap (facebookresearch/HolisticTraceAnalysis)", _exposed,
               scope="timeline")


def _copy_share(facts: TimelineFacts) -> list[Finding]:
    line = facts.line
    share = line.memcpy.get("share")
    if share is None or share <= MEMCPY_SHARE:
        return []
    split = line.split
    exposed = float(line.memcpy["copy_ns"]) if split is None else float(split.devices["copies_ns"].sum())
    return [Finding("timeline", f"Memory copies and sets take {share * 100:.0f}% of GPU busy time.",
                    (Evidence("copy share", round(share, 3), f"> {MEMCPY_SHARE}"),),
                    "Keep data on the device between steps; use pinned memory and async copies that overlap "
                    "kernels.", "measured", rule=COPY_SHARE.id,
                    gain=facts.gain(exposed, "removing every copy and set saves at most the time they run with no "
                                             "kernel beside them"))]


COPY_SHARE = Rule("copy-share", "timeline", f"copies and sets over {MEMCPY_SHARE:.0%} of GPU busy time",
                  "iotrace (steady-state inference keeps weights and KV cache on the device)", _copy_share,
                  scope="timeline")


def _top_kernel(facts: TimelineFacts) -> list[Finding]:
    line = facts.line
    if not len(line.top_kernels):
        return []
    first = line.top_kernels.iloc[0]
    launches = int(first["launches"])
    name = str(first["name"])
    total, share = float(first["total_ns"]), float(first["share_pct"])
    # Only a kernel that is the workload gets a gain: its own time bounds what tuning it saves (Amdahl's law), and
    # no other kernel can be worth more. Below half of kernel time its whole time is no estimate (removing a kernel is
    # not tuning it): "gain not estimated". Where the trace's counters give its roofline floor, the time above it
    # bounds the gain instead (:func:`floor_bounded`, once the kernel rows' verdicts are drawn). A collective's time
    # is mostly waiting on its peers: the exposed-communication finding bounds what overlap saves.
    gain = None
    if not is_communication(name) and total > 0 and share >= WORKLOAD_SHARE_PCT:
        gain = facts.gain(total, f"{_amdahl(share)}; its profile says how much")
    return [Finding("timeline", f"The top kernel takes {share:.0f}% of kernel time "
                                f"({launches} launch{'es' * (launches != 1)}, {total / 1e6:.3f} ms).",
                    (Evidence("share", round(share, 2), f"gain estimated from {WORKLOAD_SHARE_PCT:g}%: Amdahl's law",
                              "%"),),
                    f"Profile this kernel with {_profile_with(facts.vocab)} first: it bounds what tuning anything else "
                    "can win.",
                    "measured", None, name, "info", TOP_KERNEL.id, gain)]


def _amdahl(share: float) -> str:
    return (f"it takes {share:.0f}% of kernel time, at least half: tuning it saves at most its own time, and no other "
            "kernel can save more (Amdahl's law)")


def floor_bounded(findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with the top kernel's gain bounded by its time above its roofline floor, where the trace's counters
    give that floor: each of its rows (launch configurations) with a ``bound`` finding, at x% of the binding roof,
    spends x of its time at the floor, which no tuning short of moving fewer bytes or doing fewer FLOPs saves; a row
    without one keeps its whole time. A top kernel without a gain (under half of kernel time) stays without one."""
    out = list(findings)
    at = next((i for i, f in enumerate(out) if f.rule == TOP_KERNEL.id), None)
    top = None if at is None else out[at]
    if top is None or top.gain is None or top.gain.ns is None:
        return out
    rows = [f.gain for f in out if f.rule == BOUND.id and f.kernel == top.kernel and f.gain is not None
            and f.gain.of_ns]
    if not rows:
        return out
    total = top.gain.ns
    floor = min(total, sum((1.0 - g.fraction) * g.of_ns for g in rows))  # type: ignore[operator]
    above, of_ns = total - floor, top.gain.of_ns or total
    reasoning = (f"{_amdahl(float(top.evidence[0].value))}; its counters put {floor / 1e6:.3f} ms of its "
                 f"{total / 1e6:.3f} ms at its roofline floor (its bound verdict), which only fewer bytes or FLOPs "
                 "can save: the time above it bounds the gain")
    evidence = (*top.evidence, Evidence("time above its roofline floor", round(above / 1e6, 3),
                                        f"{total / 1e6:.3f} ms less the floor its counters give", "ms"))
    out[at] = replace(top, evidence=evidence, gain=Gain(above / of_ns if of_ns else 0.0, of_ns, reasoning))
    return out


def _profile_with(v: Vocabulary) -> str:
    """"ncu" (NVIDIA's text as it was), "rocprof-compute (rocprof-compute profile)"."""
    return v.kernel_profiler if not v.amd else f"{v.kernel_profiler} ({v.kernel_profile_command})"


TOP_KERNEL = Rule("top-kernel", "timeline", "always: the kernel with the most GPU time; a gain from "
                  f"{WORKLOAD_SHARE_PCT:g}% of kernel time", "Amdahl's law (Amdahl 1967, 'Validity of the single "
                  "processor approach to achieving large scale computing capabilities'): it bounds what tuning "
                  "anything else can win", _top_kernel, scope="timeline")

TIMELINE_RULES: tuple[Rule, ...] = (GPU_GAPS, GPU_UTIL, PAGEABLE, SYNC_MEMCPY, SYNC_MEMSET, SYNC_API,
                                    LAUNCH_BOUND, TINY_LAUNCHES, EXPOSED, COPY_SHARE, TOP_KERNEL)
