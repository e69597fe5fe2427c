"""The rules that read a timeline (nsys, Kineto): the GPU idle, copies against kernels, the kernel that dominates.

Each takes the :class:`~iotrace.trace.reports.timeline.Timeline` of the whole trace. The timeline-findings work
(Nsight Systems' expert rules on nsys and Kineto) adds its rules here, in the same registry and ranking.
"""

from __future__ import annotations

from iotrace.trace.findings.rule import Rule
from iotrace.trace.reports.records import Evidence, Finding, Gain
from iotrace.trace.reports.timeline import IDLE_SHARE, MEMCPY_SHARE, Timeline

__all__ = ["TIMELINE_RULES"]


def _gpu_idle(line: Timeline) -> list[Finding]:
    out = []
    for row in line.idle.to_dict("records"):
        if row["idle_share"] <= IDLE_SHARE:
            continue
        share, idle_ms, span_ms = row["idle_share"] * 100, row["idle_ns"] / 1e6, row["span_ns"] / 1e6
        out.append(Finding("timeline", f"GPU {row['device']} was idle {share:.0f}% of the traced span "
                                       f"({idle_ms:.3f} of {span_ms:.3f} ms).",
                           (Evidence("idle share", round(row["idle_share"], 3), f"> {IDLE_SHARE}"),),
                           "Find what the host does in the longest gaps (the table lists the kernels on either "
                           "side); overlap copies with compute, batch small launches or capture a CUDA graph.",
                           "measured", rule=GPU_IDLE.id,
                           gain=Gain(float(row["idle_share"]), float(row["span_ns"]),
                                     "the GPU's idle time is the most that closing the gaps can save")))
    return out


GPU_IDLE = Rule("gpu-idle", "timeline", f"a GPU idle more than {IDLE_SHARE:.0%} of the traced span",
                "HTA's idle-time analysis (facebookresearch/HolisticTraceAnalysis); 20% is iotrace's cut-off",
                _gpu_idle, scope="timeline")


def _copy_share(line: Timeline) -> list[Finding]:
    share = line.memcpy.get("share")
    if share is None or share <= MEMCPY_SHARE:
        return []
    return [Finding("timeline", f"Memory copies and sets take {share * 100:.0f}% of GPU busy time.",
                    (Evidence("copy share", round(share, 3), f"> {MEMCPY_SHARE}"),),
                    "Keep data on the device between steps; use pinned memory and async copies that overlap "
                    "kernels.", "measured", rule=COPY_SHARE.id,
                    gain=Gain(float(share), float(line.memcpy["copy_ns"] + line.memcpy["kernel_ns"]),
                              "removing every copy and set saves at most their time"))]


COPY_SHARE = Rule("copy-share", "timeline", f"copies and sets over {MEMCPY_SHARE:.0%} of GPU busy time",
                  "iotrace (steady-state inference keeps weights and KV cache on the device)", _copy_share,
                  scope="timeline")


def _top_kernel(line: Timeline) -> list[Finding]:
    if not len(line.top_kernels):
        return []
    first = line.top_kernels.iloc[0]
    launches = int(first["launches"])
    return [Finding("timeline", f"The top kernel takes {float(first['share_pct']):.0f}% of kernel time "
                                f"({launches} launch{'es' * (launches != 1)}).",
                    (Evidence("share", round(float(first["share_pct"]), 2), "", "%"),),
                    "Profile this kernel with ncu first: it bounds what tuning anything else can win.",
                    "measured", None, str(first["name"]), "info", TOP_KERNEL.id)]


TOP_KERNEL = Rule("top-kernel", "timeline", "always: the kernel with the most GPU time", "Amdahl's law: it bounds "
                  "what tuning anything else can win", _top_kernel, scope="timeline")

TIMELINE_RULES: tuple[Rule, ...] = (GPU_IDLE, COPY_SHARE, TOP_KERNEL)
