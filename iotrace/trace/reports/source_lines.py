"""Stall samples per source line: per profiled launch (identical launches of one report row pooled), the source
lines that hold the most PC samples, each with its dominant stall reason — ncu's Source page, without the GUI.

Nsight Compute's SourceCounters section (``--section SourceCounters``, part of ``--set full``) samples each warp's
program counter and the reason it is not issuing (Kernel Profiling Guide, "Statistical Sampler" and "Warp Stall
Reasons"); the reader keeps the samples per SASS address (``tables.source_samples``). Where the report maps an
address to a source line — the kernel was compiled with line info: ``nvcc -lineinfo``; Triton emits it unless
``TRITON_DISABLE_LINE_INFO=1`` (``triton/knobs.py``, ``compilation.disable_line_info``, read by the NVIDIA backend's
``make_llir`` and ptxas options in ``triton/backends/nvidia/compiler.py``) — the addresses of one line are added up;
an address the report maps to no line stands on its own row with its SASS. The line's text is there where ncu
imported the source (``--import-source yes``).

A location's share is its samples over the launch's samples (all reasons, ``selected`` — the warp issued — too, as
ncu's "Warp Stall Sampling (All Samples)" column counts them); its dominant reason is the reason with the most
samples there. Reason spellings follow ``stall_reasons.toml`` (``no_instructions`` → ``no_instruction``).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from iotrace.trace.reports.metricview import MetricView
from iotrace.trace.reports.records import Unavailable
from iotrace.trace.reports.stall_reasons import canonical, reasons
from iotrace.trace.tables import TraceTables

__all__ = ["COLLECT", "TOP", "KernelSourceLines", "SourceLine", "source_lines"]

#: Source lines (or addresses) per launch the report keeps; the rest are counted, not listed.
TOP = 10

#: How to collect what this report reads (Nsight Compute CLI User Manual, "Command Line Options": ``--section``,
#: ``--set``, ``--import-source``; CUDA Compiler Driver NVCC, ``--generate-line-info`` / ``-lineinfo``).
COLLECT = "ncu --section SourceCounters"
LINE_INFO = ("compile with nvcc -lineinfo for source lines (Triton emits line info unless TRITON_DISABLE_LINE_INFO=1)"
             " and capture with ncu --import-source yes to see their text")

_SAMPLING = "smsp__pcsamp_sample_count"  # present where ncu sampled the launch, whether or not samples landed


@dataclass(frozen=True)
class SourceLine:
    """One source line (or, where the report maps none, one SASS address) of a launch, with its samples."""

    rank: int
    file: str | None
    line: int | None
    #: The address (the hottest one of a line) and its SASS; ``addresses`` is how many addresses the line spans.
    address: int
    sass: str | None
    text: str | None
    addresses: int
    samples: int
    share: float
    reason: str
    reason_samples: int
    reason_share: float

    @property
    def location(self) -> str:
        """``kernel.py:42`` (the file's last component) or the address, ``0x7d039303e630``."""
        if self.file is None:
            return f"{self.address:#x}"
        return f"{os.path.basename(self.file) or self.file}:{self.line if self.line is not None else '?'}"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "file": self.file, "line": self.line, "address": self.address,
                "address_hex": f"{self.address:#x}", "sass": self.sass, "text": self.text,
                "addresses": self.addresses, "samples": self.samples, "share": round(self.share, 6),
                "reason": self.reason, "reason_samples": self.reason_samples,
                "reason_share": round(self.reason_share, 6)}


@dataclass
class KernelSourceLines:
    """A launch's top source lines by stall samples, and how much of it the rows and the line map cover."""

    kernel_id: int
    kernel: str
    samples: int
    #: Samples at addresses the report maps to a source line (``samples`` where every address maps).
    mapped_samples: int
    #: Locations with samples (lines, plus addresses with no line); ``lines`` holds the top ones.
    locations: int
    lines: list[SourceLine] = field(default_factory=list)
    #: What would make the rows more useful (line info, imported source), in a sentence; "" where nothing.
    advice: str = ""
    #: Launches whose samples are pooled here (identical launches of one report row).
    launches: int = 1

    @property
    def by(self) -> str:
        """``line``, ``address`` (no address maps to a line) or ``line and address`` (some do)."""
        if self.mapped_samples == 0:
            return "address"
        return "line" if self.mapped_samples == self.samples else "line and address"

    @property
    def cut(self) -> int:
        """Locations left out of ``lines``."""
        return self.locations - len(self.lines)

    def title(self) -> str:
        """What the rows are, for a heading: "stall samples by SASS address (top 10 of 20; 1,143 samples)"."""
        unit = {"line": "source line", "address": "SASS address", "line and address": "source line or address"}[self.by]
        shown = f"top {len(self.lines)} of {self.locations}" if self.cut else f"all {self.locations}"
        over = f" over {self.launches} launches" if self.launches > 1 else ""
        return f"stall samples by {unit} ({shown}; {self.samples:,} samples{over})"

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_id": self.kernel_id, "kernel": self.kernel, "launches": self.launches, "samples": self.samples,
                "mapped_samples": self.mapped_samples, "by": self.by, "locations": self.locations,
                "shown": len(self.lines), "lines": [line.to_dict() for line in self.lines], "advice": self.advice}


def _reason(raw: str) -> str | None:
    """The reason's key, or None for a sub-pipe split that repeats a reason's samples (as in stalls.py)."""
    base, sub_pipe, _ = raw.partition("_pipe_")
    if sub_pipe and base in reasons():
        return None
    return canonical(raw)


def _locations(rows: list[tuple[int, str, int, str | None, str | None, int | None, str | None]], top: int,
               ) -> tuple[list[SourceLine], int, int, int, bool]:
    """(top locations, total samples, mapped samples, locations, every mapped line has text) of one launch."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for address, reason, samples, sass, file, line, text in rows:
        key = ("line", file, line) if file is not None else ("address", address)
        group = groups.setdefault(key, {"file": file, "line": line, "text": text, "reasons": Counter(),
                                        "addresses": Counter(), "sass": {}})
        group["reasons"][reason] += samples
        group["addresses"][address] += samples
        group["sass"][address] = sass
    total = sum(sum(g["reasons"].values()) for g in groups.values())
    mapped = sum(sum(g["reasons"].values()) for key, g in groups.items() if key[0] == "line")
    texts = all(g["text"] is not None for key, g in groups.items() if key[0] == "line")

    def order(item: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[Any, ...]:
        key, g = item  # most samples first; ties by file and line, then address, so the order is stable
        return (-sum(g["reasons"].values()), key[0], str(key[1]), -1 if len(key) < 3 or key[2] is None else key[2])

    out = []
    for rank, (_, g) in enumerate(sorted(groups.items(), key=order)[:top], start=1):
        samples = sum(g["reasons"].values())
        reason, reason_samples = min(g["reasons"].items(), key=lambda kv: (-kv[1], kv[0]))
        address = min(g["addresses"].items(), key=lambda kv: (-kv[1], kv[0]))[0]
        out.append(SourceLine(rank, g["file"], g["line"], address, g["sass"][address], g["text"],
                              len(g["addresses"]), samples, samples / total, reason, reason_samples,
                              reason_samples / samples))
    return out, total, mapped, len(groups), texts


def source_lines(tables: TraceTables, view: MetricView, kernels: list[tuple[int, str, list[int]]], top: int = TOP,
                 ) -> tuple[list[KernelSourceLines], list[Unavailable]]:
    """Per report row (kernel id, name, the ids of the launches it stands for: identical launches pool their
    samples), its ``top`` source lines by stall samples; and, for rows without samples, what to collect. A trace
    with no counters at all (a timeline) gets neither: the stall report already says to profile with ncu."""
    columns = ("kernel_id", "address", "reason", "samples", "sass", "file", "line", "text")
    data = {name: tables.column("source_samples", name).tolist() for name in columns}
    by_kernel: dict[int, list[tuple[Any, ...]]] = {}
    for kid, address, raw, samples, sass, file, line, text in zip(*(data[n] for n in columns), strict=True):
        reason = _reason(str(raw))
        if reason is not None:
            line = None if line is None or line != line else int(line)  # NaN where the nullable column is missing
            by_kernel.setdefault(int(kid), []).append((int(address), reason, int(samples), sass, file, line, text))
    found: list[KernelSourceLines] = []
    missing: list[Unavailable] = []
    report_file = tables.meta.get("format") == "ncu-rep"
    for kid, name, launch_ids in kernels:
        rows = [row for launch in dict.fromkeys(launch_ids or [kid]) for row in by_kernel.get(launch, [])]
        if rows:
            lines, total, mapped, locations, texts = _locations(rows, top)
            if mapped == 0:
                advice = "the report maps no address to a source line: " + LINE_INFO
            elif mapped < total:
                advice = (f"{(total - mapped) / total * 100:.0f}% of the samples are at addresses the report maps to "
                          "no source line (listed by address)")
            elif not texts:
                advice = "the report holds no source text: capture with ncu --import-source yes to see the lines"
            else:
                advice = ""
            found.append(KernelSourceLines(kid, name, total, mapped, locations, lines, advice,
                                           sum(1 for launch in set(launch_ids or [kid]) if launch in by_kernel)))
        elif view.get(kid, _SAMPLING) is not None and not report_file:
            missing.append(Unavailable("source lines", "stall samples per SASS address",
                                       "ncu --set full -o REPORT (an .ncu-rep)", kid,
                                       "an exported CSV holds each kernel's sample totals only; run iotrace report "
                                       "on the .ncu-rep report"))
        elif view.get(kid, _SAMPLING) is not None:
            missing.append(Unavailable("source lines", "smsp__pcsamp_sample_count > 0", COLLECT,
                                       kid, "sampling ran but no sample landed in this launch (shorter than one "
                                       "sampling interval); lower ncu --sampling-interval"))
        elif view.of(kid):
            missing.append(Unavailable("source lines", "smsp__pcsamp_warps_issue_stalled_* per address", COLLECT,
                                       kid, f"or ncu --set full; {LINE_INFO}"))
    return found, missing
