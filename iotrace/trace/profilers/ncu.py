"""Capture with Nsight Compute: ``ncu --set full --nvtx --nvtx-include <range> ...`` around the child run.

Flags, from the Nsight Compute CLI User Guide (https://docs.nvidia.com/nsight-compute/NsightComputeCli/index.html):

- ``--set full``: every section, including WarpStateStats, SourceCounters (sampled stalls) and the rooflines the
  stall, roofline and occupancy reports read ("Sets and Sections"); ``--set`` is a flag so a cheaper set can be named;
- ``--nvtx --nvtx-include FILTER`` ("NVTX Filtering"): profile only kernels launched inside the range. Push/pop ranges
  end in ``/``; ``Domain@Range`` names a domain other than the default one; the quantifiers ``@ , [ ] / * +`` inside
  a name are escaped with ``\\``. iotrace pushes ``iotrace/<kernel>`` in the NVTX domain ``iotrace``
  (:mod:`iotrace.nvtx_ranges`), so the filter is ``iotrace@iotrace\\/<kernel>/``;
- ``--clock-control base|none`` ("Clock Control"): ``base`` (ncu's default) locks the clocks to base for repeatable
  counters; ``none`` leaves them alone, for numbers closer to an unprofiled run;
- ``--launch-count N``: stop profiling after N kernels (``--set full`` replays each kernel dozens of times);
- ``--target-processes all``, ``--export <base>`` (ncu appends ``.ncu-rep``), ``--force-overwrite``.

``ERR_NVGPUCTRPERM`` in ncu's output means the driver refused the performance counters; NVIDIA's page
https://developer.nvidia.com/ERR_NVGPUCTRPERM gives the fixes quoted in the error below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iotrace.trace.profilers.capture import Capture, CapturePaths
from iotrace.trace.profilers.errors import ChildFailedError, CountersNotPermittedError, NoKernelsInRangeError
from iotrace.trace.profilers.process import run_logged, tail
from iotrace.trace.profilers.tools import Tool

__all__ = ["CLOCK_CONTROLS", "NcuOptions", "capture", "escape", "nvtx_filter", "profile_argv"]

#: ``--clock-control`` values iotrace passes through (ncu also has ``reset``, which profiles nothing).
CLOCK_CONTROLS = ("base", "none")

_QUANTIFIERS = "@,[]/*+"


def escape(name: str) -> str:
    """A range name with ncu's NVTX-filter quantifiers escaped (backslashes first, so they are not doubled twice)."""
    out = name.replace("\\", "\\\\")
    for char in _QUANTIFIERS:
        out = out.replace(char, "\\" + char)
    return out


def nvtx_filter(kernel: str) -> str:
    """The ``--nvtx-include`` filter for the push/pop range ``iotrace/<kernel>`` in the ``iotrace`` domain."""
    from iotrace.nvtx_ranges import DOMAIN, range_name  # imports nvtx (and numpy): only when a run needs it

    return f"{DOMAIN}@{escape(range_name(kernel))}/"


@dataclass(frozen=True)
class NcuOptions:
    section_set: str = "full"
    clock_control: str = "base"
    launch_count: int = 1
    nvtx_include: str = ""


def profile_argv(ncu: str, base: str, child: Sequence[str], options: NcuOptions) -> list[str]:
    return [ncu, "--set", options.section_set, "--nvtx", "--nvtx-include", options.nvtx_include,
            "--clock-control", options.clock_control, "--launch-count", str(options.launch_count),
            "--target-processes", "all", "--export", base, "--force-overwrite", *child]


def capture(tool: Tool, paths: CapturePaths, child: Sequence[str], options: NcuOptions, *, timeout_s: float,
            env: Mapping[str, str] | None = None) -> Capture:
    """Profile the kernels of ``child`` inside its range; returns the ``.ncu-rep`` (which iotrace loads directly)."""
    report = paths.with_suffix(".ncu-rep")
    argv = profile_argv(tool.path, str(paths.stem), child, options)
    result = Capture(capture=report, export=report, commands=[argv])
    done = run_logged(argv, timeout_s=timeout_s, log=paths.log, what="ncu", env=env)
    result.seconds = done.seconds
    if "ERR_NVGPUCTRPERM" in done.output:
        raise CountersNotPermittedError(
            "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM)",
            "allow them for all users with the nvidia kernel module option NVreg_RestrictProfilingToAdminUsers=0 "
            "(a line `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/, then reboot), or "
            "run ncu as root/administrator — https://developer.nvidia.com/ERR_NVGPUCTRPERM; or use --nsys or "
            "--cupti, which need no counters")
    if done.failed_status != 0:
        raise ChildFailedError(f"the profiled run failed under ncu (exit {done.failed_status}): "
                               f"{tail(done.stderr or done.stdout)}",
                               f"the full output is in {paths.log}; run the child alone to see it: "
                               f"{' '.join(child)}")
    if not report.is_file():
        # ncu writes no report at all when its filters matched nothing ("==WARNING== No kernels were profiled.").
        raise NoKernelsInRangeError(
            f"ncu profiled no kernels matching --nvtx-include {options.nvtx_include!r} and wrote no report "
            f"({tail(done.output, lines=3) or 'no output'})",
            "check that the kernel launches through KernelSpec.launch (which opens the range) and that the filter "
            f"matches it on this ncu version; --nvtx-include overrides it. Log: {paths.log}")
    return result

