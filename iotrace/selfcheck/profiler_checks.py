"""Step 5: the profiler path on the real tools. ``iotrace run KERNEL --ncu --clock-control none`` per kernel (one in a
quick run) and one ``--nsys`` capture, each as a real subprocess writing its capture and manifest under the output
folder; the ncu exports are loaded back through iotrace and its theoretical occupancy compared with ncu's stored
value. A tool that is missing or refuses (no counter permission) is recorded with its reason, and the run goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iotrace.plugins.spec import KernelSpec
from iotrace.selfcheck.record import Step

#: Messages of `iotrace run --nsys/--ncu` that mean "this machine cannot", not "iotrace is wrong".
_CANNOT = ("is not installed", "not on PATH", "ERR_NVGPUCTRPERM", "not permitted", "counters")
#: One capture's wall-clock limit: ncu's full set replays each kernel dozens of times.
CAPTURE_TIMEOUT_S = 300


def _capture(spec: KernelSpec, tool: str, out: Path, card: str) -> tuple[dict[str, Any] | None, str]:
    preset = next(iter(spec.presets), None)
    dtype = "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]
    argv = [sys.executable, "-m", "iotrace", "run", spec.name, "--dtype", dtype, "--card", card, f"--{tool}",
            "--out", str(out), "--json", *(["--preset", preset] if preset else []),
            *(["--clock-control", "none"] if tool == "ncu" else [])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CAPTURE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {CAPTURE_TIMEOUT_S} s: {' '.join(argv[2:])}"
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["(no message)"])[-1]
    return json.loads(done.stdout), ""


def _ncu_occupancy(export: str) -> list[dict[str, Any]]:
    from iotrace.trace import load
    from iotrace.trace.reports import build_report

    rows = []
    for k in build_report(load(export)).kernels:
        occ = k.occupancy
        rows.append({"kernel": k.name[:60], "iotrace_pct": occ.theoretical_pct if occ else None,
                     "ncu_pct": occ.theoretical_pct_file if occ else None,
                     "agree": occ.agrees if occ else None})
    return rows


def capture_all(step: Step, specs: list[KernelSpec], out: Path, card: str, quick: bool,
                out_of_time: Callable[[], bool]) -> Step:
    captures = out / "traces"
    chosen = specs[:1] if quick else specs
    plan = [(spec, "ncu") for spec in chosen] + [(specs[0], "nsys")]
    cannot, failed, mismatches = [], [], 0
    for spec, tool in plan:
        if out_of_time():
            step.rows.append({"kernel": spec.name, "tool": tool, "status": "not run: the time budget ran out"})
            continue
        manifest, why = _capture(spec, tool, captures, card)
        if manifest is None:
            (cannot if any(word in why for word in _CANNOT) else failed).append(f"{tool}: {why}")
            step.rows.append({"kernel": spec.name, "tool": tool, "status": "not captured", "why": why})
            continue
        paths = manifest.get("paths", {})
        row = {"kernel": spec.name, "tool": tool, "status": manifest.get("status"),
               "kernels_in_range": manifest.get("kernels", {}).get("in_range"), "capture": paths.get("capture"),
               "manifest": paths.get("manifest")}
        if tool == "ncu" and paths.get("export"):
            occupancy = _ncu_occupancy(paths["export"])
            row["occupancy"] = occupancy
            mismatches += sum(1 for r in occupancy if r["agree"] is False)
        step.rows.append(row)
    step.figures = {"occupancy_mismatches_vs_ncu": mismatches}
    if failed or mismatches:
        step.fail("; ".join(failed + ([f"{mismatches} kernels where iotrace's theoretical occupancy differs from "
                                        "ncu's"] if mismatches else [])))
    elif cannot and len(cannot) == len(plan):
        step.skip("no profiler could run here: " + "; ".join(dict.fromkeys(cannot)))
    elif cannot:
        step.reason = "recorded, not failed: " + "; ".join(dict.fromkeys(cannot))
    return step
