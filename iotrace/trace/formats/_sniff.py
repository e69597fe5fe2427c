"""What each built-in format looks like in a file's first bytes: the sniffers, light enough to import before any parser.

The registry asks these (through :mod:`iotrace.trace.registry`'s lazy built-ins) so a file is recognised without
importing every format's module; a parser module is imported only when its format is the one being read. Each
parser class's ``sniff`` calls the same function here, so there is one definition of each format's signature.
"""

from __future__ import annotations

from iotrace.trace.parser import Head

NCU_REP_MAGIC = b"NVR\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"
SQLITE_MAGIC = b"SQLite format 3\x00"
# ncu CSV headers
NCU_DETAILS = {"ID", "Kernel Name", "Metric Name", "Metric Value"}
NCU_RAW = {"ID", "Kernel Name"}
# nvprof CSV headers
NVPROF_SUMMARY = {"Time(%)", "Time", "Calls", "Avg", "Name"}
NVPROF_TRACE = {"Start", "Duration", "Name"}
# nsys stats CSV headers
NSYS_PUSHPOP = {"Start (ns)", "End (ns)", "Name", "TID", "Lvl", "RangeId", "ParentId"}
NSYS_KERN_SUM = {"Total Time (ns)", "Instances", "Name"}


def _cells(line: str) -> set[str]:
    return {c.strip().strip('"') for c in line.split(",")}


def ncu_rep(head: Head) -> bool:
    return not head.gzipped and head.raw.startswith(NCU_REP_MAGIC)


def nsys_rep(head: Head) -> bool:
    return not head.gzipped and head.raw.startswith(NSYS_REP_MAGIC)


def nsys_sqlite(head: Head) -> bool:
    return not head.gzipped and head.raw.startswith(SQLITE_MAGIC)


def kineto(head: Head) -> bool:
    return head.data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")


def ncu_csv(head: Head) -> bool:
    return any(_cells(line) >= NCU_RAW for line in head.lines(400))


def nvprof_csv(head: Head) -> bool:
    for line in head.lines(100):
        cells = _cells(line)
        if cells >= NVPROF_SUMMARY or (cells >= NVPROF_TRACE and "Grid X" in cells):
            return True
    return False


def nsys_stats_csv(head: Head) -> bool:
    for line in head.lines(50):
        cells = _cells(line)
        if cells >= NSYS_PUSHPOP or cells >= NSYS_KERN_SUM:
            return True
    return False
