"""An engine's steps, found in its own trace: each forward pass with its phase, requests and tokens.

A step is one forward pass of an inference engine: a prefill, a decode step of a batch, or a mixed batch. It is found
from the marks the engine (or iotrace's runner) leaves on the host timeline, in this order, the first source that
marks any step winning:

1. ``--steps REGEX``: ranges (NVTX, ``record_function``, Python functions) whose name the expression matches;
2. vLLM's step annotations, ``execute_context_N(T)_generation_M(G)`` (``vllm/v1/worker/gpu_model_runner.py`` and the
   CPU runner, V1 since 0.9: N prefill requests of T tokens in all, M decode requests of G tokens), which state the
   batch;
3. the ranges iotrace's runners add around each forward (``iotrace/step <phase> requests=R tokens=T context=C``,
   :mod:`iotrace.engines.runner.engine_common`), which state it too;
4. vLLM V1's ``GPUModelRunner.execute_model`` Python function (traces recorded with ``with_stack``; older V1 builds
   mark a step only so), whose phase is inferred: a step that replays CUDA graphs is a decode (vLLM captures graphs for
   decode batches; a long prompt runs eager), a step that launched no GPU work is empty;
5. iotrace's own decoder's NVTX ranges (``iotrace/prefill``, ``iotrace/decode step``): the phase, no counts.

A step's GPU work is what its host side launched (a kernel's launching call, ``kernels.launch_ns``, within the step's
host range on its process), not what happens to run inside the range: with asynchronous launches a step's kernels
often run after its range has ended. :func:`find_steps` returns the table (:data:`STEP_COLUMNS`) and how it was found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from iotrace.errors import InvalidValueError

if TYPE_CHECKING:
    import pandas as pd

    from iotrace.trace.tables import TraceTables

__all__ = ["IOTRACE_STEP", "NO_STEPS", "STEP_COLUMNS", "Steps", "find_steps", "step_work"]

#: vLLM V1's step annotation (vllm/v1/worker/gpu_model_runner.py, ``_model_forward`` under ``record_function``):
#: prefill ("context") requests and their tokens, decode ("generation") requests and their tokens.
VLLM_STEP = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
#: The range iotrace's engine runners put around each forward (engine_common.STEP_RANGE and step_range_name).
IOTRACE_STEP = re.compile(r"^iotrace/step (prefill|decode|mixed) requests=(\d+) tokens=(\d+) context=(\d+)$")
#: iotrace's decoder's own NVTX phase ranges (iotrace.model.decoder: ``ops.range("prefill")`` and "decode step").
IOTRACE_PHASES = {"iotrace/prefill": "prefill", "iotrace/decode step": "decode"}
STEP_COLUMNS = ["step", "start_ns", "end_ns", "phase", "requests", "prompt_tokens", "generated", "tokens", "context",
                "graph_launches", "kernels", "work_end_ns", "process", "thread", "name"]
NO_STEPS = ("no engine step found in this trace: it holds no vLLM step annotation "
            "(execute_context_N(T)_generation_M(G)), no iotrace/step range and no execute_model Python function; "
            "name the range that marks a step with --steps REGEX, or record the trace with "
            "`iotrace bench --engine NAME --profile`")


@dataclass
class Steps:
    """The steps of one trace: ``frame`` (columns :data:`STEP_COLUMNS`, one row per step in start order), the source
    that marked them (in words), whether the batch counts are stated by it or inferred, and notes."""

    frame: pd.DataFrame
    source: str
    counts: str  # "stated" (the marks give requests and tokens), "inferred" (phase only, inferred) or "phase only"
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.frame)

    def phases(self) -> dict[str, int]:
        """How many steps of each phase, e.g. {"prefill": 1, "decode": 9}."""
        return {str(k): int(v) for k, v in self.frame["phase"].value_counts(sort=False).items()}


def find_steps(tables: TraceTables, pattern: str | None = None) -> Steps | None:
    """The steps of ``tables`` (see the module docstring for the sources, in order), or None where no source marks one.

    :param pattern: a regular expression naming the ranges that are steps (``--steps``); it wins over the rest.
    :raises InvalidValueError: a pattern that is not a regular expression, or one that matches no range.
    """
    import pandas as pd

    ranges = tables.ranges
    host = ranges[~ranges["domain"].isin(["gpu_user_annotation"])] if len(ranges) else ranges
    host = host.dropna(subset=["start_ns", "end_ns"]) if len(host) else host
    if pattern is not None:
        try:
            wanted = re.compile(pattern)
        except re.error as exc:
            raise InvalidValueError(f"--steps {pattern!r} is not a regular expression ({exc})",
                                    "give a Python regular expression, e.g. --steps 'execute_model'") from None
        rows = host[[bool(wanted.search(str(n))) for n in host["name"]]] if len(host) else host
        if not len(rows):
            names = sorted(set(map(str, host["name"])))[:5] if len(host) else []
            raise InvalidValueError(f"--steps {pattern!r} matches no range of this trace",
                                    f"its ranges include {', '.join(map(repr, names))}" if names
                                    else "this trace holds no ranges: record one per step")
        return _finish(tables, rows, [_unstated(n) for n in rows["name"]], f"ranges matching --steps {pattern!r}",
                       "phase only")
    for source, parse, counts in ((_VLLM, _vllm_counts, "stated"), (_IOTRACE, _iotrace_counts, "stated")):
        names = host["name"].astype(str) if len(host) else pd.Series([], dtype=object)
        hit = names.str.match(source.pattern)
        if hit.any():
            rows = host[hit.to_numpy()]
            found = _finish(tables, rows, [parse(n) for n in rows["name"]], source.words, counts)
            if source is _VLLM:
                _context_from_runner(found, host, names)
            return found
    if len(host):
        python = host[host["domain"] == "python_function"]
        if len(python):
            steps = _finish(tables, python, [_unstated(n) for n in python["name"]],
                            "vLLM's GPUModelRunner.execute_model Python function", "inferred")
            _infer_phases(steps)
            return steps
        phases = host[host["name"].isin(list(IOTRACE_PHASES))]
        if len(phases):
            return _finish(tables, phases, [(IOTRACE_PHASES[n], None, None, None, None, None) for n in phases["name"]],
                           "iotrace's decoder NVTX ranges (iotrace/prefill, iotrace/decode step)", "phase only")
    return None


@dataclass(frozen=True)
class _Source:
    pattern: str
    words: str


_VLLM = _Source(VLLM_STEP.pattern, "vLLM's step annotations (execute_context_N(T)_generation_M(G))")
_IOTRACE = _Source(IOTRACE_STEP.pattern, "iotrace's runner ranges (iotrace/step …)")
#: (phase, requests, prompt tokens, generated tokens, tokens processed, context) of one step; None where unknown.
_Counts = tuple[str | None, int | None, int | None, int | None, int | None, int | None]


def _vllm_counts(name: str) -> _Counts:
    match = VLLM_STEP.match(name)
    assert match is not None
    prefills, prefill_tokens, decodes, decode_tokens = (int(g) for g in match.groups())
    phase = "mixed" if prefills and decodes else "prefill" if prefills else "decode" if decodes else "empty"
    # Every request in the batch gets a token, a chunked prefill's last chunk included; an earlier chunk gets none,
    # which the annotation does not say: prefill requests count as generating one each (the common, unchunked case).
    return phase, prefills + decodes, prefill_tokens, prefills + decodes, prefill_tokens + decode_tokens, None


def _iotrace_counts(name: str) -> _Counts:
    match = IOTRACE_STEP.match(name)
    assert match is not None
    phase, requests, tokens, context = match.group(1), *(int(g) for g in match.groups()[1:])
    prompt = tokens if phase == "prefill" else None
    return phase, requests, prompt, requests, tokens, context


def _context_from_runner(steps: Steps, host: pd.DataFrame, names: pd.Series) -> None:
    """vLLM's annotations state no context: where iotrace's runner put its own range around the engine step (``iotrace
    bench --engine vllm --profile``), the context it states is the step's."""
    import pandas as pd

    runner = host[names.str.match(IOTRACE_STEP.pattern).to_numpy()].sort_values("start_ns", kind="stable")
    if not len(runner):
        return
    starts = runner["start_ns"].to_numpy(dtype=np.int64)
    ends = runner["end_ns"].to_numpy(dtype=np.int64)
    contexts = [_iotrace_counts(str(n))[5] for n in runner["name"]]
    frame = steps.frame
    found = []
    for start, end in zip(frame["start_ns"], frame["end_ns"], strict=True):
        at = int(np.searchsorted(starts, start, side="right")) - 1
        found.append(contexts[at] if at >= 0 and ends[at] >= end else None)
    frame["context"] = pd.array(found, dtype="Int64")


def _unstated(name: object) -> _Counts:
    return None, None, None, None, None, None


def _finish(tables: TraceTables, rows: pd.DataFrame, counts: list[_Counts], source: str, stated: str) -> Steps:
    """The steps table of the marking ``rows`` (outermost marks only: a mark inside another is the same step)."""
    import pandas as pd

    by_row = dict(zip(rows.index, counts, strict=True))
    rows = rows.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
    start = rows["start_ns"].to_numpy(dtype=np.int64)
    end = rows["end_ns"].to_numpy(dtype=np.int64)
    keep: list[int] = []
    for i in range(len(rows)):
        if keep and start[i] >= start[keep[-1]] and end[i] <= end[keep[-1]]:
            continue  # nested in the step before: a second mark of the same step
        keep.append(i)
    kept = rows.iloc[keep]
    launched = step_work(tables, kept["start_ns"].to_numpy(dtype=np.int64), kept["end_ns"].to_numpy(dtype=np.int64),
                         kept["process"].to_numpy(dtype=np.float64, na_value=np.nan))
    records = []
    for n, (index, row) in enumerate(zip(kept.index, kept.itertuples(index=False), strict=True)):
        phase, requests, prompt, generated, tokens, context = by_row[index]
        records.append({"step": n, "start_ns": int(row.start_ns), "end_ns": int(row.end_ns), "phase": phase,
                        "requests": requests, "prompt_tokens": prompt, "generated": generated, "tokens": tokens,
                        "context": context, "graph_launches": int(launched["graph_launches"][n]),
                        "kernels": int(launched["kernels"][n]), "work_end_ns": launched["work_end_ns"][n],
                        "process": None if pd.isna(row.process) else int(row.process),
                        "thread": None if pd.isna(row.thread) else int(row.thread), "name": str(row.name)})
    frame = pd.DataFrame(records, columns=STEP_COLUMNS)
    for column in ("requests", "prompt_tokens", "generated", "tokens", "context", "process", "thread", "work_end_ns"):
        frame[column] = frame[column].astype("Int64")
    notes = []
    if len(kept) < len(rows):
        notes.append(f"{len(rows) - len(kept)} step mark(s) nested in another were counted once")
    return Steps(frame, source, stated, notes)


def step_work(tables: TraceTables, start: np.ndarray, end: np.ndarray, process: np.ndarray) -> dict[str, np.ndarray]:
    """Per step (host ranges ``start``..``end`` on ``process``): the kernels and CUDA graph launches its host side
    launched, and the end of the last of them (``work_end_ns``; the range's end where it launched none).

    A kernel belongs to the step whose range holds its launching call's start (``kernels.launch_ns``); a kernel the
    file joins to no call (no runtime events recorded) belongs to the step whose range holds its own start."""
    n = len(start)
    out = {"kernels": np.zeros(n, dtype=np.int64), "graph_launches": np.zeros(n, dtype=np.int64),
           "work_end_ns": end.astype(np.int64).copy()}
    if not n or not tables.rows("kernels"):
        return out
    at = owner_of(tables, start, end, process)
    k_end = tables.column("kernels", "end_ns")
    graph = tables.column("kernels", "graph_launch_id")
    launch = tables.column("kernels", "launch_ns")
    for step in range(n):
        mine = at == step
        if not mine.any():
            continue
        out["kernels"][step] = int(mine.sum())
        ends = k_end[mine]
        ends = ends[~np.isnan(ends)]
        if len(ends):
            out["work_end_ns"][step] = max(int(end[step]), int(ends.max()))
        graph_mine = mine & ~np.isnan(graph)
        out["graph_launches"][step] = len(set(zip(graph[graph_mine].tolist(), launch[graph_mine].tolist(),
                                                  strict=True)))
    return out


def owner_of(tables: TraceTables, start: np.ndarray, end: np.ndarray, process: np.ndarray) -> np.ndarray:
    """For each kernel, the index of the step (host range) that launched it, -1 for none (see :func:`step_work`)."""
    launch = tables.column("kernels", "launch_ns")
    k_start = tables.column("kernels", "start_ns")
    when = np.where(np.isnan(launch), k_start, launch)
    at = np.searchsorted(start, when, side="right") - 1
    valid = (at >= 0) & ~np.isnan(when)
    at = np.where(valid, at, 0)
    inside = valid & (when < end[at])
    # Only the step's own process launches its work (a multi-process trace holds every rank's host threads).
    k_process = _kernel_process(tables)
    same = np.isnan(process[at]) | np.isnan(k_process) | (process[at] == k_process)
    return np.where(inside & same, at, -1)


def _kernel_process(tables: TraceTables) -> np.ndarray:
    """Each kernel's launching process, where the file joins it to an API call; NaN elsewhere."""
    calls = tables.rows("api_calls")
    corr = tables.column("kernels", "correlation_id")
    if not calls:
        return np.full(len(corr), np.nan)
    call_corr = tables.column("api_calls", "correlation_id")
    call_process = tables.column("api_calls", "process")
    good = ~np.isnan(call_corr)
    order = np.argsort(call_corr[good], kind="stable")
    keys, values = call_corr[good][order], call_process[good][order]
    at = np.clip(np.searchsorted(keys, corr), 0, max(len(keys) - 1, 0))
    found = (len(keys) > 0) & ~np.isnan(corr)
    hit = found & (keys[at] == corr) if len(keys) else np.zeros(len(corr), dtype=bool)
    return np.where(hit, values[at] if len(keys) else np.nan, np.nan)


def _infer_phases(steps: Steps) -> None:
    """Phases of steps marked without counts: CUDA-graph replays decode, a step with no GPU work is empty, and an eager
    step at least twice as long as the median graph step is a prefill; anything else stays unknown (None)."""
    frame = steps.frame
    spans = (frame["work_end_ns"].astype("float64") - frame["start_ns"].astype("float64")).to_numpy()
    graphs = frame["graph_launches"].to_numpy() > 0
    empty = frame["kernels"].to_numpy() == 0
    typical = float(np.median(spans[graphs])) if graphs.any() else None
    phases = []
    for span, graphed, idle in zip(spans, graphs, empty, strict=True):
        if idle:
            phases.append("empty")
        elif graphed:
            phases.append("decode")
        elif typical is not None and span >= 2 * typical:
            phases.append("prefill")
        else:
            phases.append(None)
    frame["phase"] = phases
    steps.notes.append("phases inferred: a step that replays CUDA graphs is a decode step (vLLM captures graphs for "
                       "decode batches), an eager step at least 2x the median decode step a prefill, a step that "
                       "launched no GPU work empty; the batch and token counts are not in the trace (give --batch)")
