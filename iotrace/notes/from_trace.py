"""A note from one profiler export: the header with its provenance, the identities applied to each kernel with the
numbers substituted, the roofline and stall figures, the occupancy table and limiter, and numbered findings.

Everything comes from :func:`iotrace.trace.reports.build_report`; this module only writes it for a reader.
Third-party traces are cited (repository, path, commit, licence from ../shared/corpus/PROVENANCE.json), never copied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iotrace.derivations import num
from iotrace.notes.document import Image, Note, table
from iotrace.trace.render.fmt import gain_text

#: Kernels worked in detail per note: enough for a before/after walk, few enough to read.
MAX_KERNELS = 6


def provenance(path: Path, corpus: Path) -> dict[str, Any] | None:
    """The PROVENANCE.json record of a corpus file, or None for a trace from elsewhere."""
    try:
        relative = path.resolve().relative_to(corpus.resolve()).as_posix()
        records = json.loads((corpus / "PROVENANCE.json").read_text())
    except (ValueError, OSError, json.JSONDecodeError):
        return None
    return next((r for r in records if r.get("file") == relative), None)


def _md(text: object, width: int | None = None) -> str:
    from iotrace.trace.render.markdown import md

    return md(text, width)


def _source_line(path: Path, corpus: Path) -> str:
    found = provenance(path, corpus)
    if found is None:
        return _md(path.name)
    return (f"`{found['file']}` from [{found['repo']}](https://github.com/{found['repo']}) "
            f"`{found['path']}` at commit `{found['commit'][:12]}`, licence {found['license']} "
            "(third-party trace: cited, not included)")


def identities_for(k: Any) -> str:
    """Identity 4 (roofline) and 6 (occupancy) for one kernel, the file's numbers substituted."""
    lines = []
    roof = k.roofline
    if roof is not None and roof.flops and roof.levels and roof.levels[0].bytes:
        dram = roof.levels[0]
        lines.append(f"    I = FLOPs / DRAM bytes = {num(roof.flops)} / {num(dram.bytes)} = "
                     f"{num(roof.intensity)} FLOP/B")
        if roof.peak_flop_per_s and dram.ceiling_bytes_per_s:
            lines.append(f"    ridge = peak / B = {num(roof.peak_flop_per_s)} / {num(dram.ceiling_bytes_per_s)} = "
                         f"{num(roof.ridge)} FLOP/B")
            lines.append(f"    attainable = min(peak, I · B) = {num(roof.attainable_flop_per_s)} FLOP/s")
        if roof.achieved_flop_per_s and roof.duration_ns:
            lines.append(f"    achieved = FLOPs / time = {num(roof.flops)} / {num(roof.duration_ns * 1e-9)} s = "
                         f"{num(roof.achieved_flop_per_s)} FLOP/s"
                         + (f" = {num(roof.pct_of_attainable)}% of attainable" if roof.pct_of_attainable else ""))
    occ = k.occupancy
    result = getattr(occ, "result", None) if occ is not None else None
    if result is not None:
        lines.append(f"    occupancy = active warps / max warps = {result.active_blocks_per_sm} blocks × "
                     f"{result.warps_per_block} warps / {result.max_warps_per_sm} = {num(result.occupancy_pct)}% "
                     f"(limited by {', '.join(result.limiters) or 'nothing'})")
    if not lines:
        return "No FLOPs, bytes or launch resources in the file for this kernel: the identities cannot be applied."
    basis = roof.basis if roof is not None else "measured"
    sources = []
    if roof is not None and roof.peak_source:
        sources.append(f"peak: {_md(roof.peak_source)}")
    if roof is not None and roof.levels and roof.levels[0].ceiling_source:
        sources.append(f"bandwidth: {_md(roof.levels[0].ceiling_source)}")
    return "\n".join([*lines, "", f"({basis}; " + "; ".join(sources) + ")" if sources else f"({basis})"])


def kernel_table(report: Any) -> str:
    rows = []
    for k in report.kernels:
        roof, occ = k.roofline, k.occupancy
        dram = roof.levels[0].bytes if roof is not None and roof.levels else None
        rows.append([f"#{k.kernel_id} {_md(k.name, 70)}", "×".join(str(v) for v in k.grid),
                     "×".join(str(v) for v in k.block), k.registers if k.registers is not None else "—",
                     num(k.duration_ns / 1e3) if k.duration_ns else "—", num(dram) if dram else "—",
                     num(roof.intensity) if roof is not None and roof.intensity else "—",
                     (roof.bound or "—") if roof is not None else "—",
                     f"{num(roof.pct_of_attainable)}%" if roof is not None and roof.pct_of_attainable else "—",
                     f"{num(occ.theoretical_pct)}%" if occ is not None and occ.theoretical_pct is not None else "—",
                     ", ".join(occ.limiters) if occ is not None and occ.limiters else "—"])
    return table(["kernel", "grid", "block", "registers", "time (µs)", "DRAM bytes", "FLOP/B", "bound",
                  "of attainable", "theoretical occupancy", "limiter"], rows)


def occupancy_table(report: Any) -> str:
    rows = []
    for k in report.kernels:
        occ = k.occupancy
        if occ is None:
            continue
        rows.append([f"#{k.kernel_id} {_md(k.name, 60)}", occ.threads_per_block, occ.registers_per_thread,
                     occ.smem_per_block, f"{num(occ.theoretical_pct)}%" if occ.theoretical_pct is not None else "—",
                     f"{num(occ.theoretical_pct_file)}%" if occ.theoretical_pct_file is not None else "—",
                     f"{num(occ.achieved_pct)}%" if occ.achieved_pct is not None else "—",
                     ", ".join(occ.limiters) or "—"])
    return table(["kernel", "threads", "registers", "shared B", "theoretical (iotrace)", "theoretical (file)",
                  "achieved", "limiter"], rows)


def stall_table(report: Any, top: int = 4) -> str:
    from iotrace.trace.reports.stall_reasons import reason

    rows = []
    for k in report.kernels:
        ranked = [(r, s) for r, s in k.stall_shares().items() if not reason(r).not_a_stall][:top]
        if ranked:
            rows.append([f"#{k.kernel_id} {_md(k.name, 60)}",
                         *(f"{reason(r).label} {100 * s:.0f}%" for r, s in ranked), *["—"] * (top - len(ranked))])
    return table(["kernel", *(f"stall {i + 1}" for i in range(top))], rows)


def findings_list(findings: list[Any]) -> str:
    """Numbered, in the report's order: ranked by the time each can save (iotrace.trace.findings)."""
    out = []
    for number, f in enumerate(findings, 1):
        where = f"#{f.kernel_id} " if f.kernel_id is not None else ""
        text = f"{number}. {where}{_md(f.text)} *({f.basis})*"
        if f.evidence:
            text += "  \n   Evidence: " + _md("; ".join(e.text() for e in f.evidence))
        if f.try_next:
            text += "  \n   Try: " + _md(f.try_next)
        text += "  \n   Gain: " + _md(gain_text(f) + (f": {f.gain.reasoning}" if f.gain and f.gain.reasoning else ""))
        out.append(text)
    return "\n".join(out) or "No findings."


def load_report(path: Path, kernel: str | None = None, card: str | None = None) -> Any:
    from iotrace.trace import load
    from iotrace.trace.reports import build_report

    return build_report(load(path), kernel=kernel, card=card)


def header(report: Any, path: Path, corpus: Path) -> dict[str, str]:
    meta = report.meta
    return {"trace": _source_line(path, corpus),
            "tool": f"{_md(meta.get('tool'))}, version {_md(meta.get('version') or 'not stated')}",
            "card": f"{_md(report.card.name if report.card else 'none')}: {_md(report.card_source)}"}


def add_report_sections(note: Note, report: Any, prefix: str, images: bool = True) -> None:
    """The kernel table, the identities per kernel, the figures, occupancy and findings as sections of ``note``."""
    from iotrace.trace.render.figures import roofline_figure, stalls_figure

    if report.steps is not None:
        from iotrace.trace.render.steps import steps_markdown

        note.add(f"{prefix}-steps", "Where the tok/s went", "\n".join(steps_markdown(report.steps)[2:]))
    if not report.kernels:  # a CPU-only trace: no kernel to tabulate, and saying so beats four empty sections
        host = report.tables.rows("host_ops")
        what = f"a CPU-only trace ({host} CPU ops, no GPU activity)" if host else "no GPU kernels in this trace"
        note.add(f"{prefix}-kernels", "The kernels", f"None: {what}.")
        note.add(f"{prefix}-findings", "Findings", findings_list(report.findings))
        return
    note.add(f"{prefix}-kernels", "The kernels", kernel_table(report))
    worked = "\n\n".join(f"**#{k.kernel_id} {_md(k.name, 90)}**\n\n{identities_for(k)}"
                         for k in report.kernels[:MAX_KERNELS])
    note.add(f"{prefix}-identities", "What the identities say", worked)
    has_stalls = any(k.stall_shares() for k in report.kernels)
    missing = "\n".join(f"- {_md(u['line'])}" for u in report.unavailable if u["report"] == "warp stalls")
    parts = []
    if images:
        roof, stalls = f"{note.name}-{prefix}-roofline.png", f"{note.name}-{prefix}-stalls.png"
        note.images.append(Image(roof, roofline_figure(report), "hierarchical roofline"))
        parts.append(f"![hierarchical roofline](img/{roof})")
        if has_stalls:
            note.images.append(Image(stalls, stalls_figure(report), "warp stall shares"))
            parts.append(f"![warp stall shares](img/{stalls})")
    parts.append(stall_table(report) if has_stalls else missing or "Warp stalls: not in this trace.")
    note.add(f"{prefix}-figures", "Roofline and warp stalls" if images else "Warp stalls", *parts)
    note.add(f"{prefix}-occupancy", "Occupancy", occupancy_table(report))
    note.add(f"{prefix}-findings", "Findings", findings_list(report.findings))


def nothing_to_say(report: Any) -> str | None:
    """Why a note of ``report`` would hold nothing (no kernel, no finding, no step), naming the rules that were
    checked; None when there is something to write."""
    if report.kernels or report.findings or report.steps is not None:
        return None
    from iotrace.trace.findings import RULES

    ids = {scope: [r.id for r in RULES if r.scope == scope] for scope in ("kernel", "file", "timeline")}
    host = report.tables.rows("host_ops")
    what = f"a CPU-only trace ({host} CPU op{'s' * (host != 1)}, no GPU kernel)" if host else "no GPU kernels"
    timeline = (f"the timeline rules {', '.join(ids['timeline'])} found nothing" if report.timeline is not None else
                f"the {len(ids['timeline'])} timeline rules need timed kernels or ranges")
    return (f"nothing to write: {what}, and no finding (checked: the file rules {', '.join(ids['file'])} found "
            f"nothing; {timeline}; the {len(ids['kernel'])} kernel rules need a kernel)")


def build(path: Path, *, name: str, title: str, corpus: Path, kernel: str | None = None,
          card: str | None = None, images: bool = True) -> Note:
    """The note ``iotrace note TRACE`` writes.

    :raises InvalidValueError: the trace gives a note nothing to say (:func:`nothing_to_say`): no note is better than
        an empty one.
    """
    report = load_report(path, kernel, card)
    empty = nothing_to_say(report)
    if empty is not None:
        from iotrace.errors import InvalidValueError

        raise InvalidValueError(f"{path}: {empty}", "profile GPU work (torch.profiler with ProfilerActivity.CUDA, "
                                                    "nsys or ncu), or see `iotrace report` for what the file holds")
    note = Note(name, title, header(report, path, corpus))
    add_report_sections(note, report, "trace", images=images)
    return note
