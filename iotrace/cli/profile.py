"""``iotrace run KERNEL --nsys | --ncu | --cupti``: the flags and the entry point (wired in by ``iotrace.cli``).

The CLI resolves the kernel, shape, dtype, card and config, then calls :func:`main`, which checks that the run can be
profiled here (a GPU, the tool), runs the capture (a child ``iotrace run`` under nsys or ncu, or in-process for
``--cupti``), loads the export, keeps the kernels in the range ``iotrace/<kernel>``, writes the run manifest beside
the capture whatever happened, and prints the report: ``iotrace report`` on the export (timeline for nsys; stalls,
roofline and occupancy for ncu), or ``iotrace info``'s summary when the report cannot be drawn.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from iotrace.cli import above_zero, at_least
from iotrace.errors import InvalidValueError, IotraceError, NoGpuError
from iotrace.trace.profilers.capture import Capture, CapturePaths
from iotrace.trace.profilers.child import RunPlan, child_argv, mapping_text
from iotrace.trace.profilers.errors import NoKernelsInRangeError
from iotrace.trace.profilers.manifest import Manifest, device_info, git_info, utc_now, versions
from iotrace.trace.profilers.ncu import CLOCK_CONTROLS, NcuOptions, nvtx_filter
from iotrace.trace.profilers.tools import Tool

# The CLI imports this module to build its parser on every run, so nothing here may import nvtx, numpy or pandas at
# import time; iotrace.nvtx_ranges (which imports nvtx, and with it numpy) is imported where a run needs it.


def _range_name(kernel: str) -> str:
    from iotrace.nvtx_ranges import range_name as name

    return name(kernel)

__all__ = ["DEFAULT_OUT", "DEFAULT_TIMEOUT_S", "TOOLS", "add_arguments", "main", "wanted"]

#: The profiler flags, one of which a profiled run names.
TOOLS = ("nsys", "ncu", "cupti")
#: Where captures go unless --out says otherwise.
DEFAULT_OUT = Path("traces")
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
                       help="collect kernel activity in this process with torch.profiler (Kineto/CUPTI): no Nsight "
                            "tool needed, a GPU is")
    group = parser.add_argument_group("profiled runs (with --nsys, --ncu or --cupti)")
    group.add_argument("--out", type=Path, metavar="DIR",
                       help=f"directory for the capture and its run manifest (default {DEFAULT_OUT}/)")
    group.add_argument("--timeout", type=above_zero, metavar="SECONDS",
                       help=f"stop a profiler command that runs longer (default {DEFAULT_TIMEOUT_S:g})")
    group.add_argument("--clock-control", choices=CLOCK_CONTROLS,
                       help="ncu: lock clocks to base (default, repeatable counters) or leave them alone (none)")
    group.add_argument("--ncu-set", metavar="SET", help="ncu: the section set to collect (default full)")
    group.add_argument("--launch-count", type=at_least(1), metavar="N",
                       help="ncu: kernels to profile (default: the launches of one call of the kernel)")
    group.add_argument("--nvtx-include", metavar="FILTER",
                       help="ncu: NVTX filter to use instead of iotrace@iotrace\\/KERNEL/")
    group.add_argument("--launches", type=at_least(1), metavar="N",
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


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_options(args: argparse.Namespace) -> str:
    tool = _chosen(args)
    given = _given_options(args)
    if tool is None:
        raise InvalidValueError(f"{', '.join(map(_flag, given))} only applies to a profiled run",
                                "add --nsys, --ncu or --cupti")
    wrong = [name for name in given if _TOOL_ONLY.get(name, tool) != tool]
    if wrong:
        owners = ", ".join(f"{_flag(n)} is for --{_TOOL_ONLY[n]}" for n in wrong)
        raise InvalidValueError(f"{owners}, not --{tool}", f"drop it, or profile with --{_TOOL_ONLY[wrong[0]]}")
    return tool


def _require_gpu_for(tool: str) -> None:
    """nsys and ncu see only kernels that run on a GPU; under the Triton interpreter the child would run none."""
    from iotrace.kernels.backend import interpreting

    if not interpreting():
        return
    import torch

    if not torch.cuda.is_available():
        raise NoGpuError(f"no GPU: torch.cuda sees none, so the kernel would run under the Triton interpreter on the "
                         f"CPU, where {tool} sees no kernels", "profile on a machine with an NVIDIA GPU")
    raise NoGpuError(f"TRITON_INTERPRET=1 would run the kernel on the CPU, where {tool} sees no kernels",
                     "unset TRITON_INTERPRET (or set it to 0) to launch on the GPU")


def _paths(out: Path, kernel: str, tool: str, stamp: str) -> CapturePaths:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValueError(f"cannot create --out {out} ({exc.strerror or exc})", "choose a writable directory")\
            from exc
    paths = CapturePaths.new(out, kernel, tool, stamp)
    n = 2
    while paths.manifest.exists():  # two captures in one second: keep both
        paths = CapturePaths.new(out, kernel, tool, f"{stamp}-{n}")
        n += 1
    return paths


def _rerun(plan: RunPlan, tool: str, options: dict[str, Any]) -> str:
    argv = ["iotrace", *child_argv(plan)[3:], f"--{tool}"]
    for key in ("ncu_set", "clock_control", "launch_count", "nvtx_include", "launches"):
        if options.get(key) is not None:
            argv += [_flag(key), str(options[key])]
    return shlex.join(argv)


def _tool(tool_name: str) -> tuple[Tool | None, dict[str, Any]]:
    """Refuse early (no GPU, no tool) and describe the collector for the manifest."""
    if tool_name == "cupti":
        from iotrace.trace.profilers import cupti

        cupti.require_gpu()
        return None, cupti.collector()
    from iotrace.trace.profilers.tools import find_tool

    _require_gpu_for(tool_name)
    found = find_tool(tool_name)
    return found, found.to_dict()


def _options(args: argparse.Namespace, spec: Any, plan: RunPlan, tool_name: str) -> tuple[dict[str, Any],
                                                                                           NcuOptions | None]:
    """The profiler options with their defaults filled in (for the manifest), and ncu's as one record."""
    options: dict[str, Any] = {"timeout_s": args.timeout or DEFAULT_TIMEOUT_S}
    if tool_name == "cupti":
        options["launches"] = args.launches or DEFAULT_LAUNCHES
    if tool_name != "ncu":
        return options, None
    # One call of the kernel may launch several Triton kernels (split-K, a reduction pass): profile them all.
    launches = len(spec.compile_units(plan.shape, plan.dtype, plan.config, plan.backend))
    ncu_options = NcuOptions(section_set=args.ncu_set or "full", clock_control=args.clock_control or "base",
                             launch_count=args.launch_count or launches,
                             nvtx_include=args.nvtx_include or nvtx_filter(spec.name))
    options.update(ncu_set=ncu_options.section_set, clock_control=ncu_options.clock_control,
                   launch_count=ncu_options.launch_count, nvtx_include=args.nvtx_include)
    return options, ncu_options


def main(args: argparse.Namespace, spec: Any, shape: dict, dtype: str, card: Any, config: dict) -> None:
    """Profile one run of ``spec`` and print what the capture holds. See the module docstring."""
    tool_name = _check_options(args)
    found, tool = _tool(tool_name)
    plan = RunPlan(spec.name, args.backend, dict(shape), dtype, dict(config),
                   seed=args.seed if args.seed is not None else secrets.randbits(31),
                   check=not args.no_check and tool_name != "cupti",  # --cupti launches and captures; it checks nothing
                   card=args.card)
    options, ncu_options = _options(args, spec, plan, tool_name)
    started = utc_now()
    paths = _paths(args.out or DEFAULT_OUT, spec.name, tool_name, started.strftime("%Y%m%dT%H%M%SZ"))
    child = None if tool_name == "cupti" else child_argv(plan)
    manifest = Manifest(
        kernel=plan.kernel, backend=plan.backend, shape=plan.shape, dtype=plan.dtype, config=plan.config,
        seed=plan.seed, check=plan.check, range=_range_name(spec.name), tool=tool,
        options={k: v for k, v in options.items() if v is not None},
        argv={"parent": list(sys.argv), "child": child, "profiler": [], "rerun": _rerun(plan, tool_name, options)},
        card={"key": card.key, "name": card.name, "cc": card.cc, "origin": card.origin, "given": args.card},
        started=started, nvtx_filter=ncu_options.nvtx_include if ncu_options else None,
        paths={"manifest": str(paths.manifest), "capture": None, "export": None,
               "log": None if tool_name == "cupti" else str(paths.log)},
        device=device_info(), versions=versions(), git=git_info())
    try:
        capture = _collect(found, spec, plan, paths, child, options, ncu_options, manifest)
        tables, names = _load_in_range(capture, spec.name, tool_name, manifest)
        manifest.status = "ok"
    except IotraceError as exc:
        manifest.error = str(exc)
        raise
    finally:
        manifest.finished = utc_now()
        manifest.write()
    if args.json:
        print(json.dumps(manifest.to_dict(), indent=2, default=str))
        return
    print(f"captured {capture.export} with {tool['product']} {tool['version'] or ''}".rstrip()
          + f": {manifest.kernels['in_range']} kernels in {manifest.range} (of {manifest.kernels['total']})")
    print(f"manifest {paths.manifest}")
    if not args.no_report:
        _print_report(capture.export, tables, names, plan)


def _collect(found: Tool | None, spec: Any, plan: RunPlan, paths: CapturePaths, child: list[str] | None,
             options: dict[str, Any], ncu_options: NcuOptions | None, manifest: Manifest) -> Capture:
    """Run the collector; the manifest gets the profiler commands and file paths before they run, so a failed
    capture's manifest still says what was run and where its output went."""
    timeout_s = options["timeout_s"]
    if found is None:
        from iotrace.trace.profilers import cupti

        manifest.paths["capture"] = manifest.paths["export"] = str(paths.with_suffix(".kineto.json"))
        return cupti.capture(spec, plan, paths, launches=options["launches"])
    if found.name == "nsys":
        from iotrace.trace.profilers import nsys

        report, sqlite = paths.with_suffix(".nsys-rep"), paths.with_suffix(".sqlite")
        manifest.argv["profiler"] = [nsys.profile_argv(found.path, paths.stem, child or []),
                                     nsys.export_argv(found.path, report, sqlite)]
        manifest.paths.update(capture=str(report), export=str(sqlite))
        capture = nsys.capture(found, paths, child or [], timeout_s=timeout_s, env=dict(os.environ))
        manifest.paths["capture"] = str(capture.capture)  # .qdrep from an older nsys
        manifest.argv["profiler"] = capture.commands
        return capture
    from iotrace.trace.profilers import ncu

    assert ncu_options is not None  # _options makes them for --ncu
    report = paths.with_suffix(".ncu-rep")
    manifest.argv["profiler"] = [ncu.profile_argv(found.path, str(paths.stem), child or [], ncu_options)]
    manifest.paths.update(capture=str(report), export=str(report))
    return ncu.capture(found, paths, child or [], ncu_options, timeout_s=timeout_s, env=dict(os.environ))


def _load_in_range(capture: Capture, kernel: str, tool_name: str, manifest: Manifest) -> tuple[Any, list[str]]:
    from iotrace.trace.loader import load
    from iotrace.trace.profilers.selection import in_range

    assert capture.export is not None  # every collector sets it
    tables = load(capture.export)
    inside = in_range(tables, _range_name(kernel), filtered_by_tool=tool_name == "ncu")
    names = sorted({str(n) for n in inside["name"]})
    manifest.kernels = {"in_range": len(inside), "total": len(tables.kernels), "names": names}
    if inside.empty:
        outside = len(tables.kernels)
        raise NoKernelsInRangeError(
            f"{capture.export} holds no kernels launched inside the NVTX range {_range_name(kernel)} "
            f"({outside} kernel{'s' if outside != 1 else ''} outside it)",
            "check that the kernel launches through KernelSpec.launch, which opens the range, and that the "
            "profiler traced NVTX")
    return tables, names


def _print_report(export: Path | None, tables: Any, names: list[str], plan: RunPlan) -> None:
    """``iotrace report`` on the kernels in the range; the ``iotrace info`` summary if the report fails."""
    from iotrace import cli
    from iotrace.trace.profilers.selection import name_regex

    # No --card: the report takes ceilings from the device the export names, the GPU that actually ran the kernel
    # (a --card given to `run` chose the config, and may name another card).
    argv = ["report", str(export), "--kernel", name_regex(names), "--plugin", plan.kernel,
            "--shape", mapping_text(plan.shape), "--dtype", plan.dtype]
    errors = io.StringIO()
    crash = ""
    try:
        with contextlib.redirect_stderr(errors):
            code = cli.main(argv)
    except SystemExit as exc:  # argparse refusing an option the report command does not (yet) take
        code = exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # a fault in the report must not hide a capture that is saved and sound
        code, crash = 1, f"{type(exc).__name__}: {exc} (a bug in `iotrace report`)"
    if code == 0:
        return
    from iotrace.trace.info import render_info, summarise

    reason = crash or " ".join(errors.getvalue().split()) or f"exit {code}"
    print(f"report unavailable ({reason}); the export's summary instead:")
    print(render_info(summarise(tables)))
