"""The rules an expert checks first, from the launch alone: a grid that cannot fill the GPU, a partial last wave, a
binary built for an older architecture than the device; and, over the whole selection, launches that were not
profiled and names launched in several configurations."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from iotrace.trace.findings.advice import next_step
from iotrace.trace.findings.facts import KernelFacts
from iotrace.trace.findings.rule import Rule, finding
from iotrace.trace.reports.launch_groups import config_text
from iotrace.trace.reports.origin import classify, is_communication, older_build
from iotrace.trace.reports.records import Evidence, Finding
from iotrace.trace.reports.vendor import NVIDIA, Vocabulary

__all__ = ["FILE_RULES", "LAUNCH_RULES", "TAIL_SHARE", "TINY_BLOCKS", "TINY_LAUNCH_NS", "FileFacts", "function_name",
           "mostly_launch_cost"]

#: A grid of this many blocks or fewer, or of one warp in all, is called tiny: it uses a sliver of any GPU.
TINY_BLOCKS = 4
#: A launch shorter than this is mostly the fixed cost of launching: NVIDIA's "Getting Started with CUDA Graphs"
#: (NVIDIA Technical Blog, 2019, https://developer.nvidia.com/blog/cuda-graphs/) times a 2.9 µs kernel at 9.6 µs per
#: launch when each is waited for, 3.8 µs back to back and 3.4 µs in a graph. Under 10 µs more blocks cannot take
#: much off a launch; fusing launches or a CUDA graph can.
TINY_LAUNCH_NS = 10_000
#: A partial last wave is flagged when it can waste this share of the time or more: Nsight Compute's
#: LaunchConfiguration rule flags a tail effect from `potential_tail_effect >= 0.2` (sections/LaunchStatistics.py).
TAIL_SHARE = 0.2
LAUNCH_RULE = "Nsight Compute's LaunchConfiguration rule (sections/LaunchStatistics.py)"
#: A name's configurations are a finding from this share of the kernel time, and where their occupancies are known,
#: this far apart: iotrace's cut-offs (the achieved-occupancy gap ncu's AchievedOccupancy rule reports is 10 points).
CONFIG_SHARE = 0.05
CONFIG_OCCUPANCY_POINTS = 10.0
#: Per device major, what its architecture added that an older build cannot use (NVIDIA's Ampere, Hopper and Blackwell
#: architecture whitepapers; PTX ISA: cp.async from sm_80, wgmma and cp.async.bulk.tensor (TMA) from sm_90a,
#: tcgen05 from sm_100a).
NEWER_INSTRUCTIONS = {7: "tensor-core mma", 8: "cp.async, bf16 and tf32 tensor-core mma",
                      9: "wgmma, TMA, thread-block clusters", 10: "tcgen05 tensor-core instructions, TMA",
                      12: "fp4/fp6 tensor-core mma"}


def _wave(facts: KernelFacts) -> tuple[float, str, str] | None:
    """Waves of the grid over the GPU, where from ("launch__waves_per_multiprocessor" or iotrace's arithmetic), and
    the basis: blocks / (SMs x blocks per SM)."""
    if facts.waves_file is not None:
        return facts.waves_file, "launch__waves_per_multiprocessor", "measured"
    blocks, per_sm = facts.blocks, facts.blocks_per_sm
    if blocks is None or not facts.sms or per_sm is None:
        return None
    v = facts.vocab
    return (blocks / (facts.sms * per_sm), f"{blocks} {v.block}s / ({facts.sms} {v.sm}s x {per_sm} {v.block}s per "
            f"{v.sm})", "modelled")


def mostly_launch_cost(facts: KernelFacts) -> bool:
    """True where the row's launches average under :data:`TINY_LAUNCH_NS`: their time is mostly the fixed cost of a
    launch, which more blocks do not shorten (the timeline's tiny-launches finding names them); False where the file
    has no durations."""
    if facts.total_ns is None or not facts.launches:
        return False
    return facts.total_ns / facts.launches < TINY_LAUNCH_NS


def _small_grid(facts: KernelFacts) -> list[Finding]:
    blocks, sms = facts.blocks, facts.sms
    if blocks is None or not sms or blocks >= sms or facts.origin.communication:
        return []  # a collective launches a few blocks (NCCL one per channel) by design: its findings are overlap
    if mostly_launch_cost(facts):
        return []  # a launch of a few µs is its launch cost: more blocks cannot remove that, fusion or a graph can
    per_sm = facts.blocks_per_sm or 1
    threads = facts.threads_per_block
    tiny = blocks <= TINY_BLOCKS or (threads is not None and blocks * threads <= 32)
    idle = 1.0 - blocks / (sms * per_sm)
    shape = f"{blocks} block{'s' * (blocks != 1)}" + (f" of {threads} threads" if threads is not None else "")
    text = (f"{'Tiny' if tiny else 'Small'} grid: {shape} on a {sms}-SM GPU" +
            (f" ({blocks * threads} thread{'s' * (blocks * threads != 1)} in all)" if tiny and threads else "") +
            f"; under one wave, {idle:.0%} of the GPU's block slots sit idle.")
    evidence = (Evidence("launch__grid_size", blocks, f"< {sms} SMs ({facts.sms_source}; {LAUNCH_RULE})"),
                Evidence("blocks per SM", per_sm, "iotrace occupancy calculator" if facts.blocks_per_sm else
                         "1 assumed (no occupancy)"))
    reasoning = (f"1 - blocks / (SMs x blocks per SM) = 1 - {blocks} / ({sms} x {per_sm}): the idle share of the GPU, "
                 "if the work spread over every slot")
    if facts.vocab.amd:
        text, evidence, reasoning = _small_grid_amd(facts, blocks, sms, per_sm, threads, tiny, idle)
    return [finding(SMALL_GRID, facts, text, evidence, next_step(facts, "small-grid"), basis="derived",
                    fraction=idle, reasoning=reasoning)]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _small_grid_amd(facts: KernelFacts, workgroups: int, cus: int, per_cu: int, items: int | None, tiny: bool,
                    idle: float) -> tuple[str, tuple[Evidence, ...], str]:
    """The small-grid finding in AMD's words: workgroups of work-items on CUs; the same check as ncu's rule."""
    shape = _plural(workgroups, "workgroup") + (f" of {_plural(items, 'work-item')}" if items is not None else "")
    text = (f"{'Tiny' if tiny else 'Small'} grid: {shape} on a {cus}-CU GPU"
            + (f" ({_plural(workgroups * items, 'work-item')} in all)" if tiny and items else "")
            + f"; under one wave, {idle:.0%} of the GPU's workgroup slots sit idle.")
    evidence = (Evidence("workgroups in the grid", workgroups, f"< {cus} CUs ({facts.sms_source}; "
                         f"{facts.vocab.same_check('', LAUNCH_RULE)})"),
                Evidence("workgroups per CU", per_cu, "iotrace occupancy calculator" if facts.blocks_per_sm else
                         "1 assumed (no occupancy)"))
    return text, evidence, (f"1 - workgroups / (CUs x workgroups per CU) = 1 - {workgroups} / ({cus} x {per_cu}): "
                            "the idle share of the GPU, if the work spread over every slot")


SMALL_GRID = Rule("small-grid", "launch", "blocks in the grid < the device's SM count, launches averaging "
                  f"{TINY_LAUNCH_NS / 1e3:g} µs or more",
                  f"{LAUNCH_RULE}; the launch floor: NVIDIA, 'Getting Started with CUDA Graphs'", _small_grid)


def _tail(facts: KernelFacts) -> list[Finding]:
    wave = _wave(facts)
    if wave is None or facts.origin.communication:
        return []  # a collective's blocks wait on the peers for its whole length: waves do not apply
    waves, source, basis = wave
    whole = math.ceil(waves - 1e-9)
    if waves < 1.0 or whole == waves:
        return []
    wasted = (whole - waves) / whole
    if wasted < TAIL_SHARE:
        return []
    v = facts.vocab
    return [finding(TAIL, facts, f"Partial last wave: {waves:.2f} waves, so the last of {whole} runs "
                    f"{(waves - whole + 1):.0%} full and up to {wasted:.0%} of the time the GPU is partly idle.",
                    (Evidence("waves", round(waves, 3), f"{source}; flagged when (ceil(w) - w) / ceil(w) >= "
                              f"{TAIL_SHARE:g} ({v.same_check(LAUNCH_RULE, LAUNCH_RULE)})"),),
                    next_step(facts, "tail"), basis="derived" if basis == "measured" else "modelled",
                    fraction=wasted, reasoning=f"(ceil(w) - w) / ceil(w) = ({whole} - {waves:.2f}) / {whole}, with "
                    f"every {v.block} taking the same time")]


TAIL = Rule("tail", "launch", "waves w >= 1 with a partial last wave wasting (ceil(w) - w) / ceil(w) >= "
            f"{TAIL_SHARE:g}", LAUNCH_RULE, _tail)


def _old_build(facts: KernelFacts) -> list[Finding]:
    origin = facts.origin
    if not older_build(origin, facts.device_cc):
        return []
    newer = NEWER_INSTRUCTIONS.get(int(float(facts.device_cc or 0)), "")
    return [finding(OLD_BUILD, facts, f"A {origin.label} kernel built for compute capability {origin.built_for} runs "
                    f"on a {facts.device_cc} device: it cannot use what the device's architecture added"
                    + (f" ({newer})." if newer else "."),
                    (Evidence("built for", origin.built_for, origin.evidence),
                     Evidence("device compute capability", facts.device_cc)),
                    next_step(facts, "old-build"), basis="derived", severity="info")]


OLD_BUILD = Rule("old-build", "launch", "the architecture the kernel's name states is older (major) than the device's",
                 "CUDA C++ Programming Guide, 'Binary Compatibility' (a cubin runs on later majors only through PTX "
                 "JIT or not at all)", _old_build)

LAUNCH_RULES: tuple[Rule, ...] = (SMALL_GRID, TAIL, OLD_BUILD)


@dataclass(frozen=True)
class FileFacts:
    """The whole selection's rows (:func:`iotrace.trace.reports.launch_groups.group_launches`) and the file's meta."""

    groups: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    #: The same rows grouped by launch configuration (``groups`` itself unless launches are listed one by one).
    configs: pd.DataFrame | None = None
    vocab: Vocabulary = NVIDIA
    #: (stored rule results, of them errors) of the launches that were not profiled: left out, not advice.
    rules_left_out: tuple[int, int] = (0, 0)


_SIGNATURE = re.compile(r"^(?:void\s+)?([^(<]*)")


def function_name(name: str) -> str:
    """The function's name without return type, namespaces, template arguments or parameters (what ncu's default
    ``--kernel-name-base function`` filters on): ``void ns::gemm<128>(float *)`` -> ``gemm``."""
    match = _SIGNATURE.match(name.strip())
    return (match.group(1) if match else name).strip().rsplit("::", 1)[-1] or name


def _collect_again(groups: pd.DataFrame, kid: int, name: str) -> str:
    """The ncu command that profiles launch ``kid`` alone: its function name as a regex and, to skip to it, how many
    launches before it in the file that regex matches (a capture that skipped or filtered launches counts more)."""
    function = function_name(name)
    pattern = re.compile(re.escape(function))
    before = sum(1 for n, ids in zip(groups["name"], groups["launch_ids"], strict=True)
                 if pattern.search(function_name(str(n))) for i in ids if i < kid)
    return f"ncu --set full -k regex:{re.escape(function)} --launch-skip {before} --launch-count 1 -o FILE APP [ARGS]"


def _not_profiled(facts: FileFacts) -> list[Finding]:
    """Every launch with no counters in the file, named once, with the command that collects it again: never
    analysed, and its stored rule results (rules failing on the missing metrics) left out."""
    groups = facts.groups
    failed = groups[~groups["profiled"]]
    if failed.empty:
        return []
    ids = sorted(i for ids in failed["launch_ids"] for i in ids)
    them = "them" if len(ids) != 1 else "it"
    names = ", ".join(f"#{i}" for i in ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
    kernels = "; ".join(sorted({function_name(str(n)) for n in failed["name"]}))
    command = facts.meta.get("command")
    ran = f"the capture ran `{command}`" if command else "the file does not store the capture's command"
    results, errors = facts.rules_left_out
    rules = "" if not results else (
        f" The file's {results} Nsight Compute rule result{'s' * (results != 1)} for {them}"
        + (f" ({errors} error{'s' * (errors != 1)}: rules that found no metrics to read)" if errors else "")
        + " are not advice and are left out.")
    first = int(ids[0])
    first_name = str(groups.loc[[first in i for i in groups["launch_ids"]], "name"].iloc[0])
    others = " (likewise for the others)" if len(ids) > 1 else ""
    try_next = (f"profile {them} again ({ran}; narrow it with rocprof-compute profile -k KERNEL, and read its log for "
                "why the counters were not collected)" if facts.vocab.amd else
                f"check that the application runs cleanly under compute-sanitizer first (a kernel that faults "
                f"cannot be profiled), then collect #{first} again on its own: "
                f"`{_collect_again(groups, first, first_name)}`{others}; {ran}; ncu's ==PROF== and ==ERROR== lines "
                "say what failed")
    return [Finding("profiling", f"{len(ids)} launch{'es' if len(ids) != 1 else ''} not profiled (no counters in "
                    f"the file: the kernel or ncu's replay of it failed): {names} ({kernels}). Nothing is analysed, "
                    f"averaged or advised for {them}, and no section is missing because of {them}.{rules}",
                    (Evidence("launches without counters", len(ids)),), try_next, "measured",
                    int(failed["id"].iloc[0]), str(failed["name"].iloc[0]), "warning", NOT_PROFILED.id)]


NOT_PROFILED = Rule("not-profiled", "profiling", "a launch has no counter in the file while others have some, or no "
                    "launch__* metric and no duration", "Nsight Compute leaves a failed replay's metrics empty",
                    _not_profiled, scope="file")


def _configurations(facts: FileFacts) -> list[Finding]:
    """One finding per kernel name launched in more than one distinct launch configuration, where it matters: the
    name takes :data:`CONFIG_SHARE` of the kernel time or more, and its configurations' occupancies (where the file
    has them) differ by :data:`CONFIG_OCCUPANCY_POINTS` or more. NCCL's are left out (a channel count, not a tune)."""
    groups = facts.configs if facts.configs is not None else facts.groups
    column = next((c for c in ("achieved_occupancy_pct", "est_achieved_occupancy_pct") if c in groups
                   and groups[c].notna().any()), None)
    file_ns = float(groups["total_ns"].sum(min_count=1) or 0.0)
    out: list[Finding] = []
    for name, rows in groups[groups["configs_of_name"] > 1].groupby("name", sort=False):
        totals = [float(t) if pd.notna(t) else 0.0 for t in rows["total_ns"]]
        total = sum(totals)
        occupancy = [None if column is None or pd.isna(o) else float(o)
                     for o in (rows[column] if column else [None] * len(rows))]
        known = [o for o in occupancy if o is not None]
        if is_communication(name) or (file_ns > 0 and total / file_ns < CONFIG_SHARE) or \
                (len(known) == len(occupancy) and max(known) - min(known) < CONFIG_OCCUPANCY_POINTS):
            continue
        weighted = [(o, t) for o, t in zip(occupancy, totals, strict=True) if o is not None and t > 0]
        mean = sum(o * t for o, t in weighted) / sum(t for _, t in weighted) if weighted else None
        label = "achieved" if column == "achieved_occupancy_pct" else "estimated achieved"
        parts = [f"{config_text(r)}: {int(r['launches_total'])} launch{'es' * (int(r['launches_total']) != 1)}, "
                 + (f"{t / total * 100:.1f}% of its time" if total > 0 else "time not recorded")
                 + ("" if o is None else f", {o:.1f}% occupancy")
                 for r, t, o in zip(rows.to_dict("records"), totals, occupancy, strict=True)]
        text = (f"{name} ran in {len(rows)} distinct launch configurations — " + "; ".join(parts)
                + (f". Time-weighted {label} occupancy over all its launches: {mean:.1f}%." if mean is not None
                   else "."))
        evidence = tuple(Evidence(f"configuration {i + 1} launches", int(r["launches_total"]), config_text(r))
                         for i, r in enumerate(rows.to_dict("records")))
        if mean is not None:
            evidence += (Evidence(f"time-weighted {label} occupancy", round(mean, 2), unit="%"),)
        library = classify(str(name)).library
        out.append(Finding("launch configurations", text, evidence,
                           "the library chose a different kernel configuration per call shape: compare the shapes' "
                           "time per unit of work and align or batch the slow shapes" if library else
                           "tune each configuration on its own: occupancy and the bound differ between them",
                           "measured", int(rows["id"].iloc[0]), str(name), "info", CONFIGURATIONS.id,
                           share_pct=None if file_ns <= 0 else 100.0 * total / file_ns))
    return out


CONFIGURATIONS = Rule("configurations", "launch configurations", "one kernel name launched in more than one distinct "
                      f"configuration, taking >= {CONFIG_SHARE:.0%} of kernel time, its configurations' occupancies "
                      f"{CONFIG_OCCUPANCY_POINTS:g} points or more apart (where known); not communication",
                      "iotrace (a row per configuration hides nothing; the finding says what one row per name "
                      "would, where the difference matters)", _configurations, scope="file")

FILE_RULES: tuple[Rule, ...] = (NOT_PROFILED, CONFIGURATIONS)
