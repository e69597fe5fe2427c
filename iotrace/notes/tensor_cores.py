"""Note: Tensor Core shapes. The instruction shapes per architecture and type (``iotrace/data/tensor_shapes.toml``,
each row with its source); what the GEMM plugin compiles to for sm_80, sm_89 and sm_90 (Triton cross-compiled on
the CPU: PTX from the compiled kernel, SASS from the nvdisasm Triton ships); the tensor-pipe counters of four real
ncu reports from the corpus and what they count; FLOPs counted from them against 2·M·N·K; and why tile sizes and
alignment follow from the shapes (padding waste computed).

Counters are read with :func:`iotrace.trace.reports.tensor_flops.tensor_flops` (per-opcode SASS counts decoded by
:func:`~iotrace.trace.reports.tensor_flops.sass_flops`); the corpus files are cited from PROVENANCE.json, never copied.
"""

from __future__ import annotations

import concurrent.futures
import math
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from iotrace.notes import from_trace
from iotrace.notes.document import Note, table

#: PROVENANCE.md: a warp-specialised TMA/WGMMA bf16 GEMM at 8192^3 on an H100 SXM, ncu 2024.1 full set, 3 launches.
H100_GEMM = "ncu-rep/h100sxm_bf16_gemm_pc_pipeline_full_ncu2024.1.ncu-rep"
#: PROVENANCE.md: a CUDA.jl kernel using int8 mma.sync on an A40, ncu 2022.1, one launch of one block per SM.
A40_IMMA = "ncu-rep/a40_imma_int8_tensor_julia_full_ncu2022.1.ncu-rep"
#: PROVENANCE.md: the same project's kernel launched as one block on the 84-SM A40, ncu 2021.2.
A40_1BLOCK = "ncu-rep/a40_imma_1block_grid_julia_full_ncu2021.2.ncu-rep"
#: PROVENANCE.md: one CUTLASS B2B GEMM launch on an A100 80GB PCIe, ncu 2024.1 full set.
A100_CUTLASS = "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep"
#: The CardBook card of each report (PROVENANCE.md's GPU column).
CARD_OF = {H100_GEMM: "h100-sxm", A40_IMMA: "a40", A40_1BLOCK: "a40", A100_CUTLASS: "a100-pcie-80gb"}
#: The H100 GEMM's M = N = K: PROVENANCE.md, "bf16 GEMM at 8192^3" (the author's benchmark); the file holds the grid
#: and the tile, so M·N, but not K.
H100_MNK = 8192
#: The H100 GEMM's source, read there (not copied): template <TILE_M, TILE_K, TILE_N, WGMMA_M, WGMMA_N, WGMMA_K,
#: NUM_THREADS, NUM_STAGES>, one producer warpgroup issuing TMA loads and the rest issuing wgmma.
H100_SOURCE = ("[src/kernels/hopper/gemm_bf16_pc_pipeline.cuh](https://github.com/HamzaElshafie/h100_gemm/blob/"
               "201a2f658724ff998ddec9015966d5c198a993e4/src/kernels/hopper/gemm_bf16_pc_pipeline.cuh)")
#: Dense FLOP (OP) per clock per SM of the matrix path. H100 SXM bf16: 989.4 TFLOPS at 1830 MHz on 132 SMs = 4096
#: (NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5 specifications; the H100 datasheet). A40 int8:
#: 299.3 dense TOPS at 1740 MHz on 84 SMs = 2048 (NVIDIA A40 datasheet; GA102 whitepaper: 4 Tensor Cores per SM).
PER_CLOCK = {"h100-sxm": 4096, "a40": 2048}
#: A warpgroup is four contiguous warps that issue one wgmma together (PTX ISA, "Asynchronous Warpgroup Level
#: Matrix Multiply-Accumulate"); ncu counts warp-level instructions, so one wgmma is counted 4 times.
WARPS_PER_GROUP = 4
#: What the GEMM plugin is compiled for: (card, preset, dtype). Defaults from GemmSpec.default_config; the decode
#: preset (M = 1) takes the decode config (BLOCK_M = 16) on every card.
SUBJECTS = (("a100-sxm4-80gb", "llama-3-8b-mlp-up-prefill-2k", "bf16"),
            ("a100-sxm4-80gb", "llama-3-8b-mlp-up-prefill-2k", "fp16"),
            ("rtx4090", "llama-3-8b-mlp-up-prefill-2k", "fp8e4m3"),
            ("h100-sxm", "llama-3-8b-mlp-up-prefill-2k", "bf16"),
            ("h100-sxm", "llama-3-8b-mlp-up-prefill-2k", "fp8e4m3"),
            ("h100-sxm", "llama-3-8b-qkv-decode-b1", "bf16"))
#: The counters the note reads, with what each counts (NVIDIA Nsight Compute Profiling Guide, "Metrics Structure":
#: ``pct_of_peak_sustained_active`` is over the cycles the unit was active, ``_elapsed`` over all cycles; the
#: descriptions are ncu's own, as iotrace.trace.reports.tensor_flops quotes them).
COUNTERS = (
    ("smsp__sass_inst_executed_op_shared_gmma.sum", "warp-level warpgroup MMAs (HGMMA/IGMMA/QGMMA/BGMMA) executed"),
    ("sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
     "HMMA issue rate, % of the pipe's peak over active cycles (counts HFMA2.MMA too)"),
    ("sm__inst_executed_pipe_tensor_op_imma.avg.pct_of_peak_sustained_active", "IMMA/BMMA issue rate, same basis"),
    ("sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active", "GMMA issue rate, same basis (sm_90)"),
    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
     "cycles the tensor pipe was busy, % of elapsed cycles, mean over SMs"),
    ("sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
     "the same for matrix ops only (sm_90: HFMA2.MMA left out)"),
)
_SHAPE = re.compile(r"\.m(\d+)n(\d+)k(\d+)\.")


@dataclass(frozen=True)
class TensorReading:
    """The tensor work of launch 0 of one corpus report, as its counters give it."""

    file: str
    kernel: str
    card: str
    launches: int
    grid: int
    block: int
    duration_ns: float
    clock_hz: float | None
    cycles: float | None
    sm_count: int
    matrix: dict[str, float]        # SASS matrix opcode -> warp-level instructions (per-opcode table)
    count: Any                      # tensor_flops' TensorCount, or None: no tensor work in the file
    counters: dict[str, float]
    top_opcodes: list[tuple[str, float]]
    all_launches: list[Any]         # one TensorCount (or None) per launch

    @property
    def has_tensor_work(self) -> bool:
        return bool(self.matrix) or (self.count is not None and bool(self.count.flops_by_type))


def read(corpus: Path, name: str) -> TensorReading:
    """One corpus report's tensor counters (launch 0) and each launch's counted tensor FLOPs."""
    from iotrace.cards import lookup
    from iotrace.trace import load
    from iotrace.trace.reports.metricview import MetricView
    from iotrace.trace.reports.tensor_flops import PER_OPCODE, sass_flops, tensor_flops

    tables = load(corpus / name)
    view, k = MetricView(tables.metrics), tables.kernels.iloc[0]
    values = view.of(0)
    prefix = f"{PER_OPCODE}["
    opcodes = {n[len(prefix):-1]: v for n, v in values.items() if n.startswith(prefix) and v > 0}
    matrix = {op: v for op, v in opcodes.items() if sass_flops(op) is not None}
    clock = view.get(0, "sm__cycles_elapsed.avg.per_second")
    cycles = view.get(0, "sm__cycles_elapsed.avg")
    if cycles is None and clock is not None:  # older reports keep the clock, not the cycles: time × clock
        cycles = float(k["duration_ns"]) * 1e-9 * clock
    card = CARD_OF.get(name, "")
    sms = view.get(0, "launch__sm_count") or (lookup(card).sm_count if card else 0)
    return TensorReading(name, str(k["name"]), card, len(tables.kernels), int(k["grid_x"] * k["grid_y"] * k["grid_z"]),
                         int(k["block_x"] * k["block_y"] * k["block_z"]), float(k["duration_ns"]), clock, cycles,
                         int(sms), matrix, tensor_flops(view, 0, None),
                         {c: v for c, _ in COUNTERS if (v := view.get(0, c)) is not None},
                         sorted(opcodes.items(), key=lambda kv: (-kv[1], kv[0]))[:4],
                         [tensor_flops(view, int(i), None) for i in tables.kernels["id"]])


def shapes() -> list[dict[str, str]]:
    """The rows of ``iotrace/data/tensor_shapes.toml``."""
    text = resources.files("iotrace.data").joinpath("tensor_shapes.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["shape"]


def _shapes_table() -> str:
    return table(["PTX", "from", "input types", "m × n × k", "issued by", "SASS (ncu's name)", "source"],
                 [[r["ptx"], r["targets"], r["types"], r["shapes"], r["unit"], r["sass"], r["source"]]
                  for r in shapes()])


# --- the GEMM plugin, compiled --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compiled:
    card: str
    target: str
    preset: str
    dtype: str
    config: dict[str, Any]
    ptx: dict[str, int]
    sass: dict[str, int]

    @property
    def instruction(self) -> tuple[str, int, int, int]:
        name = next(iter(self.ptx))
        m, n, k = (int(x) for x in _SHAPE.search(name).groups())  # type: ignore[union-attr]
        return name, m, n, k

    @property
    def issuers(self) -> int:
        """Warps (mma.sync) or warpgroups (wgmma) that split the block's tile between them."""
        warps = self.config["num_warps"]
        return warps // WARPS_PER_GROUP if self.instruction[0].startswith("wgmma") else warps

    @property
    def expected(self) -> float:
        """Instructions per issuer per BLOCK_K step: BLOCK_M·BLOCK_N·BLOCK_K / (issuers · m·n·k)."""
        _, m, n, k = self.instruction
        c = self.config
        return c["BLOCK_M"] * c["BLOCK_N"] * c["BLOCK_K"] / (self.issuers * m * n * k)


def compile_gemm() -> list[Compiled]:
    """The GEMM plugin's default config for each subject, compiled; one worker per target, the targets in parallel."""
    from iotrace.cards import lookup
    from iotrace.compiler.mma import mma_instructions
    from iotrace.plugins import kernel

    spec = kernel("gemm")
    jobs: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    configs = []
    for i, (key, preset, dtype) in enumerate(SUBJECTS):
        card = lookup(key)
        shape = spec.check_shape(spec.presets[preset])
        config = spec.default_config(shape, dtype, card)
        configs.append(config)
        jobs.setdefault(card.sm_limits.cc, []).append((i, spec.compile_units(shape, dtype, config)[0]))
    found: dict[int, Any] = {}
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = {pool.submit(mma_instructions, [u for _, u in todo], cc): todo for cc, todo in jobs.items()}
        for future, todo in futures.items():
            for (i, _), use in zip(todo, future.result(), strict=True):
                found[i] = use
    return [Compiled(key, found[i].target, preset, dtype, configs[i], found[i].ptx, found[i].sass)
            for i, (key, preset, dtype) in enumerate(SUBJECTS)]


def _tile(config: dict[str, Any]) -> str:
    return f"{config['BLOCK_M']}×{config['BLOCK_N']}×{config['BLOCK_K']}, {config['num_warps']} warps"


def _compiled_table(compiled: list[Compiled]) -> str:
    rows = []
    for c in compiled:
        name, m, n, k = c.instruction
        ptx_count, sass = c.ptx[name], ", ".join(f"`{op}` × {v}" for op, v in c.sass.items()) or "— (no nvdisasm)"
        unit = "warpgroup" if name.startswith("wgmma") else "warp"
        rows.append([c.card, c.target, c.dtype, _tile(c.config), f"`{name}` × {ptx_count}", sass,
                     f"{c.config['BLOCK_M']}·{c.config['BLOCK_N']}·{c.config['BLOCK_K']} / ({c.issuers} {unit}s · "
                     f"{m}·{n}·{k}) = {c.expected:g}", "yes" if ptx_count == c.expected else "**no**",
                     f"{2 * m * n * k:,}"])
    return table(["card", "target", "dtype", "tile (BLOCK_M×N×K)", "PTX, static count", "SASS, static count",
                  "expected per warp or warpgroup per K step", "equal", "FLOPs per instruction (2·m·n·k)"], rows)


def _compiled_text(compiled: list[Compiled]) -> str:
    import triton

    decode = next(c for c in compiled if c.config["BLOCK_M"] < 64 and c.target == "sm_90")
    hopper = next(c for c in compiled if c.target == "sm_90" and c.instruction[0].startswith("wgmma"))
    return (f"Each row is the plugin's own default config for the card (`GemmSpec.default_config`), compiled by "
            f"Triton {triton.__version__} on this CPU (`iotrace/compiler/mma.py`): the PTX is the compiled kernel's "
            "`asm['ptx']`, the SASS its `asm['sass']`, disassembled by the `nvdisasm` Triton ships in its wheel. The "
            "static count is how often the instruction appears in the code, and Triton's K loop holds one BLOCK_K "
            "step, so it must equal the tile's work divided by the instruction's: it does in every row. The SASS "
            "names are the ones ncu's per-opcode table uses (`HMMA.16816` = m16n8k16, `HGMMA.64x128x16` = "
            "m64n128k16), so a compiled kernel and a profiled one can be compared opcode for opcode. On sm_90 "
            f"the prefill tile ({_tile(hopper.config)}) becomes `{hopper.instruction[0]}`, one per warpgroup per "
            f"k16; the decode config ({_tile(decode.config)}) cannot: wgmma's M is 64 per warpgroup and the tile "
            f"has {decode.config['BLOCK_M']} rows, so Triton falls back to `{decode.instruction[0]}` on Hopper.")


# --- the counters ----------------------------------------------------------------------------------------------

def _label(r: TensorReading) -> str:
    return f"{r.card} {r.kernel.split('(')[0].split('<')[0].removeprefix('void ')[:28]}"


def _cell(value: float | None, counter: str) -> str:
    if value is None:
        return "not in file"
    return f"{value:,.0f}" if counter.endswith(".sum") else f"{value:.2f}%"


def _counters_table(readings: list[TensorReading]) -> str:
    rows = [["matrix opcodes (`sass__inst_executed_per_opcode_with_modifier_all[…]`)",
             "warp-level instructions per SASS opcode: the shape and types are in the name",
             *(", ".join(f"`{op}` {v:,.0f}" for op, v in r.matrix.items()) or "none" for r in readings)]]
    rows += [[f"`{c}`", meaning, *(_cell(r.counters.get(c), c) for r in readings)] for c, meaning in COUNTERS]
    return table(["counter", "what it counts", *(_label(r) for r in readings)], rows)


def tensor_summary(r: TensorReading) -> str | None:
    """FLOPs (OPs) from the per-opcode counts, the rate, and the pipe-busy identity; None without tensor work."""
    from iotrace.trace.reports.tensor_flops import sass_flops

    if not r.has_tensor_work:
        return None
    lines = []
    for op, n in r.matrix.items():
        decoded = sass_flops(op)
        per = decoded[1] if isinstance(decoded, tuple) else None
        # ncu counts a warpgroup MMA once per warp (4 per wgmma), so its per-instruction work is 2·m·n·k / 4.
        how = "2·m·n·k / 4 warps" if "GMMA" in op.split(".")[0] else "2·m·n·k"
        lines.append(f"    {op}: {n:,.0f} warp instructions × "
                     + (f"{per:,.0f} ({how}) = {n * per:,.0f} FLOPs (OPs)" if per else f"(not countable: {decoded})"))
    total, seconds = r.count.total, r.duration_ns * 1e-9
    lines.append(f"    rate = {total:,.0f} / {seconds * 1e3:.4g} ms = {total / seconds / 1e12:.2f} T/s "
                 f"at the file's SM clock, {r.clock_hz / 1e9:.3f} GHz" if r.clock_hz else "")
    rate = PER_CLOCK.get(r.card)
    busy = r.counters.get(COUNTERS[4][0])
    if rate and r.cycles and busy is not None:
        share = 100 * total / (r.sm_count * rate * r.cycles)
        lines.append(f"    pipe busy = work / (SMs × dense rate × elapsed cycles) = {total:,.0f} / ({r.sm_count} × "
                     f"{rate} × {r.cycles:,.0f}) = {share:.2f}%; the counter says {busy:.2f}%")
    return "\n".join(line for line in lines if line)


# --- the reports -----------------------------------------------------------------------------------------------

def _template_ints(kernel: str) -> list[int]:
    return [int(v) for v in re.findall(r"\(int\)(\d+)", kernel.split(">(")[0])]


def _h100_text(r: TensorReading) -> str:
    tm, tk, tn, wm, wn, wk, threads, _ = _template_ints(r.kernel)
    consumers = threads // 128 - 1  # one producer warpgroup issues TMA, the others wgmma (the kernel's source)
    per_ktile = WARPS_PER_GROUP * (tm // wm) * (tk // wk)
    hgmma = sum(r.matrix.values())
    k_tiles = hgmma / (r.grid * per_ktile)
    analytic = 2 * H100_MNK**3
    counted = [c.flops_by_type.get("bf16 dense", 0.0) if c else 0.0 for c in r.all_launches]
    return "\n".join([
        f"The kernel's name carries its template: `gemm_bf16_pc_pipeline<{tm}, {tk}, {tn}, {wm}, {wn}, {wk}, "
        f"{threads}, …>` = TILE_M, TILE_K, TILE_N, WGMMA_M, WGMMA_N, WGMMA_K, threads ({H100_SOURCE}). The file's "
        f"own SASS opcode, `{next(iter(r.matrix))}`, is that wgmma shape: m{wm}n{wn}k{wk}. {threads} threads are "
        f"{threads // 128} warpgroups, {consumers} of which issues wgmma (the other loads tiles with TMA).", "",
        f"    M·N = grid × TILE_M × TILE_N = {r.grid:,} × {tm} × {tn} = {r.grid * tm * tn:,} = {H100_MNK}²",
        f"    HGMMA per block per K tile = 4 warps × (TILE_M/WGMMA_M) × (TILE_K/WGMMA_K) = 4 × {tm // wm} × "
        f"{tk // wk} = {per_ktile}",
        f"    K tiles = {hgmma:,.0f} / ({r.grid:,} × {per_ktile}) = {k_tiles:g}, so K = {k_tiles:g} × {tk} = "
        f"{k_tiles * tk:g}",
        f"    analytic = 2·M·N·K = 2 × {H100_MNK}³ = {analytic:,} (K = {H100_MNK} from PROVENANCE.md, not the file)",
        f"    counted = {hgmma:,.0f} × 2·{wm}·{wn}·{wk}/4 = {counted[0]:,.0f}; counted / analytic = "
        f"{counted[0] / analytic:.4f}", "",
        f"All {r.launches} launches count {', '.join(f'{c:,.0f}' for c in counted)} FLOPs "
        f"({'all equal to' if all(c == analytic for c in counted) else 'against'} the analytic count). The K the "
        "counters imply is not an independent check (it comes from the same count), but M·N is: it comes from "
        "the grid and the tile, and the 8192 of K agrees with the benchmark's stated size.", "",
        tensor_summary(r) or ""])


def _cutlass_text(r: TensorReading) -> str:
    shapes_in_name = list(dict.fromkeys(re.findall(r"GemmShape<\(int\)(\d+), \(int\)(\d+), \(int\)(\d+)>", r.kernel)))
    (bm, bn, bk), (wm, wn, wk), (im, i_n, ik) = ((int(x) for x in s) for s in shapes_in_name[:3])
    warps = (bm // wm) * (bn // wn)
    per_warp = (wm // im) * (wn // i_n) * (bk // ik)
    elem = "s4" if "integer_subbyte<(int)4, (bool)1>" in r.kernel else "see the name"
    busy = r.counters.get(COUNTERS[4][0])
    top = ", ".join(f"`{op}` {v:,.0f}" for op, v in r.top_opcodes)
    return (f"The name promises tensor work: CUTLASS's `GemmShape` triples are the threadblock tile {bm}×{bn}×{bk}, "
            f"the warp tile {wm}×{wn}×{wk} and the instruction {im}×{i_n}×{ik} (`cutlass::arch::Mma` on {elem} "
            f"operands, PTX `mma.sync.m16n8k64` for {elem}). They fit together as the shapes demand: "
            f"({bm}/{wm}) × ({bn}/{wn}) = {warps} warps = {warps * 32} threads, the block the file records "
            f"({r.block}), and each warp owes ({wm}/{im}) × ({wn}/{i_n}) × ({bk}/{ik}) = {per_warp} mma.sync per "
            f"threadblock K step. The counters say none ran: the per-opcode table of this launch (grid {r.grid}, "
            f"{r.duration_ns / 1e3:.3f} µs) holds no matrix opcode at all, the tensor pipe was busy "
            f"{busy if busy is not None else 0:.2f}% of cycles, and iotrace counts "
            f"{'no' if r.count is None else 'some'} tensor FLOPs. Its most executed opcodes are {top}: the "
            "launch staged tiles (`LDGSTS` is cp.async) and exited. The file cannot say why; what it does say is "
            "that a kernel name is a claim and the per-opcode table is the evidence.")


# --- tiles and padding -----------------------------------------------------------------------------------------

def padded(size: int, step: int) -> int:
    """``size`` rounded up to a multiple of ``step``: what a tile or an instruction actually computes."""
    return math.ceil(size / step) * step


def waste(mnk: tuple[int, int, int], step: tuple[int, int, int]) -> float:
    """The share of the multiply-adds issued on zero padding when M, N, K are rounded up to ``step``."""
    issued = math.prod(padded(s, t) for s, t in zip(mnk, step, strict=True))
    return 1 - math.prod(mnk) / issued


def _padding_rows(compiled: list[Compiled]) -> list[list[str]]:
    from iotrace.plugins import kernel

    spec = kernel("gemm")
    a100 = next(c for c in compiled if c.target == "sm_80" and c.dtype == "bf16")
    hopper = next(c for c in compiled if c.target == "sm_90" and c.instruction[0].startswith("wgmma"))
    default = tuple(spec.default_shape[k] for k in ("M", "N", "K"))
    decode = tuple(spec.presets["llama-3-8b-qkv-decode-b1"][k] for k in ("M", "N", "K"))
    prefill = tuple(spec.presets["llama-3-8b-mlp-up-prefill-2k"][k] for k in ("M", "N", "K"))
    tile = lambda c: (c.config["BLOCK_M"], c.config["BLOCK_N"], c.config["BLOCK_K"])  # noqa: E731
    cases = [("default shape", default, "mma.sync m16n8k16", (16, 8, 16)),
             ("default shape", default, f"sm_80 tile {_tile(a100.config)}", tile(a100)),
             ("llama-3-8b-qkv-decode-b1", decode, "mma.sync m16n8k16", (16, 8, 16)),
             ("llama-3-8b-qkv-decode-b1", decode, "wgmma m64n128k16", (64, 128, 16)),
             ("llama-3-8b-mlp-up-prefill-2k", prefill, f"sm_90 tile {_tile(hopper.config)}", tile(hopper))]
    rows = []
    for label, mnk, what, step in cases:
        rounded = "×".join(str(padded(s, t)) for s, t in zip(mnk, step, strict=True))
        k_waste = 1 - mnk[2] / padded(mnk[2], step[2])
        rows.append([label, "×".join(map(str, mnk)), what, rounded, f"{100 * k_waste:.2f}%",
                     f"{100 * waste(mnk, step):.2f}%"])
    return rows


def _tiles_text(compiled: list[Compiled]) -> str:
    from iotrace.cards import lookup
    from iotrace.plugins import kernel

    spec = kernel("gemm")
    card = lookup("h100-sxm")
    space = spec.space(spec.presets["square-8192"], "bf16", card)
    narrow = [c for c in space if c["BLOCK_M"] < 64]
    rules = table(["instruction", "the tile must be", "because"], [
        ["mma.sync m16n8k16 (bf16/fp16)", "per-warp tile a multiple of 16×8, BLOCK_K a multiple of 16",
         "one warp issues one 16×8×16 product; a smaller or ragged piece is padded with zeros"],
        ["mma.sync m16n8k32 (fp8, int8)", "the same, BLOCK_K a multiple of 32", "k is 32 one-byte elements"],
        ["wgmma m64nNk16 (sm_90)", "64 rows per warpgroup, N a multiple of 8 up to 256, BLOCK_K a multiple of 16",
         "four warps share one 64-row product read from shared memory"],
        ["TMA / cp.async loads", "rows of 16 bytes: K and N multiples of 8 (bf16) or 16 (fp8)",
         "cuTensorMapEncodeTiled wants 16-byte strides; cp.async moves 4, 8 or 16 bytes"],
    ])
    return "\n\n".join([
        "A block's tile is split between its warps (or warpgroups), and each piece is issued as whole "
        "instructions, so every tile dimension must be a whole number of instruction shapes times the warps along "
        "it. The rows above satisfy it (the `equal` column); the rules, with their sources in the shapes table:",
        rules,
        f"The plugin's tuning space on the {card.name} (square-8192, bf16) has {len(space)} configs; "
        f"{len(narrow)} have BLOCK_M below 64, and on sm_90 those compile to mma.sync, as the decode row above "
        "does: they can never use wgmma. Where the problem itself is not a multiple of the shape, the masked "
        "loads fill the edge with zeros (`other=0.0` in `iotrace/kernels/gemm.py`) and the tensor cores "
        "multiply them anyway; the share of issued multiply-adds spent on padding is 1 − M·N·K / (Mp·Np·Kp):",
        table(["problem", "M×N×K", "rounded to", "issued Mp×Np×Kp", "K padding", "multiply-adds wasted"],
              _padding_rows(compiled)),
        "Alignment is the same rule one level down: NVIDIA's Matrix Multiplication Background guide "
        "(https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/) asks for "
        "dimensions that are multiples of 8 (fp16) or 16 (int8) elements, and the plugin's TMA path checks that "
        "row strides are multiples of 16 bytes (`_tma_aligned`)."])


# --- the note --------------------------------------------------------------------------------------------------

def build(corpus: Path, images: bool = True) -> Note:
    """The note; ``images`` is accepted for the catalog's signature (this note draws no figure)."""
    readings = [read(corpus, name) for name in (H100_GEMM, A40_IMMA, A40_1BLOCK, A100_CUTLASS)]
    h100, a40, a40_one, cutlass = readings
    compiled = compile_gemm()
    import triton

    note = Note("tensor-cores", "Tensor Core shapes", {
        "traces": "; ".join(from_trace._source_line(corpus / r.file, corpus) for r in readings),
        "kernel": "`gemm` (`iotrace/kernels/gemm.py`), default configs, cross-compiled for sm_80, sm_89 and sm_90 "
                  f"with Triton {triton.__version__} (`iotrace/compiler/mma.py`)",
        "shapes": "`iotrace/data/tensor_shapes.toml`, each row with its source",
        "kind": "measured (the reports, by their authors on real GPUs) and compiled (on the CPU); read by iotrace"})
    note.add("shapes", "The instruction shapes, per architecture and type",
             "A Tensor Core instruction multiplies an m×k tile of A by a k×n tile of B into an m×n accumulator: "
             "2·m·n·k FLOPs, issued by a warp (mma.sync), a warpgroup of four warps (wgmma) or one thread for the "
             "CTA (tcgen05). k is fixed by the input type's width (16 two-byte, 32 one-byte elements), so the "
             "tile a kernel issues is always a multiple of these shapes.", _shapes_table())
    note.add("compiled", "What the GEMM plugin compiles to", _compiled_table(compiled), _compiled_text(compiled))
    note.add("counters", "The tensor-pipe counters, and what each one counts",
             "Launch 0 of each report. The per-opcode table is the only one that says which instruction ran and "
             "so how many FLOPs it did; the `pct_of_peak` counters are rates against the pipe's peak, two of them "
             "of *instructions issued* (a wgmma issues once and runs for many cycles, so its issue share stays "
             "small) and two of *cycles busy*.", _counters_table(readings))
    note.add("h100", "H100 wgmma GEMM: FLOPs from the counters against 2·M·N·K", _h100_text(h100))
    note.add("a40", "A40 int8 IMMA: OPs from the instruction counts, and the pipe's busy share",
             f"One block per SM ({a40.grid} blocks of {a40.block} threads):", tensor_summary(a40) or "",
             f"One block on the whole card (grid {a40_one.grid}):", tensor_summary(a40_one) or "",
             f"The first issues `{next(iter(a40.matrix))}` (m8n8k16, the Turing-era int8 shape) and the second "
             f"`{next(iter(a40_one.matrix))}` (m16n8k16): each instruction's OPs come from its shape, and the work "
             "over the card's dense rate reproduces the busy counter. The one-block launch keeps one SM of "
             f"{a40_one.sm_count} busy, so the elapsed-cycle share is tiny while the issue rate over active "
             f"cycles reads {a40_one.counters.get(COUNTERS[2][0], 0.0):.2f}%.")
    note.add("cutlass", "A100 CUTLASS GEMM: a tensor-op kernel that ran no tensor instruction", _cutlass_text(cutlass))
    note.add("tiles", "Why tile sizes and alignment follow from the shapes", _tiles_text(compiled))
    return note
