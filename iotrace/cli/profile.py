"""``iotrace run KERNEL --nsys | --ncu | --cupti``: the profiler flags, and the printing of a profiled run.

``iotrace run`` resolves the call and its config, then calls :func:`main`, which checks the flags, hands the run to
:func:`iotrace.trace.profilers.session.profile_run` (capture, load, keep the kernels in ``iotrace/<kernel>``, write the
manifest) and prints the report on the export (timeline for nsys; stalls, roofline and occupancy for ncu), or
``iotrace info``'s summary when the report cannot be drawn.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path
from typing import Any

from iotrace.argtypes import count_at_least, positive_number
from iotrace.errors import InvalidValueError, IotraceError
from iotrace.kernel_call import KernelCall
from iotrace.trace.profilers.child import RunPlan, flag
from iotrace.trace.profilers.ncu import CLOCK_CONTROLS, NcuOptions, nvtx_filter

# The CLI imports this module to build its parser on every run, so nothing here may import nvtx, numpy or pandas at
# import time: the session (which names NVTX ranges) is imported when a run is profiled.

__all__ = ["DEFAULT_TIMEOUT_S", "TOOLS", "add_arguments", "main", "wanted"]

#: The profiler flags, one of which a profiled run names.
TOOLS = ("nsys", "ncu", "cupti")
#: How long one profiler command may run: ncu --set full replays each kernel dozens of times.
DEFAULT_TIMEOUT_S = 1800.0
#: Kernel launches captured by --cupti unless --launches says otherwise.
DEFAULT_LAUNCHES = 10

# Options that apply to one tool only (dest -> tool), and options of every profiled run.
_TOOL_ONLY = {"clock_control": "ncu", "ncu_set": "ncu", "launch_count": "ncu", "nvtx_include": "ncu",
              "launches": "cupti"}
_COMMON = ("out", "timeout", "no_report")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the profiler flags to the ``run`` parser."""
    tools = parser.add_mutually_exclusive_group()
    tools.add_argument("--nsys", action="store_true",
                       help="run under Nsight Systems (nsys profile --trace=cuda,nvtx) and print the timeline of the "
                            "kernel's NVTX range")
    tools.add_argument("--ncu", action="store_true",
                       help="run under Nsight Compute (--set full, NVTX filter on iotrace/KERNEL) and print the "
                            "stall, roofline and occupancy reports")
    tools.add_argument("--cupti", action="store_true",
                       help="collect kernel activity in this process with torch.profiler (Kineto/CUPTI): needs a GPU "
                            "but no Nsight tool")
    group = parser.add_argument_group("profiled runs (with --nsys, --ncu or --cupti)")
    group.add_argument("--out", type=Path, metavar="DIR",
                       help="directory for the capture and its run manifest (default traces/)")
    group.add_argument("--timeout", type=positive_number, metavar="SECONDS",
                       help=f"stop a profiler command that runs longer (default {DEFAULT_TIMEOUT_S:g})")
    group.add_argument("--clock-control", choices=CLOCK_CONTROLS,
                       help="ncu: lock clocks to base (default, repeatable counters) or leave them alone (none)")
    group.add_argument("--ncu-set", metavar="SET", help="ncu: the section set to collect (default full)")
    group.add_argument("--launch-count", type=count_at_least(1), metavar="N",
                       help="ncu: kernels to profile (default: the launches of one call of the kernel)")
    group.add_argument("--nvtx-include", metavar="FILTER",
                       help="ncu: NVTX filter to use instead of iotrace@iotrace\\/KERNEL/")
    group.add_argument("--launches", type=count_at_least(1), metavar="N",
                       help=f"--cupti: kernel calls captured (default {DEFAULT_LAUNCHES})")
    group.add_argument("--no-report", action="store_true", help="capture and check only; print no report")


def _chosen(args: argparse.Namespace) -> str | None:
    return next((tool for tool in TOOLS if getattr(args, tool, False)), None)


def _given_options(args: argparse.Namespace) -> list[str]:
    names = [*_TOOL_ONLY, *_COMMON]
    return [name for name in names if getattr(args, name, None) not in (None, False)]


def wanted(args: argparse.Namespace) -> bool:
    """Whether the run asks for a profiler (a profiler flag, or one of their options, which :func:`main` checks)."""
    return _chosen(args) is not None or bool(_given_options(args))


def _check_options(args: argparse.Namespace) -> str:
    tool = _chosen(args)
    given = _given_options(args)
    if tool is None:
        raise InvalidValueError(f"{', '.join(map(flag, given))} only applies to a profiled run",
                                "add --nsys, --ncu or --cupti")
    wrong = [name for name in given if _TOOL_ONLY.get(name, tool) != tool]
    if wrong:
        owners = ", ".join(f"{flag(n)} is for --{_TOOL_ONLY[n]}" for n in wrong)
        raise InvalidValueError(f"{owners}, not --{tool}", f"drop it, or profile with --{_TOOL_ONLY[wrong[0]]}")
    return tool


def _options(args: argparse.Namespace, plan: RunPlan, tool_name: str) -> tuple[dict[str, Any], NcuOptions | None]:
    """The profiler options with their defaults filled in (for the manifest), and ncu's as one record."""
    options: dict[str, Any] = {"timeout_s": args.timeout or DEFAULT_TIMEOUT_S}
    if tool_name == "cupti":
        options["launches"] = args.launches or DEFAULT_LAUNCHES
    if tool_name != "ncu":
        return options, None
    # One call of the kernel may launch several Triton kernels (split-K, a reduction pass): profile them all.
    launches = len(plan.call.spec.compile_units(plan.shape, plan.dtype, plan.config, plan.backend))
    ncu_options = NcuOptions(section_set=args.ncu_set or "full", clock_control=args.clock_control or "base",
                             launch_count=args.launch_count or launches,
                             nvtx_include=args.nvtx_include or nvtx_filter(plan.kernel))
    options.update(ncu_set=ncu_options.section_set, clock_control=ncu_options.clock_control,
                   launch_count=ncu_options.launch_count, nvtx_include=args.nvtx_include)
    return options, ncu_options


def main(args: argparse.Namespace, call: KernelCall, config: dict[str, Any]) -> None:
    """Profile one run of ``call`` with ``config`` and print what the capture holds. See the module docstring."""
    tool_name = _check_options(args)
    plan = RunPlan(call, dict(config), seed=args.seed if args.seed is not None else secrets.randbits(31),
                   check=not args.no_check and tool_name != "cupti",  # --cupti launches and captures; it checks nothing
                   card=args.card)
    options, ncu_options = _options(args, plan, tool_name)
    from iotrace.trace.profilers.session import profile_run

    done = profile_run(plan, tool_name, options, ncu_options, out=args.out, parent_argv=list(sys.argv))
    manifest = done.manifest
    if args.json:
        print(json.dumps(manifest.to_dict(), indent=2, default=str))
        return
    tool = manifest.tool
    print(f"captured {done.capture.export} with {tool['product']} {tool['version'] or ''}".rstrip()
          + f": {manifest.kernels['in_range']} kernels in {manifest.range} (of {manifest.kernels['total']})")
    print(f"manifest {done.paths.manifest}")
    if not args.no_report:
        _print_report(done.capture.export, done.tables, done.names, plan)


def _print_report(export: Path | None, tables: Any, names: list[str], plan: RunPlan) -> None:
    """The report (``iotrace report`` in the terminal) on the kernels in the range; ``iotrace info``'s summary of the
    capture if the report cannot be drawn."""
    from iotrace.cli.report import print_terminal
    from iotrace.trace.loader import load
    from iotrace.trace.profilers.selection import name_regex
    from iotrace.trace.reports.report import build_report

    # No card: the report takes ceilings from the device the export names, the GPU that actually ran the kernel
    # (a --card given to `run` chose the config, and may name another card).
    try:
        report = build_report(load(export or Path()), kernel=name_regex(names), plugin=plan.kernel,
                              shape=plan.shape, dtype=plan.dtype)
        print_terminal(report)
        return
    except IotraceError as exc:
        reason = f"iotrace: error: {exc}"
    except Exception as exc:  # a fault in the report must not hide a capture that is saved and sound
        reason = f"{type(exc).__name__}: {exc} (a bug in `iotrace report`)"
    from iotrace.cli.report import info_text
    from iotrace.trace.info import summarise

    print(f"report unavailable ({reason}); the export's summary instead:")
    print(info_text(summarise(tables)))
