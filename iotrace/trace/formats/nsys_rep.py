"""Nsight Systems reports (``.nsys-rep``, legacy ``.qdrep``): converted to SQLite with ``nsys export``.

The container (header ``NVIDIA Tegra Profiler Report``) is not documented by NVIDIA and, unlike ``.ncu-rep``, is
not a protobuf stream a generic walker can read, so only NVIDIA's tool reads it: iotrace runs
``nsys export --type sqlite`` when ``nsys`` is on PATH and reads the result; without it, the error names the tool
and the command to run.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from contextlib import closing
from pathlib import Path

from iotrace.trace.errors import TraceFormatError, TraceToolError
from iotrace.trace.formats import _sniff
from iotrace.trace.formats.nsys_sqlite import read_database
from iotrace.trace.parser import Head
from iotrace.trace.tables import TraceTables

_HEADER_VERSION = re.compile(rb"NVIDIA Tegra Profiler Report (\d{4})@(\d+)@(\d+)@(\d+)")
#: Seconds one export may take before it is treated as hung.
EXPORT_TIMEOUT_S = 600


def header_version(raw: bytes) -> str | None:
    """The Nsight Systems version in a report's first line (2023.3+ write ``2023@3@3@42``), or None."""
    match = _HEADER_VERSION.match(raw)
    return ".".join(g.decode() for g in match.groups()) if match else None


class NsysRepParser(_sniff.NsysRep):
    """Reads the format :class:`iotrace.trace.formats._sniff.NsysRep` declares."""

    def parse(self, head: Head) -> TraceTables:
        path = head.path
        nsys = shutil.which("nsys")
        command = f"nsys export --type sqlite --output {path.with_suffix('.sqlite').name} {path.name}"
        if nsys is None:
            raise TraceToolError(path, "reading an Nsight Systems report needs the nsys tool, which is not on PATH",
                                 f"install Nsight Systems, or run `{command}` where it is and load the .sqlite")
        with tempfile.TemporaryDirectory(prefix="iotrace-nsys-") as tmp:
            out = Path(tmp) / "export.sqlite"
            try:
                done = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
                                       "--output", str(out), str(path)], capture_output=True, text=True,
                                      timeout=EXPORT_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired as exc:
                raise TraceFormatError(path, f"nsys export ran past {EXPORT_TIMEOUT_S} s", "run it by hand") from exc
            if done.returncode != 0 or not out.exists():
                detail = " ".join((done.stderr or done.stdout).split())[-200:]
                raise TraceFormatError(path, f"nsys export failed (exit {done.returncode}): {detail}",
                                       "the report is damaged, or newer than this nsys")
            with closing(sqlite3.connect(out.resolve().as_uri() + "?mode=ro", uri=True)) as db:
                tables = read_database(db, path)
        tables.meta.update({"format": self.name, "converted_with": f"{nsys} export --type sqlite",
                            "report_version": header_version(head.raw)})
        return tables

