"""A profiled run as a library call: refuse early (no GPU, no tool), run the capture, load the export, keep the kernels
in the NVTX range ``iotrace/<kernel>``, and write the run manifest beside the capture whatever happened.

:func:`profile_run` does it for one :class:`~iotrace.trace.profilers.child.RunPlan` (a child ``iotrace run``
under nsys or ncu, or in-process for ``--cupti``); ``iotrace run KERNEL --nsys | --ncu | --cupti``
(:mod:`iotrace.cli.profile`) parses the flags, calls it and prints the report.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError, IotraceError, NoGpuError
from iotrace.trace.profilers.capture import Capture, CapturePaths
from iotrace.trace.profilers.child import RunPlan, child_argv, flag
from iotrace.trace.profilers.errors import NoKernelsInRangeError
from iotrace.trace.profilers.manifest import Manifest, device_info, git_info, utc_now, versions
from iotrace.trace.profilers.ncu import NcuOptions
from iotrace.trace.profilers.tools import Tool

__all__ = ["DEFAULT_OUT", "ProfiledRun", "profile_run"]

#: Where captures go unless --out says otherwise.
DEFAULT_OUT = Path("traces")


def range_name(kernel: str) -> str:
    from iotrace.nvtx_ranges import range_name as name  # imports nvtx (and numpy): only when a run is profiled

    return name(kernel)


@dataclass
class ProfiledRun:
    """What a profiled run left: the capture, its tables, the kernel names in the range, and the manifest written."""

    capture: Capture
    tables: Any
    names: list[str]
    manifest: Manifest
    paths: CapturePaths


def profile_run(plan: RunPlan, tool_name: str, options: dict[str, Any], ncu_options: NcuOptions | None, *,
                out: Path | None = None, parent_argv: list[str] | None = None) -> ProfiledRun:
    """Profile ``plan`` with ``tool_name`` (nsys, ncu or cupti); ``options`` are the profiler options with their
    defaults filled in (``timeout_s``, ``launches`` for cupti, ncu's as :class:`NcuOptions`).

    :raises NoGpuError: no GPU, or the Triton interpreter is on (a profiler would see no kernels).
    :raises NoKernelsInRangeError: the export holds no kernel inside ``iotrace/<kernel>``.
    """
    call = plan.call
    found, tool = _tool(tool_name)
    started = utc_now()
    paths = _paths(out or DEFAULT_OUT, call.kernel, tool_name, started.strftime("%Y%m%dT%H%M%SZ"))
    child = None if tool_name == "cupti" else child_argv(plan)
    manifest = Manifest(
        call=call, config=plan.config, seed=plan.seed, check=plan.check, range=range_name(call.kernel), tool=tool,
        options={k: v for k, v in options.items() if v is not None},
        argv={"parent": list(parent_argv or []), "child": child, "profiler": [],
              "rerun": _rerun(plan, tool_name, options)},
        card_given=plan.card, started=started, nvtx_filter=ncu_options.nvtx_include if ncu_options else None,
        paths={"manifest": str(paths.manifest), "capture": None, "export": None,
               "log": None if tool_name == "cupti" else str(paths.log)},
        device=device_info(), versions=versions(), git=git_info())
    try:
        capture = _collect(found, plan, paths, child, options, ncu_options, manifest)
        tables, names = _load_in_range(capture, call.kernel, tool_name, manifest)
        manifest.status = "ok"
    except IotraceError as exc:
        manifest.error = str(exc)
        raise
    finally:
        manifest.finished = utc_now()
        manifest.write()
    return ProfiledRun(capture, tables, names, manifest, paths)


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
            argv += [flag(key), str(options[key])]
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


def _collect(found: Tool | None, plan: RunPlan, paths: CapturePaths, child: list[str] | None,
             options: dict[str, Any], ncu_options: NcuOptions | None, manifest: Manifest) -> Capture:
    """Run the collector; the manifest gets the profiler commands and file paths before they run, so a failed
    capture's manifest still says what was run and where its output went."""
    timeout_s = options["timeout_s"]
    if found is None:
        from iotrace.trace.profilers import cupti

        manifest.paths["capture"] = manifest.paths["export"] = str(paths.with_suffix(".kineto.json"))
        return cupti.capture(plan.call.spec, plan, paths, launches=options["launches"])
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
    inside = in_range(tables, range_name(kernel), filtered_by_tool=tool_name == "ncu")
    names = sorted({str(n) for n in inside["name"]})
    manifest.kernels = {"in_range": len(inside), "total": len(tables.kernels), "names": names}
    if inside.empty:
        outside = len(tables.kernels)
        raise NoKernelsInRangeError(
            f"{capture.export} holds no kernels launched inside the NVTX range {range_name(kernel)} "
            f"({outside} kernel{'s' if outside != 1 else ''} outside it)",
            "check that the kernel launches through KernelSpec.launch, which opens the range, and that the "
            "profiler traced NVTX")
    return tables, names


