"""Where the tok/s went: an engine's steps (:mod:`steps`), each one's waterfall (:mod:`waterfall`), and per phase the
figures a reader compares, each beside its wall.

The walls are the identities on the model and the machine the trace ran on:

- a decode step reads every weight once and each request's KV cache (identities 1 and 3): its floor is
  (N·q + Σ KV bytes at the request's context) / (tp · B), so decode tok/s ≤ generated tokens / floor;
- a prefill step does 2·N·T FLOPs (identity 2) and reads the weights: its floor is the larger of 2·N·T / (tp · peak)
  and N·q / (tp · B);
- the weight matrix products' own floor is N·q / (tp · B) per step, attention's the KV bytes it reads / (tp · B).

N is the active parameters (a mixture of experts reads only its routed experts per token). A step faster than its
floor means the model, the bits, the batch or the card is not what was given: :func:`step_report` refuses it rather
than print a percentage above 100.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from iotrace.errors import InvalidValueError
from iotrace.identities import kv_cache_bytes, time_beyond_floor
from iotrace.trace.reports.records import Evidence, Finding, Gain
from iotrace.trace.reports.step_roles import CATEGORIES, CPU_LABELS, LABELS
from iotrace.trace.reports.steps import NO_STEPS, Steps, find_steps
from iotrace.trace.reports.waterfall import Waterfall, waterfall

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

__all__ = ["INFERENCE_OVERLAP", "Machine", "PhaseFigures", "StepModel", "StepOptions", "StepReport", "machine_of",
           "step_report"]

#: A finding is drawn for a category at this share of a phase's step time or more (below it, a tenth of the time is
#: within the run-to-run spread of a 2-core CPU run and of GPU step jitter: the H100 trace's decode steps vary ±4%).
SHARE_FINDING = 0.10


@dataclass(frozen=True)
class StepModel:
    """What the wall needs of the model: parameters (all and active), bytes per weight, the KV cache's shape."""

    name: str
    params: float
    bytes_per_weight: float
    source: str
    active_params: float | None = None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    hidden: int | None = None
    kv_bytes_per_value: float | None = None

    def __post_init__(self) -> None:
        if not self.params > 0 or not self.bytes_per_weight > 0:
            raise InvalidValueError(f"model {self.name}: params {self.params:g} and bytes per weight "
                                    f"{self.bytes_per_weight:g} must be positive", "give --params N and --bits Q > 0")
        if self.active_params is not None and not 0 < self.active_params <= self.params:
            raise InvalidValueError(f"--active-params {self.active_params:g} is not within (0, {self.params:g}]",
                                    "give the parameters one token reads (a mixture of experts: its routed share)")

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights one forward reads: the active parameters at their width."""
        return (self.active_params or self.params) * self.bytes_per_weight

    def kv_bytes(self, context: float) -> float | None:
        """Identity 3 at ``context`` tokens for one request, or None where the KV shape is unknown."""
        if None in (self.layers, self.kv_heads, self.head_dim, self.kv_bytes_per_value) or not context > 0:
            return None
        return kv_cache_bytes(self.layers, self.kv_heads, self.head_dim, context,  # type: ignore[arg-type]
                              self.kv_bytes_per_value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Machine:
    """The device the trace ran on: its memory bandwidth (B/s) and where it came from, its dense peak (FLOP/s, None
    where unknown) and the tensor-parallel degree (each rank holds 1/tp of the weights and KV heads)."""

    bandwidth: float
    source: str
    peak_flop_per_s: float | None = None
    peak_source: str = ""
    tp: int = 1
    #: True where the bandwidth was measured (a copy loop), which a step can beat; False for a datasheet or a figure
    #: the user gave, which a step beating means the model, bits, batch or card given is wrong.
    measured: bool = False


@dataclass(frozen=True)
class StepOptions:
    """What ``iotrace report --model/--steps/--bandwidth/--tp/--batch`` gives the step report."""

    pattern: str | None = None
    model: StepModel | None = None
    machine: Machine | None = None
    #: Requests per step where the trace's marks do not say (vLLM's execute_model Python function).
    batch: int | None = None


@dataclass
class PhaseFigures:
    """One phase's figures over its steps: times in ms, tokens, tok/s, the wall and the waterfall's shares."""

    phase: str
    steps: int
    median_ms: float
    p90_ms: float
    tokens_per_step: float | None
    tok_s: float | None
    wall_tok_s: float | None
    pct_of_wall: float | None
    categories_ns: dict[str, int]
    span_ns: int
    gemm_floor_pct: float | None = None
    attention_floor_pct: float | None = None
    wall_basis: str = ""

    def share(self, category: str) -> float:
        return self.categories_ns[category] / self.span_ns if self.span_ns else 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseFigures:
        """A phase back from :meth:`to_dict` (a saved bench result's waterfall), its derived keys (``gaps``)
        recomputed, not read."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def gaps(self) -> list[tuple[str, int]]:
        """Each category's time beyond its floor, largest first (zeros left out): the weight GEMMs and attention
        less the time their bytes take at the wall's bandwidth (their floors: ``gemm_floor_pct``,
        ``attention_floor_pct``; a floor beaten counts no gap), every other row whole (its floor in a step is zero:
        it moves no weight or KV byte the wall counts). The rows a change can recover, in the order they pay. Without a
        weight floor (no model given, or no GEMM in the step) there are no gaps to state: empty."""
        if self.gemm_floor_pct is None:
            return []
        return time_beyond_floor(self.categories_ns, {"gemm": self.gemm_floor_pct,
                                                      "attention": self.attention_floor_pct})

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "steps": self.steps, "median_ms": self.median_ms, "p90_ms": self.p90_ms,
                "tokens_per_step": self.tokens_per_step, "tok_s": self.tok_s, "wall_tok_s": self.wall_tok_s,
                "pct_of_wall": self.pct_of_wall, "wall_basis": self.wall_basis, "span_ns": self.span_ns,
                "categories_ns": self.categories_ns, "gemm_floor_pct": self.gemm_floor_pct,
                "attention_floor_pct": self.attention_floor_pct,
                "gaps": [{"category": c, "ns": ns, "pct_of_step": 100.0 * ns / self.span_ns if self.span_ns else None}
                         for c, ns in self.gaps()]}


@dataclass
class StepReport:
    """The steps of a trace, their waterfall and per-phase figures, the findings they draw, and notes."""

    steps: Steps
    waterfall: Waterfall
    phases: list[PhaseFigures]
    findings: list[Finding]
    model: StepModel | None
    machine: Machine | None
    notes: list[str] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return CPU_LABELS if self.waterfall.device == "cpu" else LABELS

    def to_dict(self) -> dict[str, Any]:
        frame = self.steps.frame.join(self.waterfall.frame.drop(columns=["step"]))
        records = [{k: (None if v is None or (isinstance(v, float) and v != v) or v is _NA else _plain(v))
                    for k, v in row.items()} for row in frame.to_dict("records")]
        return {"source": self.steps.source, "counts": self.steps.counts, "device": self.waterfall.device,
                "categories": {c: self.labels[c] for c in CATEGORIES},
                "model": None if self.model is None else vars(self.model),
                "machine": None if self.machine is None else vars(self.machine),
                "phases": [p.to_dict() for p in self.phases], "steps": records,
                "other_names": [{"name": n, "ns": t} for n, t in self.waterfall.other_names[:20]],
                "uncharged_ns": self.waterfall.uncharged_ns, "notes": [*self.steps.notes, *self.notes]}


try:
    import pandas as _pd

    _NA = _pd.NA
except ImportError:  # pragma: no cover - pandas is a dependency
    _NA = object()


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def step_report(tables: TraceTables, options: StepOptions | None = None,
                capturing: str | None = None) -> StepReport | None:
    """The step report of ``tables``, or None where no step is found and none was asked for (``options.pattern``).

    :raises InvalidValueError: a ``--steps`` pattern matching nothing; a step faster than its wall (the model, bits,
        batch or card given are not the trace's); a model whose hidden size no matrix product of the trace has.
    """
    options = options or StepOptions()
    steps = find_steps(tables, options.pattern)
    if steps is None:
        if options.model is not None:
            raise InvalidValueError(f"{tables.meta.get('source')}: {NO_STEPS}", "or leave out --model")
        return None
    if options.batch is not None:
        unknown = steps.frame["requests"].isna()
        steps.frame.loc[unknown, "requests"] = options.batch
        decode = unknown & (steps.frame["phase"] == "decode")
        steps.frame.loc[decode, "generated"] = options.batch
        steps.frame.loc[decode, "tokens"] = options.batch
    if options.model is not None:
        _check_model(tables, options.model)
    flow = waterfall(tables, steps)
    phases = [_phase(steps, flow, phase, options.model, options.machine)
              for phase in ("prefill", "decode", "mixed") if (steps.frame["phase"] == phase).any()]
    notes = []
    if options.model is None:
        notes.append("no wall: give the model (--model KEY, --gguf PATH, --hf-config DIR or --params N --bits Q) "
                     "to put each phase beside identities 1-3")
    elif options.machine is None:
        notes.append("no wall: the trace names no device with a known bandwidth; give --card NAME or --bandwidth GB/s")
    if flow.uncharged_ns:
        notes.append(f"{flow.uncharged_ns / 1e6:.1f} ms between runs of steps (gaps longer than the median step) "
                     "are charged to no step")
    report = StepReport(steps, flow, phases, [], options.model, options.machine, notes)
    report.findings = _findings(report, capturing)
    return report


def _check_model(tables: TraceTables, model: StepModel) -> None:
    """Refuse a model whose hidden size is no dimension of the trace's shaped matrix products (a trace of another
    model), where the trace records shapes."""
    if model.hidden is None or not tables.rows("ops"):
        return
    dims = set()
    for name, inputs in zip(tables.column("ops", "name"), tables.column("ops", "input_dims"), strict=True):
        if str(name) in ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul") and isinstance(inputs, list):
            dims.update(d for shape in inputs if isinstance(shape, list) for d in shape if type(d) is int)
    if dims and model.hidden not in dims:
        raise InvalidValueError(f"{tables.meta.get('source')}: no matrix product of the trace has {model.name}'s "
                                f"hidden size {model.hidden} (its dimensions include {sorted(dims)[-3:]}): the trace "
                                "is of another model", "give the model the trace ran (--model, --gguf or --hf-config)")


def _phase(steps: Steps, flow: Waterfall, phase: str, model: StepModel | None,
           machine: Machine | None) -> PhaseFigures:
    mine = steps.frame["phase"] == phase
    rows = steps.frame[mine]
    spans = flow.frame.loc[mine.to_numpy(), "span_ns"].to_numpy(dtype=np.float64)
    totals = flow.totals(list(rows["step"]))
    span_ns = int(spans.sum())
    generated = rows["generated"]
    tok_s = tokens_per_step = None
    per_step = rows["prompt_tokens"] if phase == "prefill" else generated
    if per_step.notna().all() and span_ns:
        tokens_per_step = float(per_step.astype("float64").mean())
        tok_s = float(per_step.astype("float64").sum()) / (span_ns / 1e9)
    figures = PhaseFigures(phase, len(rows), float(np.median(spans) / 1e6), float(np.percentile(spans, 90) / 1e6),
                           tokens_per_step, tok_s, None, None, totals, span_ns)
    if model is None or machine is None:
        return figures
    if phase != "decode" and rows["tokens"].isna().any():
        figures.wall_basis = "no wall: the trace does not say how many tokens these steps processed"
        return figures
    tp, bandwidth = max(machine.tp, 1), machine.bandwidth
    weights_ns = model.weight_bytes / (tp * bandwidth) * 1e9
    floors, kv_ns = [], []
    for row in rows.itertuples(index=False):
        requests = 1 if row.requests is _NA or row.requests is None else int(row.requests)
        context = None if row.context is _NA or row.context is None else int(row.context)
        kv = model.kv_bytes(context) if context is not None else None
        kv_step = 0.0 if kv is None else requests * kv / (tp * bandwidth) * 1e9
        kv_ns.append(kv_step)
        floor = weights_ns + kv_step
        if phase == "prefill" and machine.peak_flop_per_s and row.tokens is not _NA and row.tokens is not None:
            flops = 2.0 * (model.active_params or model.params) * int(row.tokens)
            floor = max(floor, flops / (tp * machine.peak_flop_per_s) * 1e9)
        floors.append(floor)
    floor_ns = float(sum(floors))
    figures.wall_basis = (f"identity 1{' + 3' if any(kv_ns) else ''}"
                          f"{' and 2' if phase == 'prefill' and machine.peak_flop_per_s else ''}: "
                          f"{model.weight_bytes / 1e9:.3g} GB of weights{f' / tp {tp}' if tp > 1 else ''} at "
                          f"{bandwidth / 1e9:.4g} GB/s ({machine.source})")
    fastest = int(np.argmin(spans - np.array(floors)))
    if spans[fastest] < floors[fastest] and machine.measured:
        # A measured bandwidth (a copy loop on a busy machine) can understate the machine: the step is the better
        # measurement of it, so the wall is not a percentage here, and the report says what the step implies.
        step = int(rows["step"].iloc[fastest])
        needed = bandwidth * floors[fastest] / spans[fastest]
        figures.wall_basis += (f"; step {step} beat it ({spans[fastest] / 1e6:.3g} ms against "
                               f"{floors[fastest] / 1e6:.3g} ms): this machine moves at least {needed / 1e9:.4g} GB/s, "
                               f"more than the measured {bandwidth / 1e9:.4g} GB/s, so no % of wall is stated")
    elif spans[fastest] < floors[fastest]:
        step = int(rows["step"].iloc[fastest])
        raise InvalidValueError(
            f"step {step} ({phase}) took {spans[fastest] / 1e6:.3g} ms, faster than its wall of "
            f"{floors[fastest] / 1e6:.3g} ms ({figures.wall_basis}): above the wall, so the model, the bits, the batch "
            "or the card is not what was given", "give the trace's model (--model/--gguf/--hf-config), its bits, "
            "--batch or --card/--bandwidth")
    beaten = bool(spans[fastest] < floors[fastest])
    figures.pct_of_wall = 100.0 * floor_ns / span_ns if span_ns and not beaten else None
    if tok_s is not None and figures.pct_of_wall:
        figures.wall_tok_s = tok_s * 100.0 / figures.pct_of_wall
    if totals["gemm"]:
        figures.gemm_floor_pct = 100.0 * weights_ns * len(rows) / totals["gemm"]
    if totals["attention"] and any(kv_ns):
        figures.attention_floor_pct = 100.0 * sum(kv_ns) / totals["attention"]
    return figures


#: Exposed communication in an inference engine: tensor parallelism's all-reduce after each layer is on the critical
#: path of every step (no backward pass to hide it in, as training's bucketed all-reduce has).
INFERENCE_OVERLAP = ("The tensor-parallel all-reduce after each layer waits on the step's critical path: use the "
                     "engine's faster collectives (vLLM's custom all-reduce, one-shot or symmetric-memory all-reduce, "
                     "an all-reduce fused with the next RMSNorm), a lower TP degree where the model fits, or check for "
                     "a slow rank the others wait for (iotrace report across the ranks).")
#: category -> (rule id, what to try), for the findings the waterfall draws.
_ADVICE = {
    "idle": ("step-launch-overhead",
             "capture the step as a CUDA graph (vLLM: leave enforce_eager off; torch: torch.cuda.graphs), so the "
             "device does not wait for each launch"),
    "host_between": ("step-host-between",
                     "overlap the scheduler and sampling with the device (vLLM: async scheduling), or batch more "
                     "requests per step so the host cost is shared"),
    "communication": ("step-exposed-communication", INFERENCE_OVERLAP),
    "other": ("step-unrecognised", "name what these are; if they are the model's, fuse them"),
    "copy": ("step-copies", "keep tensors on the device and in place; avoid per-step host copies"),
    "elementwise": ("step-elementwise", "fuse normalisation, rotary and activation into their neighbours"),
}
_CPU_ADVICE = {
    "idle": ("step-python-overhead",
             "the model's Python runs between ops: compile it (torch.compile) or use an engine whose step is one call"),
}


def _findings(report: StepReport, capturing: str | None = None) -> list[Finding]:
    """Each recoverable category at :data:`SHARE_FINDING` of a phase or more, with its gain bound: removing that time
    from every step of the phase."""
    out = []
    labels = report.labels
    for phase in report.phases:
        for category in ("idle", "host_between", "communication", "other", "copy", "elementwise"):
            share = phase.share(category)
            if share < SHARE_FINDING:
                continue
            rule, advice = (_CPU_ADVICE if report.waterfall.device == "cpu" else {}).get(category,
                                                                                          _ADVICE[category])
            if category == "idle" and capturing:
                advice = ("this trace records graph capture: its steps are a warm-up; read the replays' steps")
            elif category == "idle" and report.waterfall.device == "gpu" and \
                    report.steps.frame.loc[report.steps.frame["phase"] == phase.phase, "graph_launches"].gt(0).any():
                advice = ("the steps already replay CUDA graphs: the device waits between the graph pieces (vLLM's "
                          "piecewise graphs run attention eager); a full graph of the step removes the gaps")
            gain_tok = ""
            if phase.tok_s:
                gain_tok = f"; {phase.tok_s:.4g} → up to {phase.tok_s / (1 - share):.4g} tok/s"
            names = ""
            if category == "other" and report.waterfall.other_names:
                names = " (" + ", ".join(n[:60] for n, _ in report.waterfall.other_names[:3]) + ")"
            text = (f"{labels[category]}: {100 * share:.0f}% of each {phase.phase} step "
                    f"({phase.categories_ns[category] / 1e6 / phase.steps:.3g} ms of {phase.median_ms:.3g} ms median)"
                    f"{names}{gain_tok}")
            evidence = (Evidence(f"{category} share of {phase.phase} step time", round(100 * share, 1), "≥ 10%", "%"),
                        Evidence(f"{phase.phase} steps", float(phase.steps)))
            gain = Gain(share, float(phase.span_ns), f"removing the {labels[category]} from every {phase.phase} "
                                                      "step saves at most that time")
            out.append(Finding("steps", text, evidence, advice, "measured", None, None, "warning", rule, gain, None))
    return out


#: The dense peak a prefill of each weight dtype runs against (CardBook precision keys).
_PEAKS = {"bf16": "bf16_tensor", "fp16": "fp16_tensor", "fp32": "fp32", "fp8": "fp8_tensor"}


def machine_of(tables: TraceTables, card: str | None = None, bandwidth_gbs: float | None = None,
               tp: int | None = None, dtype: str = "bf16") -> Machine | None:
    """The machine the trace ran on: ``--bandwidth`` where given, else ``--card``'s or the trace's first device's
    CardBook bandwidth (and its dense ``dtype`` peak); tp from ``--tp`` or the trace's world size. None where no
    bandwidth is known (a CPU trace without a manifest or ``--bandwidth``)."""
    from iotrace.cards import lookup

    if tp is not None and tp < 1:
        raise InvalidValueError(f"--tp {tp} must be 1 or more", "give the tensor-parallel degree the trace ran")
    world = tables.meta.get("world_size")
    tp = tp or (int(world) if world else 1)
    key = card
    if key is None and tables.rows("devices"):
        cards = [c for c in tables.column("devices", "card").tolist() if c]
        key = cards[0] if cards else None
    found = lookup(key) if key else None
    peak, peak_source = None, ""
    if found is not None and _PEAKS.get(dtype) in found.peak_tflops:
        peak, peak_source = found.peak_flop_per_s(_PEAKS[dtype]), f"{found.name} dense {_PEAKS[dtype]}"
    if bandwidth_gbs is not None:
        if not bandwidth_gbs > 0:
            raise InvalidValueError(f"--bandwidth {bandwidth_gbs:g} GB/s must be positive", "give the measured GB/s")
        return Machine(bandwidth_gbs * 1e9, "--bandwidth", peak, peak_source, tp)
    if found is None or found.memory_bandwidth_gbs is None:
        return None
    return Machine(found.bandwidth_bytes_per_s, f"{found.name} datasheet", peak, peak_source, tp)
