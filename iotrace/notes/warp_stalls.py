"""Note 2: reading warp stalls. The GTX 1660 SUPER dot product, naive against improved (the naive one drains and
waits on long scoreboard: its atomics at the end), and the A10G SGEMM tiling variants as a walk up the roofline
(each step's DRAM bytes, intensity and occupancy limiter)."""

from __future__ import annotations

from pathlib import Path

from iotrace.derivations import num
from iotrace.notes import from_trace
from iotrace.notes.document import Note, table

#: PROVENANCE.md: a naive and an improved dot product, ncu 2024.1 full set on a GTX 1660 SUPER.
DOT_REPORT = "ncu-rep/gtx1660super_dot_product_full_ncu2024.1.ncu-rep"
#: PROVENANCE.md: four SGEMM tilings (1D block tiling to warp tiling), ncu 2023.1 on an A10G.
SGEMM_REPORT = "ncu-rep/a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep"
#: The dot-product kernels' source, at the commit the report was captured (read there, not copied).
SOURCE = ("[stage1/benchmarks/dot_prod_benchmark.cu](https://github.com/LakshyaSingh354/CudaCode/blob/"
          "4dabe8223f91e8463a4aa8ce686ab47955993185/stage1/benchmarks/dot_prod_benchmark.cu)")


def _top(k, n: int = 2) -> list[tuple[str, float]]:
    from iotrace.trace.reports.stall_reasons import reason

    return [(reason(r).label.lower(), s) for r, s in k.stall_shares().items() if not reason(r).not_a_stall][:n]


def _dot_reading(report) -> str:
    naive, better = report.kernels[0], report.kernels[1]
    (first, s1), (second, s2) = _top(naive)
    better_top = ", ".join(f"{label} {100 * s:.0f}%" for label, s in _top(better, 3))
    return (f"{from_trace._md(naive.name)} takes {num(naive.duration_ns / 1e3)} µs; {from_trace._md(better.name)} "
            f"takes {num(better.duration_ns / 1e3)} µs, {num(naive.duration_ns / better.duration_ns)}× less. The naive "
            f"kernel's stalls lead with **{first}** ({100 * s1:.0f}% of the stall cycles per issued instruction) and "
            f"**{second}** ({100 * s2:.0f}%). In its source ({SOURCE}) every thread ends with "
            "`atomicAdd(prod, A[i] * B[i])` on one global float: the atomics to one address serialise in L2, and a "
            "warp that has issued its last instruction waits for them to complete before it can exit, which ncu "
            "counts as drain; long scoreboard is the loads of A and B before them. The improved kernel sums each "
            "block in shared memory (a tree reduction between `__syncthreads()`) and writes one partial sum per "
            f"block, no atomics; its stalls spread out ({better_top}), the barriers of the tree taking the place "
            "of the queue at one address.")


def _sgemm_walk(report) -> str:
    rows = []
    first = report.kernels[0]
    for k in report.kernels:
        roof, occ = k.roofline, k.occupancy
        dram = roof.dram_bytes if roof is not None else None
        rows.append([from_trace._md(k.name.split("<")[0].removeprefix("void ")), k.registers,
                     num(k.duration_ns / 1e3), f"{num(first.duration_ns / k.duration_ns)}×",
                     num(dram / 1e6) if dram else "—", num(roof.intensity) if roof and roof.intensity else "—",
                     f"{num(occ.theoretical_pct)}%" if occ and occ.theoretical_pct is not None else "—",
                     ", ".join(occ.limiters) if occ else "—"])
    return table(["variant", "registers", "time (µs)", "speedup", "DRAM MB", "FLOP/B (DRAM)", "theoretical occupancy",
                  "limiter"], rows)


def _sgemm_reading(report) -> str:
    ks = report.kernels
    limited = [k for k in ks if k.occupancy is not None and "registers" in k.occupancy.limiters]
    most = max(ks, key=lambda k: k.registers or 0)
    dram = [k.roofline.dram_bytes if k.roofline else None for k in ks]
    if None in dram:
        return "The report lacks DRAM bytes for some variants: the walk cannot be told in bytes."
    shares = [k.roofline.pct_of_attainable for k in ks if k.roofline.pct_of_attainable is not None]
    bounds = sorted({k.roofline.bound for k in ks if k.roofline.bound})
    return (f"Each step keeps more of the tile in registers, so fewer bytes cross DRAM per FLOP: DRAM traffic falls "
            f"from {num(dram[0] / 1e6)} MB to {num(dram[-1] / 1e6)} MB ({num(dram[0] / dram[-1])}× less) and the "
            f"intensity rises with it, while time falls {num(ks[0].duration_ns / ks[-1].duration_ns)}×. The price "
            f"is registers: {len(limited)} of {len(ks)} variants are register-limited (up to {most.registers} "
            "registers per thread), so occupancy drops as the kernel gets faster. Every variant is still "
            f"{' and '.join(bounds)}-bound, at {num(min(shares))}% to {num(max(shares))}% of its attainable roof: "
            "the tiling bought fewer bytes and more work per thread, not saturation. The findings below point at "
            "what is left (occupancy and latency hiding); the report has no stall counters to say which stall.")


def build(corpus: Path, images: bool = True) -> Note:
    dot = from_trace.load_report(corpus / DOT_REPORT)
    sgemm = from_trace.load_report(corpus / SGEMM_REPORT)
    note = Note("warp-stalls", "Kernel note 2: reading warp stalls", {
        "traces": f"{from_trace.header(dot, corpus / DOT_REPORT, corpus)['trace']}; "
                  f"{from_trace.header(sgemm, corpus / SGEMM_REPORT, corpus)['trace']}",
        "tools": f"{from_trace._md(dot.meta.get('tool'))} {from_trace._md(dot.meta.get('version'))}; "
                 f"{from_trace._md(sgemm.meta.get('version'))}",
        "cards": f"{dot.card.name if dot.card else 'unknown'}; {sgemm.card.name if sgemm.card else 'unknown'}",
        "kind": "measured (by the reports' authors, on real GPUs); read by iotrace"})
    note.add("reading", "How to read a stall",
             "Nsight Compute's warp-state counters record, cycle by cycle, how many warps were stalled and why. "
             "`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio` is the number of warps stalled "
             "for that reason per issued instruction (the `smsp__pcsamp_*` family is the sampled view of the same); "
             "iotrace ranks the reasons by their share of the total. A "
             "reason is only worth fixing when it is large *and* the kernel is not already at a roof: a "
             "memory-bound kernel at 90% of DRAM bandwidth will show long scoreboard and nothing will fix it but "
             "fewer bytes.")
    note.add("dot", "Dot product on a GTX 1660 SUPER: naive against improved", _dot_reading(dot))
    from_trace.add_report_sections(note, dot, "dot", images=images)
    note.add("sgemm", "SGEMM tilings on an A10G: a walk up the roofline", _sgemm_walk(sgemm), _sgemm_reading(sgemm))
    from_trace.add_report_sections(note, sgemm, "sgemm", images=images)
    return note
