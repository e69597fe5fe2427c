"""The rules that read one kernel row's roofline, speed of light, warp stalls and occupancy.

One verdict per kernel (:data:`BOUND`), by Nsight Compute's SOLBottleneck rule where the file has the speed-of-light
throughputs, else identity 4 on the counted FLOPs and bytes. Every other rule here is bounded by that verdict: at x%
of the binding roof, nothing but moving fewer bytes or doing fewer FLOPs can save more than (100 - x)%, so a stall or
occupancy finding never claims more, and a kernel at a roof gets the roof's advice, never "hide latency".
"""

from __future__ import annotations

from iotrace.trace.findings.advice import next_step
from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.findings.launch_rules import mostly_launch_cost
from iotrace.trace.findings.rule import Rule, finding
from iotrace.trace.reports.ncu_rules import bound_verdict
from iotrace.trace.reports.occupancy import ACHIEVED_GAP_PCT
from iotrace.trace.reports.records import Evidence, Finding
from iotrace.trace.reports.roofline import BALANCED_POINTS, BINDS_PCT, LATENCY_PCT, MODEL_EXCESS
from iotrace.trace.reports.stall_reasons import StallReason, reason
from iotrace.trace.reports.stalls import DOMINANT_SHARE, ISSUE_ACTIVE_LIMIT

__all__ = ["KERNEL_RULES", "roof_fraction"]

SOL_RULE = "Nsight Compute's SOLBottleneck rule (sections/SpeedOfLight.py)"
_SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
_MEMORY = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
#: The stalls that more resident warps or more loads in flight can hide (Nsight Compute Kernel Profiling Guide,
#: "Warp Scheduler States": the long and short scoreboard, barrier and memory-dependency waits); a throttle stall
#: (a full queue or a busy pipe) is not helped by more warps.
LATENCY_STALLS = frozenset({"long_scoreboard", "short_scoreboard", "barrier", "membar", "wait", "no_instruction",
                            "imc_miss", "drain", "sleeping", "branch_resolving"})


def roof_fraction(facts: KernelFacts) -> tuple[float, str] | None:
    """The most any advice short of moving fewer bytes or FLOPs can save, and why: 1 - x at x% of the binding roof."""
    roof = facts.roofline
    x = None if roof is None else roof.utilisation_pct
    if x is None:
        return None
    where = ("the more utilised speed-of-light unit" if roof.bound_basis == "speed of light"  # type: ignore[union-attr]
             else "the attainable roofline")
    return max(0.0, 1.0 - x / 100.0), (f"at {x:.0f}% of {where}, nothing short of moving fewer bytes or doing fewer "
                                       f"FLOPs saves more than {max(0.0, 100.0 - x):.0f}% of its time")


def _leading_stall(facts: KernelFacts) -> tuple[StallReason, float] | None:
    """The stall reason with the largest share of the primary family (not "selected"), or None without stalls."""
    stalls = facts.waits
    return None if stalls.empty else (reason(str(stalls.iloc[0]["reason"])), float(stalls.iloc[0]["share"]))


def _sol_evidence(sol: dict[str, float], cite: str = SOL_RULE) -> list[Evidence]:
    return [Evidence(_SM, round(sol["sm_throughput_pct"], 1), "", "%"),
            Evidence(_MEMORY, round(sol["memory_throughput_pct"], 1),
                     f"a unit >= {BINDS_PCT:g}% binds; both < {LATENCY_PCT:g}% is latency ({cite})", "%")]


def _bound(facts: KernelFacts) -> list[Finding]:
    roof = facts.roofline
    if roof is None or roof.bound is None:
        return []
    gain = roof_fraction(facts)
    fraction, reasoning = gain if gain is not None else (None, "")
    x = roof.utilisation_pct
    evidence: list[Evidence] = []
    cite = facts.vocab.same_check(SOL_RULE, SOL_RULE)
    if roof.bound_basis == "speed of light":
        sm, memory = roof.sol["sm_throughput_pct"], roof.sol["memory_throughput_pct"]
        evidence += _sol_evidence(roof.sol, cite)
        su = facts.vocab.sm
        unit = "memory" if memory >= sm else su
        text = {"latency": f"Latency bound: {su} throughput {sm:.1f}% and memory throughput {memory:.1f}% of peak, "
                           f"both below {LATENCY_PCT:g}%; neither roof is near.",
                "balanced": f"Balanced: {su} throughput {sm:.1f}% and memory throughput {memory:.1f}% of peak, within "
                            f"{BALANCED_POINTS:g} points of each other and below {BINDS_PCT:g}%; both compute and "
                            "memory traffic must fall to go faster.",
                }.get(roof.bound, "")
        if not text:
            lead = "Memory" if roof.bound == "memory" else "Compute"
            other = f"{su} throughput {sm:.1f}%" if unit == "memory" else f"memory throughput {memory:.1f}%"
            text = (f"{lead} bound: {unit} throughput {x:.1f}% of peak ({other}); a unit at {BINDS_PCT:g}% or more "
                    "binds." if x is not None and x >= BINDS_PCT else
                    f"{lead}-heavy: {unit} throughput {x:.1f}% of peak ({other}) leads by {BALANCED_POINTS:g} points "
                    f"or more, below the {BINDS_PCT:g}% at which a unit binds.")
        if roof.flops is None and not roof.levels:
            text += " The file has no DRAM bytes or FLOPs, so this is not a roofline placement."
        basis = "measured"
        dram = roof.level("dram")
        if roof.bound == "memory" and roof.pct_of_attainable is not None and dram is not None \
                and roof.pct_of_attainable < LATENCY_PCT:
            text += (f" DRAM runs at {roof.pct_of_attainable:.0f}% of its roof, so the unit that binds is a cache "
                     "level (L1 or L2), not DRAM.")
    else:
        evidence.append(Evidence("% of attainable", round(roof.pct_of_attainable or 0.0, 1),
                                 f"latency bound below {LATENCY_PCT:g}% ({cite})"))
        if roof.intensity is not None:
            evidence.append(Evidence("DRAM intensity", roof.intensity, f"ridge {roof.ridge:.3g}" if roof.ridge else "",
                                     "FLOP/byte"))
        label = roof.precision or "counted"
        text = {"memory": f"Memory bound: {roof.pct_of_attainable:.0f}% of the DRAM roof"
                          + (f" at intensity {roof.intensity:.3g} FLOP/byte, left of the ridge"
                             f" ({roof.ridge:.3g})." if roof.intensity is not None and roof.ridge else "."),
                "compute": f"Compute bound: {roof.pct_of_attainable:.0f}% of the {label} peak at intensity "
                           f"{roof.intensity or 0:.3g} FLOP/byte, right of the ridge ({roof.ridge or 0:.3g}).",
                "latency": f"Latency bound: only {roof.pct_of_attainable:.0f}% of the attainable "
                           f"{'DRAM bandwidth' if not roof.flops else 'FLOP/s'}; neither roof is near."}[roof.bound]
        if roof.flops is None:
            text += " FLOPs were not counted: judged by DRAM bandwidth alone."
        basis = "derived" if roof.basis == "measured" else roof.basis
    lacking = roof.flops_lacking
    if lacking:
        text += f" Not counted: {lacking}."
    topic = roof.bound  # "memory", "compute", "latency" or "balanced": each has its own advice
    try_next = next_step(facts, topic, ", ".join(sorted(facts.plugin_params)))
    on_tensor = "tensor" in (roof.precision or "") or "tensor" in roof.flops_lacking
    if roof.bound == "compute" and on_tensor and not facts.origin.library:
        try_next = (f"It already runs on the {facts.vocab.matrix_units}: what is left is a narrower type (fp8, int8 "
                    "or int4 where accuracy allows) or fewer instructions around the MMAs (address arithmetic, "
                    "conversions).")
    lead = _leading_stall(facts)
    if roof.bound == "latency" and lead is not None and not facts.origin.library:
        # The wait that leads says how to hide it: a full queue (lg_throttle) needs fewer, wider accesses, not
        # more in flight; only a scoreboard or barrier wait is hidden by more loads in flight or more warps.
        info, share = lead
        try_next = f"{info.label} leads the warp stalls ({share:.0%}): {info.knob}"
    if roof.bound == "latency" and facts.blocks is not None and facts.sms and facts.blocks < facts.sms \
            and not facts.origin.communication and not mostly_launch_cost(facts):  # where small-grid fires
        try_next = "The grid cannot fill the GPU (see the small-grid finding). " + try_next
    stored = bound_verdict(list(facts.stored))
    if stored is not None and stored != roof.bound:
        text += (f" Nsight Compute's stored SOLBottleneck result for this launch says {stored}, iotrace says "
                 f"{roof.bound}: {'the group averages its launches' if facts.launches > 1 else 'they disagree'} "
                 "(both shown).")
    severity = "info" if roof.bound in ("memory", "compute") and x is not None and x >= BINDS_PCT else "warning"
    return [finding(BOUND, facts, text, evidence, try_next, basis=basis, fraction=fraction, reasoning=reasoning,
                    severity=severity)]


BOUND = Rule("bound", "roofline", f"a unit at >= {BINDS_PCT:g}% of peak binds; both below {LATENCY_PCT:g}% is "
             "latency; else the unit ahead by 10 points leads (without speed of light: identity 4's % of attainable)",
             SOL_RULE, _bound)


def _model_excess(facts: KernelFacts) -> list[Finding]:
    roof = facts.roofline
    model = None if roof is None else roof.model
    if model is None or model.dram_ratio is None or model.dram_ratio <= MODEL_EXCESS:
        return []
    evidence = (Evidence("DRAM bytes (measured)", roof.dram_bytes, "", "B"),  # type: ignore[union-attr]
                Evidence(f"{model.plugin} cost bytes (modelled)", model.bytes, model.formula, "B"),
                Evidence("ratio", round(model.dram_ratio, 2), f"flagged above {MODEL_EXCESS}"))
    # With only the algorithm's bytes the kernel still takes the roofline floor: max(FLOPs / peak, bytes / bandwidth)
    # (identity 4); no change to the bytes alone can save more than the time above that floor.
    dram = roof.level("dram")  # type: ignore[union-attr]
    seconds = None if roof.duration_ns is None else roof.duration_ns / 1e9  # type: ignore[union-attr]
    fraction, reasoning = None, ""
    if seconds and dram is not None and dram.ceiling_bytes_per_s and roof.peak_flop_per_s:  # type: ignore
        floor = max(model.flops / roof.peak_flop_per_s, model.bytes / dram.ceiling_bytes_per_s)  # type: ignore
        fraction = max(0.0, 1.0 - floor / seconds)
        reasoning = (f"with the algorithm's bytes the floor is max(FLOPs / peak, bytes / bandwidth) = "
                     f"{floor * 1e6:.3g} µs of {seconds * 1e6:.3g} µs")
    return [finding(MODEL_EXCESS_RULE, facts, f"DRAM bytes are {model.dram_ratio:.1f}× what the algorithm needs "
                    f"({model.plugin} cost model).", evidence, "Look for re-reads (tiles too small for L2 reuse), "
                    f"uncoalesced access or register spills to {facts.vocab.scratch}.", basis="derived",
                    fraction=fraction, reasoning=reasoning)]


MODEL_EXCESS_RULE = Rule("model-excess", "roofline", f"counted DRAM bytes > {MODEL_EXCESS} x the plugin's cost model",
                         "iotrace (DRAM counters agree within 20% between ncu replays in the corpus)", _model_excess)


def _stall(facts: KernelFacts) -> list[Finding]:
    ranked, stalls = facts.stalls, facts.waits
    if stalls.empty or facts.origin.communication:
        return []  # a collective waits on its peers by design: overlap and exposure are its findings
    top = stalls.iloc[0]
    share, issue = float(top["share"]), facts.issue_active
    if share <= DOMINANT_SHARE or (issue is not None and issue >= ISSUE_ACTIVE_LIMIT):
        return []
    roof = facts.roofline
    x = None if roof is None else roof.utilisation_pct
    if x is not None and x >= BINDS_PCT:
        return []  # at a roof the stalls are the roof's symptom; the bound finding carries the advice
    info = reason(str(top["reason"]))
    unit = "cycles per issued instruction" if top["family"] != "sampling" else "samples"
    total = float(ranked["value"].sum())
    text = (f"{info.label} dominates: {share * 100:.0f}% of the {unit} ({float(top['value']):.4g} of {total:.4g}). "
            f"{info.meaning}")
    if len(stalls) > 1:
        second = stalls.iloc[1]
        text += f" Next: {reason(str(second['reason'])).label} ({float(second['share']) * 100:.0f}%)."
    evidence = [Evidence(str(top["metric"]), float(top["value"]), f"share {share:.2f} > {DOMINANT_SHARE} (ncu "
                         "CPIStall rule)")]
    if issue is not None:
        evidence.append(Evidence("smsp__issue_active.avg.per_cycle_active", issue, f"< {ISSUE_ACTIVE_LIMIT}"))
    if facts.origin.library:
        try_next = f"{info.causes} " + next_step(facts, "stall")
    else:
        try_next = f"Usual causes: {info.causes} Try: {info.knob}"
        knobs = [p for p in info.params if p in facts.plugin_params]
        if knobs:
            try_next += f" In this iotrace kernel, tune {', '.join(knobs)}."
    bound = roof_fraction(facts)
    fraction = share if bound is None else min(share, bound[0])
    reasoning = (f"removing the stall entirely saves at most its {share:.0%} share of the cycles between issues"
                 + ("" if bound is None else f"; {bound[1]}"))
    return [finding(STALL, facts, text, evidence, try_next, fraction=fraction, reasoning=reasoning)]


STALL = Rule("dominant-stall", "warp stalls", f"one stall reason > {DOMINANT_SHARE:.0%} of the stall cycles, issue "
             f"active < {ISSUE_ACTIVE_LIMIT}, the kernel below {BINDS_PCT:g}% of every roof",
             "Nsight Compute's CPIStall and IssueSlotUtilization rules", _stall)


def _occupancy_limit(facts: KernelFacts) -> list[Finding]:
    occ, roof = facts.occupancy, facts.roofline
    if occ is None or occ.result is None or occ.theoretical_pct is None or occ.theoretical_pct >= 100.0 \
            or facts.origin.communication:
        return []
    if roof is None or roof.bound != "latency":
        return []  # more warps only help a kernel that waits: at or near a roof they queue for the same unit
    top = facts.waits
    if len(top) and str(top.iloc[0]["reason"]) not in LATENCY_STALLS:
        return []  # the dominant wait is a full queue or a busy pipe, which more warps do not shorten
    limiter = occ.limiters[0] if occ.limiters else "—"
    result, v = occ.result, facts.vocab
    evidence = (Evidence("theoretical occupancy (iotrace calculator)", round(occ.theoretical_pct, 2), "< 100%", "%"),
                Evidence(f"{limiter} limit", result.limits.get(limiter), f"{v.block}s per {v.sm}"))
    topic_text = next_step(facts, "occupancy", limiter=limiter)
    bound = roof_fraction(facts)
    # NVIDIA's calculator (iotrace.occupancy) and AMD's (iotrace.occupancy_amd) name the same two counts differently.
    per_unit = getattr(result, "active_blocks_per_sm", getattr(result, "workgroups_per_cu", None))
    lanes = getattr(result, "warps_per_block", getattr(result, "waves_per_workgroup", None))
    return [finding(OCCUPANCY, facts, f"Theoretical occupancy is {occ.theoretical_pct:.1f}%, limited by "
                    f"{', '.join(occ.limiters) or '—'} ({per_unit} {v.block}s of "
                    f"{lanes} {v.warp}s per {v.sm}), and the kernel waits on latency.", evidence,
                    topic_text, basis="modelled", fraction=None if bound is None else bound[0],
                    reasoning="" if bound is None else bound[1], severity="info")]


OCCUPANCY = Rule("occupancy-limit", "occupancy", "theoretical occupancy < 100%, the kernel latency bound and its "
                 "dominant stall one more warps can hide", "Nsight Compute's TheoreticalOccupancy rule (the "
                 "limiter); CUDA C++ Best Practices Guide, 'Occupancy'", _occupancy_limit)


def _occupancy_mismatch(facts: KernelFacts) -> list[Finding]:
    occ = facts.occupancy
    if occ is None or occ.agrees is not False:
        return []
    return [finding(MISMATCH, facts, f"iotrace computes {occ.theoretical_pct:.2f}% but the file stores "
                    f"{occ.theoretical_pct_file:.2f}% ({occ.theoretical_file_source}).",
                    (Evidence("theoretical_pct", occ.theoretical_pct), Evidence("theoretical_pct_file",
                                                                                occ.theoretical_pct_file)),
                    "Check the card's gfx target and the workgroup's LDS; report it if the file is right."
                    if facts.vocab.amd else
                    "Check the card's compute capability and the carveout; report it if the file is right.",
                    basis="modelled")]


MISMATCH = Rule("occupancy-mismatch", "occupancy", "iotrace's theoretical occupancy differs from the file's by "
                "more than 0.01 points", "the file's own sm__maximum_warps_per_active_cycle_pct", _occupancy_mismatch)


def _achieved_gap(facts: KernelFacts) -> list[Finding]:
    occ = facts.occupancy
    if occ is None or occ.achieved_pct is None or occ.achieved_source.startswith("estimated") \
            or facts.origin.communication:
        return []
    theoretical = occ.theoretical_pct_file if occ.theoretical_pct_file is not None else occ.theoretical_pct
    if theoretical is None or theoretical - occ.achieved_pct < ACHIEVED_GAP_PCT:
        return []
    per_sm = facts.blocks_per_sm
    if facts.blocks is not None and facts.sms and per_sm and facts.blocks < 2 * facts.sms * per_sm:
        return []  # under two waves the grid explains the gap: the small-grid and tail findings say so
    roof = facts.roofline
    if roof is not None and roof.utilisation_pct is not None and roof.utilisation_pct >= BINDS_PCT:
        return []
    gap = theoretical - occ.achieved_pct
    bound = roof_fraction(facts)
    v = facts.vocab
    rule = v.same_check("ncu AchievedOccupancy rule", "Nsight Compute's AchievedOccupancy rule")
    return [finding(ACHIEVED, facts, f"Achieved occupancy {occ.achieved_pct:.1f}% is {gap:.1f} points below the "
                    f"theoretical {theoretical:.1f}% over {facts.blocks} {v.block}s: {v.warp}s or {v.block}s finish "
                    "unevenly.",
                    (Evidence("achieved occupancy", round(occ.achieved_pct, 2), occ.achieved_source, "%"),
                     Evidence("gap", round(gap, 2), f">= {ACHIEVED_GAP_PCT:g} points ({rule})")),
                    f"Balance the work across {v.warp}s and {v.block}s (uneven loop trip counts, divergent early "
                    "exits).",
                    fraction=None if bound is None else min(bound[0], gap / theoretical),
                    reasoning="the idle share of the resident warp slots, bounded by the roof", severity="info")]


ACHIEVED = Rule("achieved-gap", "occupancy", f"achieved occupancy >= {ACHIEVED_GAP_PCT:g} points below theoretical "
                "over at least two waves, below every roof", "Nsight Compute's AchievedOccupancy rule", _achieved_gap)


def _tf32(facts: KernelFacts) -> list[Finding]:
    roof = facts.roofline
    if roof is None or facts.vocab.amd or facts.device_cc is None or float(facts.device_cc) < 8.0:
        return []
    name = facts.name.lower()
    if roof.precision != "fp32" or not ("sgemm" in name or ("gemm" in name and "f32" in name)
                                        or (facts.origin.family == "cublas" and "gemm" in name)):
        return []
    fp32 = roof.flops_by_precision.get("fp32", 0.0)
    return [finding(TF32, facts, f"An fp32 GEMM on the CUDA cores ({fp32:.3g} FP32 FLOPs) on compute capability "
                    f"{facts.device_cc}, whose tensor cores run TF32 at several times the FP32 rate.",
                    (Evidence("fp32 FLOPs", fp32, "no tensor-pipe FLOPs counted"),
                     Evidence("device compute capability", facts.device_cc, ">= 8.0 (TF32 tensor cores)")),
                    next_step(facts, "compute") if facts.origin.library else
                    "Run it as TF32 on the tensor cores where 10 mantissa bits suffice "
                    "(torch.backends.cuda.matmul.allow_tf32 = True; in Triton tl.dot with input_precision='tf32').",
                    basis="derived")]


TF32 = Rule("tf32", "roofline", "a GEMM's FLOPs are fp32 FFMA on a device of compute capability >= 8.0",
            "NVIDIA Ampere architecture whitepaper (TF32 tensor cores)", _tf32)

KERNEL_RULES: tuple[Rule, ...] = (BOUND, STALL, OCCUPANCY, ACHIEVED, MISMATCH, MODEL_EXCESS_RULE, TF32)
