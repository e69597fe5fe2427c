"""The built-in formats as the registry sees them before any is read: name, tool, priority and how to recognise
a file's first bytes, stated once per format here, in a module light enough to import before any parser.

The registry sniffs with these classes, so a file is recognised without importing every format's module; a
format's module is imported only when its format is the one being read. Each format's parser class derives from
its class here and adds only ``parse``; ``implementation`` names that class (``module:Class``, as an entry point
does) so the registry can import it by name.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from typing import ClassVar

from iotrace.trace.parser import Head, TraceParser

NCU_REP_MAGIC = b"NVR\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"
SQLITE_MAGIC = b"SQLite format 3\x00"
# ncu CSV headers
NCU_DETAILS = frozenset({"ID", "Kernel Name", "Metric Name", "Metric Value"})
NCU_RAW = frozenset({"ID", "Kernel Name"})
# nvprof CSV headers
NVPROF_SUMMARY = frozenset({"Time(%)", "Time", "Calls", "Avg", "Name"})
NVPROF_TRACE = frozenset({"Start", "Duration", "Name"})
# nsys stats CSV headers
NSYS_PUSHPOP = frozenset({"Start (ns)", "End (ns)", "Name", "TID", "Lvl", "RangeId", "ParentId"})
NSYS_KERN_SUM = frozenset({"Total Time (ns)", "Instances", "Name"})
# rocprof v1 CSV headers: --stats summaries (results.stats.csv, hip_stats.csv, copy_stats.csv: ROCm/rocprofiler
# bin/tblextr.py) and per-dispatch rows (results.csv, the counter CSV of -i "pmc: ..."; ROCm/rocprofiler
# doc/rocprof.md, "Output")
ROCPROF_STATS = frozenset({"Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage"})
ROCPROF_DISPATCH = frozenset({"Index", "KernelName", "gpu-id", "queue-id", "grd", "wgr"})
# rocprof v1 writes its Chrome trace with every event value quoted, "ts":"<digits>", and its rocminfo dump under
# otherData (ROCm/rocprofiler bin/sqlitedb.py: dump_json, metadata_json); Chrome-trace writers (Kineto) write numbers.
ROCPROF_JSON = re.compile(r'"traceEvents"\s*:.*?"(?:ts|dur)"\s*:\s*"\d|"HSASystemAttributes\.', re.DOTALL)
# rocpd databases name every table rocpd_* (rocprofv3: ROCm/rocprofiler-sdk source/share/rocprofiler-sdk-rocpd/
# rocpd_tables.sql; the older rocmProfileData RPD files too, which the rocpd reader names and refuses)
ROCPD_PREFIX = "rocpd_"


class BuiltinFormat(TraceParser):
    """A built-in format's declaration; its parser class (named by ``implementation``) adds ``parse``."""

    #: ``module:Class`` of the parser that reads the format.
    implementation: ClassVar[str] = ""


# Magic bytes outrank text headers, which outrank "any JSON document".
class NcuRep(BuiltinFormat):
    name, tool, priority, magic = "ncu-rep", "Nsight Compute", 100, NCU_REP_MAGIC
    implementation = "iotrace.trace.formats.ncu_rep:NcuRepParser"


class NsysRep(BuiltinFormat):
    name, tool, priority, magic = "nsys-rep", "Nsight Systems", 100, NSYS_REP_MAGIC
    implementation = "iotrace.trace.formats.nsys_rep:NsysRepParser"


class NsysSqlite(BuiltinFormat):
    name, tool, priority, magic = "nsys-sqlite", "Nsight Systems", 100, SQLITE_MAGIC
    implementation = "iotrace.trace.formats.nsys_sqlite:NsysSqliteParser"


def sqlite_tables(head: Head) -> list[str]:
    """The table and view names of the SQLite file ``head`` starts (read from its schema, not its data); empty when
    it is not SQLite or cannot be opened (the reader then names the fault)."""
    if head.gzipped or not head.raw.startswith(SQLITE_MAGIC):
        return []
    try:
        uri = head.path.resolve().as_uri() + "?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            return [str(row[0]) for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    except (sqlite3.Error, OSError, ValueError, RuntimeError):
        return []


class RocpdSqlite(BuiltinFormat):
    # Both this and nsys-sqlite are SQLite: same priority, registered before nsys-sqlite so it is asked first, and
    # it claims only a database of rocpd_* tables.
    name, tool, priority = "rocpd-sqlite", "rocprofv3 (ROCm)", 100
    implementation = "iotrace.trace.formats.rocpd_sqlite:RocpdSqliteParser"

    def sniff(self, head: Head) -> bool:
        return any(name.startswith(ROCPD_PREFIX) for name in sqlite_tables(head))


class RocprofJson(BuiltinFormat):
    # A Chrome trace like Kineto's, told apart by its quoted numbers or rocminfo dump: tried before Kineto's.
    name, tool, priority = "rocprof-json", "rocprof v1 (ROCm)", 20
    implementation = "iotrace.trace.formats.rocprof_v1_json:RocprofJsonParser"

    def sniff(self, head: Head) -> bool:
        text = head.text
        return text is not None and text.lstrip("\ufeff \t\r\n")[:1] == "{" and \
            ROCPROF_JSON.search(text[:65536]) is not None


class RocprofCsv(BuiltinFormat):
    name, tool, priority = "rocprof-csv", "rocprof v1 (ROCm)", 47
    headers, header_lines = (ROCPROF_STATS, ROCPROF_DISPATCH), 1
    implementation = "iotrace.trace.formats.rocprof_v1:RocprofCsvParser"


class Kineto(BuiltinFormat):
    # generic: any JSON document; specific magic bytes are tried first
    name, tool, priority = "kineto-json", "PyTorch profiler (Kineto)", 10
    implementation = "iotrace.trace.formats.kineto:KinetoParser"

    def sniff(self, head: Head) -> bool:
        return head.data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")


class NcuCsv(BuiltinFormat):
    name, tool, priority = "ncu-csv", "Nsight Compute", 50
    headers, header_lines = (NCU_RAW,), 400
    implementation = "iotrace.trace.formats.ncu_csv:NcuCsvParser"


class NvprofCsv(BuiltinFormat):
    name, tool, priority = "nvprof-csv", "nvprof", 45
    # The GPU summary, or a GPU trace (which, unlike other Start/Duration/Name tables, has launch geometry).
    headers, header_lines = (NVPROF_SUMMARY, NVPROF_TRACE | {"Grid X"}), 100
    implementation = "iotrace.trace.formats.nvprof_csv:NvprofCsvParser"


class NsysStatsCsv(BuiltinFormat):
    name, tool, priority = "nsys-stats-csv", "Nsight Systems (nsys stats)", 40
    headers, header_lines = (NSYS_PUSHPOP, NSYS_KERN_SUM), 50
    implementation = "iotrace.trace.formats.nsys_stats_csv:NsysStatsCsvParser"


class RocprofCompute(BuiltinFormat):
    # Any file of a rocprof-compute (Omniperf) workload folder; the reader reads the whole folder. Headers: the
    # folder's pmc_perf.csv (and timestamps.csv), sysinfo.csv, roofline.csv, pmc_kernel_top.csv and
    # pmc_dispatch_info.csv (ROCm/rocprofiler-compute, formerly ROCm/omniperf: src/rocprof_compute_profile/
    # profiler_base.py, src/utils/specs.py, src/utils/roofline_calc.py).
    name, tool, priority = "rocprof-compute", "rocprof-compute (Omniperf)", 48
    headers = (frozenset({"Dispatch_ID", "Kernel_Name", "GPU_ID", "Grid_Size", "Workgroup_Size", "Arch_VGPR", "SGPR",
                          "Start_Timestamp", "End_Timestamp"}),
               frozenset({"workload_name", "command", "ip_blocks", "rocm_version", "gpu_arch"}),
               frozenset({"device", "HBMBw", "L2Bw", "L1Bw", "LDSBw", "FP32Flops"}),
               frozenset({"Kernel_Name", "Count", "Sum(ns)", "Mean(ns)", "Median(ns)", "Pct"}),  # pmc_kernel_top.csv
               frozenset({"Dispatch_ID", "Kernel_Name", "GPU_ID"}))  # pmc_dispatch_info.csv
    header_lines = 1
    implementation = "iotrace.trace.formats.rocprof_compute:RocprofComputeParser"


#: Every built-in format, in registration order (which breaks ties of priority).
BUILTIN_FORMATS: tuple[type[BuiltinFormat], ...] = (NcuRep, NsysRep, RocpdSqlite, NsysSqlite, Kineto, NcuCsv, NvprofCsv,
                                                    NsysStatsCsv, RocprofJson, RocprofCsv,
                                                    RocprofCompute)
