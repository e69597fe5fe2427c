"""Hierarchical roofline per kernel: FLOPs from the SASS counters, bytes at DRAM, L2 and L1, ceilings, the bound.

Method (NERSC's hierarchical roofline, ``cyanguwa/nersc-roofline``; the same counters feed ncu's
``SpeedOfLight_RooflineChart`` and ``SpeedOfLight_Hierarchical*RooflineChart`` sections):

* FLOPs per precision = add + mul + 2 · fma thread instructions (``smsp__sass_thread_inst_executed_op_<p>{add,mul,
  fma}_pred_on``), as totals (``.sum``) or as ncu's roofline sections store them, a rate per elapsed cycle times the
  elapsed cycles; tensor-core FLOPs by input type, dense apart from sparse, each counted once
  (:mod:`iotrace.trace.reports.tensor_flops`: ``sm__ops_path_tensor_*`` counters, else the per-opcode SASS counts
  where the opcode fixes the shape); tensor work the file shows but does not let us count is named as lacking.
* Bytes per level: ``dram__bytes``, ``lts__t_bytes``, ``l1tex__t_bytes`` (or their 32-byte sectors, or their rates
  times the kernel's duration).
* Ceilings from the file (``*.peak_sustained`` × the unit's ``cycles_elapsed.avg.per_second``: the clocks the kernel
  ran at) or from the CardBook card (boost clock, datasheet bandwidth); every ceiling says which. Tensor work meets
  the peak of its own path and type (a dense bf16 kernel never a sparse or FP4 peak).
* Identity 4: I = FLOPs / bytes, attainable = min(peak, I · B), ridge = peak / B.

AMD kernels (rocprof-compute counters: ``SQ_*``, ``TCC_*``, ``TCP_*``) take rocprof-compute's own formulas and its
measured ceilings (:mod:`iotrace.trace.reports.roofline_amd`) into the same point, with an LDS level beside HBM
("dram"), L2 and vL1D ("l1").

A kernel whose trace has no counters (Kineto, nsys) is placed from an iotrace plugin's cost model and its measured
duration, and labelled modelled; without a model it is reported as not available, never as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from iotrace.cards import Card
from iotrace.trace.reports import roofline_amd as amd
from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.plugin_costs import KernelModel
from iotrace.trace.reports.records import Basis, Unavailable
from iotrace.trace.reports.tensor_flops import card_tensor_peak, key_of, precision_of, tensor_flops, tensor_peak

__all__ = ["BALANCED_POINTS", "BINDS_PCT", "LATENCY_PCT", "MODEL_EXCESS", "Level", "RooflinePoint", "roofline_point",
           "sol_bound"]

#: A level's sector is 32 bytes at L1TEX and L2 (Nsight Compute Kernel Profiling Guide, "Memory Tables": "a
#: sector is an aligned 32 byte-chunk of memory").
SECTOR_BYTES = 32

#: Below 60% of the attainable roof the kernel is latency bound: ncu's SOLBottleneck rule uses the same threshold
#: ("Achieved compute throughput and/or memory bandwidth below 60.0% of peak typically indicate latency issues",
#: Nsight Compute sections/SpeedOfLight.py, `latency_bound_threshold = 60`).
LATENCY_PCT = 60.0
#: A unit at or above 80% of its peak binds, and a unit 10 points ahead of the other leads: the same rule's
#: `no_bound_threshold = 80` and `balanced_threshold = 10`.
BINDS_PCT = 80.0
BALANCED_POINTS = 10.0

#: Counted DRAM bytes above 1.2× the algorithm's minimum are flagged (re-reads, uncoalesced access, spills):
#: iotrace's own threshold for "model vs counter" findings: above 20 % the excess is more than measurement noise
#: of DRAM counters between ncu replays (seen in the corpus: the A10G report and CSV agree within 20 %).
MODEL_EXCESS = 1.2

# Precision -> SASS opcode letter, and the CardBook peak that bounds it.
_OPS = {"fp64": "d", "fp32": "f", "fp16": "h"}
# hadd/hmul/hfma run on the CUDA cores, whose fp16 rate (1x or 2x fp32, by chip) the CardBook does not state: no card
# ceiling for them (the file's own peak_sustained still applies). Tensor work ("bf16 tensor", "fp8 tensor sparse", ...)
# meets the card's peak for its input type (tensor_flops.card_tensor_peak).
_CARD_PEAK = {"fp64": "fp64", "fp32": "fp32"}

ROOFLINE_SECTION = "ncu --section SpeedOfLight_RooflineChart"
HIERARCHICAL_SECTION = "ncu --section SpeedOfLight_HierarchicalSingleRooflineChart"


@dataclass(frozen=True)
class Level:
    """Traffic at one memory level, its ceiling, and where both came from."""

    level: str
    bytes: float | None
    bytes_source: str
    ceiling_bytes_per_s: float | None
    ceiling_source: str
    intensity: float | None = None


@dataclass(frozen=True)
class ModelComparison:
    plugin: str
    formula: str
    flops: float
    bytes: float
    dram_ratio: float | None
    flops_ratio: float | None


@dataclass(frozen=True)
class RooflinePoint:
    kernel_id: int
    kernel: str
    basis: Basis
    duration_ns: float | None
    flops: float | None
    flops_by_precision: dict[str, float]
    flops_source: str
    precision: str | None
    levels: tuple[Level, ...]
    peak_flop_per_s: float | None
    peak_source: str
    intensity: float | None
    ridge: float | None
    achieved_flop_per_s: float | None
    attainable_flop_per_s: float | None
    pct_of_attainable: float | None
    bound: str | None
    model: ModelComparison | None = None
    sol: dict[str, float] = field(default_factory=dict)
    #: What the bound was judged from: "roofline" (identity 4 on counted FLOPs and bytes) or "speed of light" (the
    #: file's SM and memory throughputs alone, when it has no DRAM bytes or FLOPs to place a roofline point).
    bound_basis: str = "roofline"
    #: Tensor-core work the file shows but does not let us count (e.g. "tensor FLOPs not countable: 16,777,216
    #: warp-level HGMMA/... instructions"): ``flops`` leaves it out, it is not zero. Empty when nothing is lacking.
    flops_lacking: str = ""

    def level(self, name: str) -> Level | None:
        return next((lv for lv in self.levels if lv.level == name), None)

    @property
    def utilisation_pct(self) -> float | None:
        """How near the binding roof the kernel runs, in percent: the more utilised speed-of-light unit where the
        bound came from those throughputs, else the % of the attainable roofline. At x%, nothing but moving fewer
        bytes or doing fewer FLOPs can save more than (100 - x)% of its time."""
        if self.bound_basis == "speed of light" and self.sol:
            return max(self.sol.values())
        return self.pct_of_attainable

    @property
    def dram_bytes(self) -> float | None:
        dram = self.level("dram")
        return None if dram is None else dram.bytes

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["dram_bytes"] = self.dram_bytes
        return out


# --- counts -------------------------------------------------------------------------------------------------------

def _op_count(view: MetricView, kid: int, op: str, seconds: float | None) -> tuple[float, str] | None:
    """Thread instructions of one SASS opcode (e.g. ``ffma``), and how the number was obtained."""
    base = f"sass_thread_inst_executed_op_{op}_pred_on"
    total = view.first(kid, (f"sm__{base}.sum", f"smsp__{base}.sum"))
    if total is not None:
        return total[1], total[0]
    rate = view.get(kid, f"smsp__{base}.sum.per_cycle_elapsed")
    if rate is None:
        return None
    cycles = view.get(kid, "smsp__cycles_elapsed.avg")
    if cycles is not None:
        return rate * cycles, f"smsp__{base}.sum.per_cycle_elapsed × smsp__cycles_elapsed.avg"
    clock = view.get(kid, "smsp__cycles_elapsed.avg.per_second")
    if clock is not None and seconds:
        return rate * clock * seconds, (f"smsp__{base}.sum.per_cycle_elapsed × smsp__cycles_elapsed.avg.per_second"
                                        " × gpu__time_duration")
    return None


def flop_counts(view: MetricView, kid: int, seconds: float | None) -> tuple[dict[str, float], str, str]:
    """FLOPs per precision (add + mul + 2·fma; tensor work per input type, e.g. ``bf16 tensor``), where they came
    from, and the tensor FLOPs the file does not let us count ("" when none); an empty dict when none were counted."""
    out: dict[str, float] = {}
    sources: list[str] = []
    for precision, letter in _OPS.items():
        parts = {kind: _op_count(view, kid, f"{letter}{kind}", seconds) for kind in ("add", "mul", "fma")}
        if all(p is None for p in parts.values()):
            continue
        out[precision] = sum((2.0 if kind == "fma" else 1.0) * p[0] for kind, p in parts.items() if p is not None)
        sources.extend(p[1] for p in parts.values() if p is not None)
    shown = sorted({s.split(" × ", 1)[1] if " × " in s else s.split("__", 1)[0] + "__….sum" for s in sources})
    said = [("add + mul + 2·fma from " + "; ".join(shown))] if sources else []
    tensor = tensor_flops(view, kid, seconds)
    if tensor is None:
        return out, "; ".join(said), ""
    for key, flops in tensor.flops_by_type.items():
        out[precision_of(key)] = flops
    if tensor.flops_by_type:
        said.append(f"tensor FLOPs ({', '.join(sorted(tensor.flops_by_type))}) from {tensor.source}")
    if tensor.lacking:
        said.append(f"lacking: {tensor.lacking}")
    return out, "; ".join(said), tensor.lacking


_BytesRule = tuple[str, Callable[[MetricView, int, float | None], float | None]]


def _metric(name: str, scale: float = 1.0) -> _BytesRule:
    return name, lambda v, k, s: None if v.get(k, name) is None else v.get(k, name) * scale  # type: ignore[operator]


def _rate(name: str, scale: float = 1.0) -> _BytesRule:
    def read(v: MetricView, k: int, s: float | None) -> float | None:
        rate = v.get(k, name)
        return None if rate is None or not s else rate * s * scale
    return f"{name} × gpu__time_duration" + (f" × {scale:g}" if scale != 1 else ""), read


def _sum_of(*names: str) -> _BytesRule:
    def read(v: MetricView, k: int, s: float | None) -> float | None:
        values = [v.get(k, n) for n in names]
        return None if any(x is None for x in values) else float(sum(values))  # type: ignore[arg-type]
    return " + ".join(names), read


#: Per level, the ways to read its bytes, best first.
BYTES_RULES: dict[str, tuple[_BytesRule, ...]] = {
    "dram": (_metric("dram__bytes.sum"), _sum_of("dram__bytes_read.sum", "dram__bytes_write.sum"),
             _rate("dram__bytes.sum.per_second")),
    "l2": (_metric("lts__t_bytes.sum"), _rate("lts__t_bytes.sum.per_second"),
           (f"lts__t_sectors.sum × {SECTOR_BYTES}", _metric("lts__t_sectors.sum", SECTOR_BYTES)[1]),
           _rate("lts__t_sectors.sum.per_second", SECTOR_BYTES)),
    "l1": (_metric("l1tex__t_bytes.sum"), _rate("l1tex__t_bytes.sum.per_second"),
           (f"l1tex__t_sectors.sum × {SECTOR_BYTES}", _metric("l1tex__t_sectors.sum", SECTOR_BYTES)[1]),
           (f"l1tex__t_sectors_pipe_lsu_mem_{{global,local}}_op_* × {SECTOR_BYTES} (LSU only)",
            lambda v, k, s: _lsu_sectors(v, k))),
}


def _lsu_sectors(view: MetricView, kid: int) -> float | None:
    """L1 bytes of the load/store unit's global and local accesses, from the MemoryWorkloadAnalysis tables'
    per-operation sector counts (what a `--set full` report holds when it lacks l1tex__t_sectors.sum); texture and
    surface traffic is left out, so this is a lower bound on the level's bytes."""
    names = [f"l1tex__t_sectors_pipe_lsu_mem_{space}_op_{op}.sum"
             for space, ops in (("global", ("ld", "st", "atom", "red")), ("local", ("ld", "st"))) for op in ops]
    values = [view.get(kid, n) for n in names]
    if values[0] is None or values[1] is None:  # no global load and store counts: nothing to stand on
        return None
    return SECTOR_BYTES * sum(x for x in values if x is not None)
#: The metric to name when a level is missing.
LEVEL_METRIC = {"dram": "dram__bytes.sum", "l2": "lts__t_bytes.sum", "l1": "l1tex__t_bytes.sum"}
# Per level: (peak per cycle, clock) for the file's own ceiling.
_LEVEL_PEAK = {
    "dram": (("dram__bytes.sum.peak_sustained", 1.0), "dram__cycles_elapsed.avg.per_second"),
    "l2": (("lts__t_bytes.sum.peak_sustained", 1.0), "lts__cycles_elapsed.avg.per_second"),
    "l1": (("l1tex__t_bytes.sum.peak_sustained", 1.0), "l1tex__cycles_elapsed.avg.per_second"),
}


def _file_bandwidth(view: MetricView, kid: int, level: str) -> tuple[float, str] | None:
    (peak_name, scale), clock_name = _LEVEL_PEAK[level]
    peak, clock = view.get(kid, peak_name), view.get(kid, clock_name)
    if peak is None or clock is None:
        return None
    return peak * scale * clock, f"file: {peak_name} × {clock_name}"


def _file_peak(view: MetricView, kid: int, precision: str) -> tuple[float, str] | None:
    key = key_of(precision)
    if key is not None:  # the peak of the counter that counted this work, never an aggregate's (sparse) peak
        count = tensor_flops(view, kid, None)
        return None if count is None else tensor_peak(view, kid, count, key)
    name = f"sm__sass_thread_inst_executed_op_{_OPS[precision]}fma_pred_on.sum.peak_sustained"
    per_cycle = view.get(kid, name)
    clock = view.first(kid, ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second"))
    if per_cycle is None or clock is None:
        return None
    return 2.0 * per_cycle * clock[1], f"file: 2 × {name} × {clock[0]}"


def _card_peak(card: Card | None, precision: str) -> tuple[float, str] | None:
    tensor = key_of(precision)
    if tensor is not None:
        return card_tensor_peak(card, tensor)
    key = _CARD_PEAK.get(precision)
    if card is None or key is None or key not in card.peak_tflops:
        return None
    return card.peak_tflops[key] * 1e12, f"card {card.key}: {key} peak ({card.source(key)})"


def _card_bandwidth(card: Card | None) -> tuple[float, str] | None:
    if card is None or card.memory_bandwidth_gbs is None:
        return None
    return card.memory_bandwidth_gbs * 1e9, f"card {card.key}: memory bandwidth ({card.source('memory_bandwidth_gbs')})"


def _pick(first: tuple[float, str] | None, second: tuple[float, str] | None,
          missing: str = "none: no card and no *.peak_sustained in the file") -> tuple[float | None, str]:
    chosen = first or second
    return (None, missing) if chosen is None else chosen


def _no_level_ceiling(level: str, card: Card | None, ceilings: str) -> str:
    """Why a level has no ceiling, in the terms of what was asked: a card in use is never reported as 'no card'."""
    if level == "dram":
        if card is None:
            return "none: no card and no *.peak_sustained in the file"
        return (f"none: card {card.key} states no memory bandwidth" +
                ("" if ceilings == "card" else ", and the file has no *.peak_sustained"))
    if ceilings == "card":
        who = f"card {card.key}" if card is not None else "no card is in use, and a card"
        return f"none: {who} states no {level.upper()} bandwidth (the CardBook has DRAM only; --ceilings auto or " \
               "file takes the file's own)"
    return f"none: the file has no {level.upper()} *.peak_sustained (the CardBook states DRAM bandwidth only)"


def _measured_levels(view: MetricView, kid: int, seconds: float | None, card: Card | None,
                     ceilings: str) -> list[Level]:
    """Each level's bytes (first rule that the file supports) and ceiling (the file's own, else the card's)."""
    levels = []
    for level, rules in BYTES_RULES.items():
        found = next(((label, value) for label, read in rules if (value := read(view, kid, seconds)) is not None),
                     None)
        if found is None:
            continue
        file_bw = _file_bandwidth(view, kid, level) if ceilings != "card" else None
        card_bw = _card_bandwidth(card) if level == "dram" and ceilings != "file" else None
        missing = _no_level_ceiling(level, card, ceilings)
        levels.append(Level(level, found[1], found[0], *_pick(file_bw, card_bw, missing)))
    return levels


def _compare(model: KernelModel, by_precision: dict[str, float], levels: list[Level]) -> ModelComparison:
    dram = next((lv.bytes for lv in levels if lv.level == "dram"), None)
    flops = sum(by_precision.values()) if by_precision else None
    cost = model.cost
    return ModelComparison(model.plugin, cost.formula, cost.flops, cost.bytes,
                           None if dram is None or cost.bytes <= 0 else dram / cost.bytes,
                           None if flops is None or cost.flops <= 0 else flops / cost.flops)


def _peak(view: MetricView, kid: int, precision: str | None, card: Card | None, ceilings: str,
          model: KernelModel | None) -> tuple[float | None, str]:
    if model is not None:  # modelled: the card's peak for the precision the plugin's cost names
        key = model.cost.peak
        card_peak = None
        if card is not None and key in card.peak_tflops and ceilings != "file":
            card_peak = (card.peak_tflops[key] * 1e12, f"card {card.key}: {key} peak ({card.source(key)})")
        return _pick(card_peak, None)
    if precision is None:
        return None, "none: no FLOPs counted"
    file_peak = _file_peak(view, kid, precision) if ceilings != "card" else None
    card_peak = _at_file_clock(view, kid, card, _card_peak(card, precision)) if ceilings != "file" else None
    return _pick(file_peak, card_peak)


def _at_file_clock(view: MetricView, kid: int, card: Card | None,
                   found: tuple[float, str] | None) -> tuple[float, str] | None:
    """A card's compute peak (a boost-clock figure) scaled to the SM clock the file says the kernel ran at, and saying
    so: Nsight Compute locks the clocks to base by default (``--clock-control base``, Kernel Profiling Guide, "Clock
    Control"), so an H100 SXM kernel profiled at 1.443 GHz reads a fifth low against its 1.98 GHz boost peak. A file
    clock at or above boost, or none, leaves the datasheet's peak as it is."""
    if found is None or card is None or not card.boost_clock_mhz:
        return found
    clock = view.first(kid, ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second"))
    if clock is None:
        return found
    ratio = clock[1] / (card.boost_clock_mhz * 1e6)
    if not 0 < ratio < 0.999:
        return found
    value, label = found
    return value * ratio, (f"{label} × {ratio:.3f}: at the file's SM clock, {clock[1] / 1e9:.4g} GHz ({clock[0]}), "
                           f"not the {card.boost_clock_mhz / 1e3:.4g} GHz boost")


def _judge(flops: float | None, dram: Level | None, peak: float | None, seconds: float | None,
           ) -> tuple[float | None, float | None, float | None, float | None, str | None]:
    """Identity 4 on the DRAM level: (ridge, achieved FLOP/s, attainable FLOP/s, % of attainable, bound)."""
    intensity = dram.intensity if dram is not None else None
    bw = dram.ceiling_bytes_per_s if dram is not None else None
    ridge = peak / bw if peak and bw else None
    achieved = flops / seconds if flops is not None and seconds else None
    attainable = min(peak, intensity * bw) if peak and bw and intensity is not None else None
    pct: float | None = None
    if achieved is not None and attainable:
        pct = 100.0 * achieved / attainable
    elif dram is not None and dram.bytes is not None and bw and seconds and not flops:
        pct = 100.0 * dram.bytes / seconds / bw  # no FLOPs counted (or none done): judged by bandwidth alone
    bound = None
    if pct is not None:
        if pct < LATENCY_PCT:
            bound = "latency"
        elif ridge is None or intensity is None or intensity < ridge:
            bound = "memory"
        else:
            bound = "compute"
    return ridge, achieved, attainable, pct, bound


def roofline_point(view: MetricView, kid: int, kernel: str, duration_ns: float | None, card: Card | None,
                   ceilings: str = "auto", model: KernelModel | None = None,
                   file_ceilings: Sequence[Mapping[str, Any]] | None = None,
                   ) -> tuple[RooflinePoint | None, list[Unavailable]]:
    """One kernel on the hierarchical roofline, or None with what is missing.

    :param ceilings: ``auto`` (the file's own peaks where it has them, else the card's), ``file`` or ``card``.
    :param model: the kernel's plugin cost: compared with the counters, or (without counters) the point itself.
    :param file_ceilings: a rocprof-compute workload's measured ceilings (``tables.meta["roofline_ceilings"]``);
        without them an AMD kernel meets the card's.
    """
    seconds = duration_ns / 1e9 if duration_ns else None
    if view and amd.has_amd_counters(view, kid):
        return amd_roofline_point(view, kid, kernel, duration_ns, card, ceilings, file_ceilings)
    missing: list[Unavailable] = []
    by_precision, flops_source, flops_lacking = flop_counts(view, kid, seconds)
    levels = _measured_levels(view, kid, seconds, card, ceilings)
    basis: Basis = "measured"
    comparison = _compare(model, by_precision, levels) if model is not None else None
    sol = _speed_of_light(view, kid)
    if not by_precision and not levels:
        if model is None:
            detail = ("the bound below is classified from the file's speed-of-light throughputs" if sol else
                      "or name an iotrace kernel plugin and shape to place it modelled")
            missing.append(Unavailable("roofline", "dram__bytes.sum", ROOFLINE_SECTION, kid, detail))
            if not sol:
                return None, missing
            return RooflinePoint(kid, kernel, "measured", duration_ns, None, {}, "none: no FLOPs counted", None, (),
                                 None, "none", None, None, None, None, None, sol_bound(sol), None, sol,
                                 "speed of light", flops_lacking), missing
        basis = "modelled"
        by_precision = {model.cost.peak: model.cost.flops}
        flops_source = f"modelled: {model.plugin} cost ({model.cost.formula})"
        card_bw = _card_bandwidth(card) if ceilings != "file" else None
        levels = [Level("dram", model.cost.bytes, f"modelled: {model.plugin} cost", *_pick(card_bw, None))]
    else:
        if not by_precision:
            missing.append(Unavailable("roofline FLOPs", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
                                       ROOFLINE_SECTION, kid))
        for level in ("dram", "l2", "l1"):
            if not any(lv.level == level for lv in levels):
                section = ROOFLINE_SECTION if level == "dram" else HIERARCHICAL_SECTION
                missing.append(Unavailable(f"roofline {level.upper()} level", LEVEL_METRIC[level], section, kid))
    if duration_ns is None:
        missing.append(Unavailable("roofline", "gpu__time_duration.sum", "ncu --section SpeedOfLight", kid))
    flops = sum(by_precision.values()) if by_precision else None
    precision = max(by_precision, key=by_precision.__getitem__) if by_precision else None
    peak, peak_source = _peak(view, kid, precision, card, ceilings, model if basis == "modelled" else None)
    levels = [Level(lv.level, lv.bytes, lv.bytes_source, lv.ceiling_bytes_per_s, lv.ceiling_source,
                    flops / lv.bytes if flops is not None and lv.bytes else None) for lv in levels]
    dram = next((lv for lv in levels if lv.level == "dram"), None)
    ridge, achieved, attainable, pct, bound = _judge(flops, dram, peak, seconds)
    bound_basis = "roofline"
    if sol_bound(sol) is not None:  # the verdict ncu's own SOLBottleneck rule reaches: one verdict, never two
        bound, bound_basis = sol_bound(sol), "speed of light"
    return RooflinePoint(kid, kernel, basis, duration_ns, flops, by_precision, flops_source, precision,
                         tuple(levels), peak, peak_source, None if dram is None else dram.intensity, ridge, achieved,
                         attainable, pct, bound, comparison, sol, bound_basis, flops_lacking), missing


def _speed_of_light(view: MetricView, kid: int) -> dict[str, float]:
    """The Speed Of Light section's two throughputs (% of peak), where the file has them."""
    return {name: value for name, value in (
        ("sm_throughput_pct", view.get(kid, "sm__throughput.avg.pct_of_peak_sustained_elapsed")),
        ("memory_throughput_pct", view.get(kid, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")),
    ) if value is not None}


def sol_bound(sol: dict[str, float]) -> str | None:
    """The bound from the speed-of-light throughputs by ncu's SOLBottleneck rule: a unit at or above
    :data:`BINDS_PCT` binds (the more utilised of SM and memory); both below :data:`LATENCY_PCT` is latency; between,
    the unit ahead by :data:`BALANCED_POINTS` or more leads ("compute" or "memory"), else "balanced"."""
    sm, memory = sol.get("sm_throughput_pct"), sol.get("memory_throughput_pct")
    if sm is None or memory is None:
        return None
    if max(sm, memory) >= BINDS_PCT:
        return "compute" if sm >= memory else "memory"
    if max(sm, memory) < LATENCY_PCT:
        return "latency"
    if abs(sm - memory) >= BALANCED_POINTS:
        return "compute" if sm > memory else "memory"
    return "balanced"


def amd_roofline_point(view: MetricView, kid: int, kernel: str, duration_ns: float | None, card: Card | None,
                       ceilings: str = "auto", file_ceilings: Sequence[Mapping[str, Any]] | None = None,
                       ) -> tuple[RooflinePoint | None, list[Unavailable]]:
    """An AMD kernel on the hierarchical roofline (rocprof-compute's formulas and ceilings), or None with why.

    The peak is that of the type with the most FLOPs (rocprof-compute draws one data type's roofs at a time); the
    FLOPs of every type count in the total, as its ``total_flops`` does."""
    seconds = duration_ns / 1e9 if duration_ns else None
    missing: list[Unavailable] = []
    lanes = card.wave_size if card is not None and card.wave_size else 64
    counted = amd.amd_flops(view, kid, lanes)
    found = amd.amd_bytes(view, kid)
    roofs = amd.AmdCeilings(file_ceilings, card, ceilings)
    hbm = next((b for level, b, _ in found if level == "dram"), None)
    wrong = "" if hbm is None else roofs.implausible(hbm, seconds)
    if wrong or (counted is None and not found):
        detail = wrong or "the workload has no VALU/MFMA op counts and no TCC/TCP/LDS request counts"
        metric = "per-dispatch TCC_EA*_RDREQ_sum and WRREQ_sum" if wrong else amd.LEVEL_COUNTER["dram"]
        missing.append(Unavailable("roofline", metric, amd.COLLECT, kid, detail))
        return None, missing
    if counted is None:
        missing.append(Unavailable("roofline FLOPs", "SQ_INSTS_VALU_FMA_F32 and SQ_INSTS_VALU_MFMA_MOPS_*", amd.COLLECT,
                                   kid, "the workload has no per-type VALU or MFMA op counts"))
    for level in ("dram", "l2", "l1", "lds"):
        if not any(lv == level for lv, _, _ in found):
            missing.append(Unavailable(f"roofline {amd.LEVEL_NAME[level]} level", amd.LEVEL_COUNTER[level],
                                       amd.COLLECT, kid))
    if duration_ns is None:
        missing.append(Unavailable("roofline", "End_Timestamp − Start_Timestamp", "rocprof-compute profile", kid))
    flops = None if counted is None else counted.total
    by_precision = {} if counted is None else counted.by_precision
    precision = max(by_precision, key=by_precision.__getitem__) if by_precision else None
    if counted is None:
        peak, peak_source = None, "none: no FLOPs counted"
    else:
        peak, peak_source = roofs.peak(precision)
    levels = [Level(level, value, how, *roofs.bandwidth(level), flops / value if flops is not None and value else None)
              for level, value, how in found]
    dram = next((lv for lv in levels if lv.level == "dram"), None)
    ridge, achieved, attainable, pct, bound = _judge(flops, dram, peak, seconds)
    return RooflinePoint(kid, kernel, "measured", duration_ns, flops, by_precision,
                         "none: no FLOPs counted" if counted is None else counted.source, precision, tuple(levels),
                         peak, peak_source, None if dram is None else dram.intensity, ridge, achieved, attainable,
                         pct, bound), missing
