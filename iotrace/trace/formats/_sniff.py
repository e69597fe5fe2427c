"""The built-in formats as the registry sees them before any is read: name, tool, priority and how to recognise
a file's first bytes, stated once per format here, in a module light enough to import before any parser.

The registry sniffs with these classes, so a file is recognised without importing every format's module; a
format's module is imported only when its format is the one being read. Each format's parser class derives from
its class here and adds only ``parse``; ``implementation`` names that class (``module:Class``, as an entry point
does) so the registry can import it by name.
"""

from __future__ import annotations

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


#: Every built-in format, in registration order (which breaks ties of priority).
BUILTIN_FORMATS: tuple[type[BuiltinFormat], ...] = (NcuRep, NsysRep, NsysSqlite, Kineto, NcuCsv, NvprofCsv,
                                                    NsysStatsCsv)
