"""rocprof-compute (formerly Omniperf) workload folders: dispatches, counters, the device and measured ceilings.

A workload folder (``rocprof-compute profile`` writes one per GPU model, e.g. ``workloads/NAME/MI300X_A1/``) holds
``pmc_perf.csv`` (one row per dispatch: its resources, timestamps and every counter of every pass, merged),
``sysinfo.csv`` (the machine, one row) and, where the roofline benchmark ran, ``roofline.csv`` (measured peaks per
device). The reader takes any of the folder's files (or the folder, through :func:`iotrace.trace.load`) and reads the
workload: the file handed in only says which folder.

Into the tables NVIDIA's formats fill:

* ``kernels``: one row per dispatch; ``id`` is the file's Dispatch_ID. Grid_Size (total work-items, flattened: the
  file has no x/y/z split) becomes ``grid_x`` = workgroups = ceil(Grid_Size / Workgroup_Size), the unit CUDA's
  grid is counted in, and Workgroup_Size becomes ``block_x``; LDS per workgroup is ``smem_bytes`` and scratch per
  work-item ``local_mem_bytes_per_thread`` (the same quantities NVIDIA calls shared and local memory);
  ``arch_vgpr``/``accum_vgpr``/``sgpr``/``wave_size`` as the file gives them. Kernel names lose the
  `` [clone .kd]`` / ``.kd`` suffix rocprof appends to the code object symbol.
* ``metrics``: every counter (SQ_*, TCC_*[n], TCP_*, ...) per dispatch in long form, unit ``""`` (raw counts).
* ``devices``: sysinfo.csv's GPU, one row per GPU_ID the dispatches ran on.
* ``meta["roofline_ceilings"]``: roofline.csv as rows {device, ceiling, value, low, high, unit} (GB/s, GFLOP/s,
  GOP/s), empty with a note where the workload has none (rocprof-compute measures none on MI100).

Column names come from ``iotrace/data/trace_fields.toml`` ([rocprof_compute.*]).
"""

from __future__ import annotations

import csv
import io
import re
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from iotrace.trace.devices import with_cards
from iotrace.trace.errors import TraceFormatError
from iotrace.trace.fields import fields
from iotrace.trace.formats._sniff import RocprofCompute
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables, build

__all__ = ["REQUIRED_FILES", "RocprofComputeParser", "clean_kernel_name", "read_workload"]

#: The files a workload cannot be read without (rocprof-compute's analyze step needs both: ROCm/rocprofiler-compute
#: src/rocprof_compute_analyze/analysis_base.py loads sysinfo.csv, and its sanitize() refuses a workload without
#: pmc_perf.csv through src/utils/utils.py is_workload_empty).
REQUIRED_FILES = ("pmc_perf.csv", "sysinfo.csv")
ROOFLINE_FILE = "roofline.csv"
DISPATCH_INFO_FILE = "pmc_dispatch_info.csv"

# rocprof appends the code object's descriptor suffix to kernel symbols: " [clone .kd]" after a demangled name,
# ".kd" after a raw one (ROCm/rocprofiler, doc/rocprof.md, "KernelName"; both appear in ../shared/corpus/rocprof).
_KD_SUFFIX = re.compile(r"(\s*\[clone \.kd\]|\.kd)$")
# A pass copy of a bookkeeping column: the join suffixes the repeated name with the pass number ("obj_3").
_PASS_SUFFIX = re.compile(r"_\d+$")
# Roofline column name -> unit: bandwidths are GB/s, floating-point peaks GFLOP/s, integer peaks GOP/s
# (rocprofiler-compute docs, "Roofline analysis": https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/).
_ROOFLINE_UNITS = (("Bw", "GB/s"), ("Flops", "GFLOP/s"), ("Ops", "GOP/s"))
_GB = 1e9  # sysinfo.csv hbm_bw is GB/s (ROCm/rocprofiler-compute src/utils/specs.py: max_mclk/1000 * 32 * channels)


class RocprofComputeParser(RocprofCompute):
    """Reads the rocprof-compute workload folder the sniffed file belongs to."""

    def parse(self, head: Head) -> TraceTables:
        return read_workload(head.path.parent)


def clean_kernel_name(name: str) -> str:
    """A kernel name without rocprof's code-object suffix (`` [clone .kd]`` or ``.kd``)."""
    return _KD_SUFFIX.sub("", name.strip())


def read_workload(folder: Path) -> TraceTables:
    """Read the rocprof-compute workload in ``folder`` into tables.

    :raises TraceFormatError: a required file is missing, or a file is damaged or cut short (naming the file).
    """
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise TraceFormatError(folder, f"is a rocprof-compute workload folder without {' and '.join(missing)}",
                               "copy the whole workload folder (rocprof-compute profile writes "
                               f"{', '.join(REQUIRED_FILES)} together)")
    spec = fields("rocprof_compute")
    header, rows = _table(folder / "pmc_perf.csv")
    kernels, counters = _dispatches(folder / "pmc_perf.csv", header, rows, spec)
    sysinfo = _sysinfo(folder / "sysinfo.csv")
    notes: list[str] = []
    devices = with_cards(_devices(sysinfo, kernels["device"], spec), notes=notes)
    ceilings = _ceilings(folder / ROOFLINE_FILE, spec) if (folder / ROOFLINE_FILE).is_file() else []
    if not ceilings:
        listed = "roofline" in str(sysinfo.get("ip_blocks", "")).split("|")
        notes.append(f"no roofline ceilings: the workload has no {ROOFLINE_FILE}"
                     + ("" if listed else " (sysinfo.csv's ip_blocks lists no roofline: rocprof-compute did not "
                                          "run its roofline benchmark, as on MI100)"))
    notes.extend(_dispatch_info_note(folder / DISPATCH_INFO_FILE, len(rows)))
    meta: dict[str, Any] = {
        "version": sysinfo.get("version") or None, "schema": "rocprof-compute workload folder",
        "rocm_version": sysinfo.get("rocm_version") or None, "gpu_arch": sysinfo.get("gpu_arch") or None,
        "workload_name": sysinfo.get("workload_name") or None, "command": sysinfo.get("command") or None,
        "roofline_ceilings": ceilings, "notes": notes,
    }
    return build(folder, kernels=kernels, metrics=counters, devices=devices, meta=meta)


def _table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a workload CSV; a row with fewer or more cells than the header (a file cut short, or
    damaged) is refused, naming the file and the row."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, f"is not UTF-8 text at byte {exc.start}", "the file is damaged") from exc
    try:
        rows = [row for row in csv.reader(io.StringIO(text)) if row]
    except csv.Error as exc:
        raise TraceFormatError(path, f"is not well-formed CSV ({exc})", "the file is damaged") from exc
    if not rows:
        raise TraceFormatError(path, "is empty", "the profile did not finish; profile again")
    header, body = [cell.strip() for cell in rows[0]], rows[1:]
    for number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise TraceFormatError(path, f"row {number} has {len(row)} cells where the header has {len(header)} "
                                         "(the file was cut short or damaged)",
                                   "copy the workload folder again, or profile again")
    return header, body


def _numbers(path: Path, column: str, cells: list[str]) -> np.ndarray:
    """Numeric text as float64 (NaN where empty); text that is not a number names the column."""
    array = np.array(cells, dtype=str)  # as wide as the longest cell: counters and ids are short
    array = np.where(array == "", "nan", array)
    try:
        values = array.astype(np.float64)
    except ValueError as exc:
        raise TraceFormatError(path, f"column {column} holds a value that is not a number ({exc})",
                               "the file is damaged") from exc
    if np.isinf(values).any():
        raise TraceFormatError(path, f"column {column} holds an infinite number", "the file is damaged")
    return values


def _whole(values: np.ndarray) -> list[int | None]:
    return [None if v != v else round(v) for v in values.tolist()]


def _dispatches(path: Path, header: list[str], rows: list[list[str]],
                spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The kernels table (one row per dispatch) and the counters in long form."""
    index = {name: i for i, name in enumerate(header)}
    dispatch: dict[str, str] = spec["dispatch"]
    for needed in ("Dispatch_ID", "Kernel_Name", "Start_Timestamp", "End_Timestamp"):
        if needed not in index:
            raise TraceFormatError(path, f"has no {needed} column", "this is not a rocprof-compute pmc_perf.csv")
    kernels: dict[str, Any] = {"name": [clean_kernel_name(row[index["Kernel_Name"]]) for row in rows]}
    numeric: dict[str, np.ndarray] = {}
    for raw, column in dispatch.items():
        if raw in index and column != "name":
            at = index[raw]
            numeric[column] = _numbers(path, raw, [row[at].strip() for row in rows])
    start, end = numeric.pop("start_ns"), numeric.pop("end_ns")
    # rocprof-compute 3.x writes the merged passes' timestamps with fractions of a ns: the duration keeps them,
    # the start and end round to the whole ns the table holds.
    kernels["duration_ns"] = end - start
    kernels["start_ns"], kernels["end_ns"] = _whole(start), _whole(end)
    grid = numeric.pop("_grid_size", None)
    block = numeric.get("block_x")
    if grid is not None and block is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            # A workgroup count: HSA dispatches may end in a partial workgroup, hence the ceiling.
            numeric["grid_x"] = np.where(block > 0, np.ceil(grid / block), np.nan)
        for axis in ("grid_y", "grid_z", "block_y", "block_z"):
            numeric[axis] = np.where(np.isnan(numeric["grid_x"]), np.nan, 1.0)
    kernels.update({column: _whole(values) for column, values in numeric.items()})
    if any(v is None for v in kernels["id"]):
        raise TraceFormatError(path, "has a dispatch without a Dispatch_ID", "the file is damaged")
    wanted = _counter_columns(header, dispatch, spec["bookkeeping"]["names"])
    if not wanted or not rows:
        return kernels, {"kernel_id": [], "metric": [], "unit": [], "value": []}
    pick = itemgetter(*[index[name] for name in wanted])
    cells = [cell for row in rows for cell in (pick(row) if len(wanted) > 1 else (pick(row),))]
    values = _numbers(path, "of counters", [cell.strip() for cell in cells])
    kernel_id = np.repeat(np.array(kernels["id"], dtype=np.int64), len(wanted))
    names = np.tile(np.array(wanted, dtype=object), len(rows))
    present = ~np.isnan(values)
    return kernels, {"kernel_id": kernel_id[present], "metric": names[present],
                     "unit": np.full(int(present.sum()), "", dtype=object), "value": values[present]}


def _counter_columns(header: list[str], dispatch: dict[str, str], bookkeeping: list[str]) -> list[str]:
    """The columns that are counters: not a dispatch field, not a bookkeeping column or a pass copy of one."""
    skip = set(bookkeeping) | set(dispatch)
    return [name for name in header if name not in skip and _PASS_SUFFIX.sub("", name) not in skip]


def _sysinfo(path: Path) -> dict[str, str]:
    header, rows = _table(path)
    if not rows:
        raise TraceFormatError(path, "has a header but no machine row", "copy the workload folder again")
    return {name: cell.strip() for name, cell in zip(header, rows[0], strict=True)}


def _devices(sysinfo: dict[str, str], device_ids: list[int | None], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """One device row per GPU_ID the dispatches name (sysinfo.csv describes the one GPU model profiled)."""
    row: dict[str, Any] = {"vendor": "amd"}
    for raw, column in spec["sysinfo"].items():
        value = sysinfo.get(raw, "")
        if not value:
            continue
        if column in ("name", "arch"):
            row[column] = value
            continue
        try:
            number = float(value)
        except ValueError:
            continue  # a field the tool left as text ("NA"): not known
        if column == "_hbm_gb_per_s":
            row["memory_bandwidth_bytes_per_s"] = number * _GB
        else:
            row[column] = int(number) if number.is_integer() and column != "clock_mhz" else number
    ids = sorted({d for d in device_ids if d is not None}) or [None]
    return [{**row, "device": d} for d in ids]


def _ceilings(path: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """roofline.csv as one row per device and ceiling: the measured value with its Low/High spread and unit."""
    header, rows = _table(path)
    spellings: dict[str, str] = spec["roofline_spellings"]
    header = [spellings.get(name, name) for name in header]
    if "device" not in header:
        raise TraceFormatError(path, "has no device column", "this is not a rocprof-compute roofline.csv")
    out: list[dict[str, Any]] = []
    for row in rows:
        cells = dict(zip(header, (cell.strip() for cell in row), strict=True))
        device = int(float(cells["device"]))
        for name in header:
            unit = next((u for suffix, u in _ROOFLINE_UNITS if name.endswith(suffix)), None)
            if unit is None or not cells[name]:
                continue
            low, high = cells.get(f"{name}Low"), cells.get(f"{name}High")
            try:
                out.append({"device": device, "ceiling": name, "value": float(cells[name]),
                            "low": float(low) if low else None, "high": float(high) if high else None,
                            "unit": unit})
            except ValueError as exc:
                raise TraceFormatError(path, f"{name} of device {device} is not a number ({exc})",
                                       "the file is damaged") from exc
    return out


def _dispatch_info_note(path: Path, dispatches: int) -> list[str]:
    """A note when pmc_dispatch_info.csv lists more dispatches than pmc_perf.csv holds (a pmc_perf.csv cut at a
    line end loses whole dispatches without a ragged row to show it)."""
    if not path.is_file():
        return []
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            listed = sum(1 for row in csv.reader(handle) if row) - 1
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    if listed > dispatches:
        return [f"pmc_dispatch_info.csv lists {listed} dispatches, pmc_perf.csv holds {dispatches}: "
                "pmc_perf.csv may have been cut short"]
    return []
