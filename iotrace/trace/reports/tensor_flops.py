"""Tensor-core FLOPs of one launch by input type, dense apart from sparse, never counted twice; and the peak of the
same path and type (sm_70 to sm_120: HMMA, IMMA, DMMA, BMMA, QMMA/OMMA, GMMA/wgmma, tcgen05 UTC*MMA).

Sources, best first:

1. ``sm__ops_path_tensor_[op_<op>_]src_<types>[_dst_<type>][_sparsity_{on,off}]`` counters: NVIDIA gives them "for
   calculating the FLOPs" (NVIDIA Developer Forums, "Number of floating point operations in one HMMA instruction",
   t/275450: "There are metrics for calculating the FLOPs: ncu --query-metrics | grep sm__ops_"); their definition is
   "# of math ops executed in Tensor path [by op X] with source T [and destination D] [with sparsity on/off]"
   (ncu --query-metrics; the same strings ship in ncu-report's libnvperf_host.so). They count math operations, a
   multiply-add being two, so they are FLOPs (OPs for integer types): a public ncu measurement of a bf16
   FlashAttention-4 kernel on an SM103 GPU reads ``sm__ops_path_tensor_src_bf16_dst_fp32.sum`` = 12,193,680,588,800 =
   2 matmuls × 2 × 23·10240·10112·16·80 multiply-adds exactly, and its ops % of peak (33.26%) is half its tensor-pipe
   active % (66.52%): the unqualified counter's peak is the sparse rate, twice the dense one. The corpus holds no such
   counter (the H100 GEMM validates route 2 instead, to the FLOP). The names form a hierarchy (type, type ×
   sparsity, op × type, op × type × sparsity; ``src_fp16`` covers ``src_fp16_dst_fp16`` and ``_dst_fp32``): the most
   specific counters that do not overlap are used, and a coarser counter only adds what its parts do not hold.
2. Per-opcode SASS counts, ``sass__inst_executed_per_opcode_with_modifier_all[<SASS>]`` rows where the ncu reader keeps
   that instanced metric's per-opcode values (warp-level instructions): FLOPs only where the opcode fixes the shape.
3. Otherwise the instruction counts and pipe utilisation are evidence only: the FLOPs are reported as lacking.

HFMA2.MMA is no matrix instruction: it is an element-wise FP16x2 fused multiply-add (PTX ``fma.f16x2``), which ncu
still counts on the tensor pipe (NVIDIA's description of ``sm__inst_executed_pipe_tensor_op_hmma``, as ncu_report gives
it for every corpus report from sm_70 to sm_90: "# of warp instructions executed by tensor pipe (HMMA/HFMA2.MMA ops)").
Only ``sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active`` (sm_90) leaves it out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from iotrace.cards import Card
from iotrace.trace.reports.metricview import MetricView

__all__ = ["PER_OPCODE", "TensorCount", "card_tensor_peak", "key_of", "precision_of", "sass_flops", "tensor_flops",
           "tensor_peak"]

_PATH = re.compile(r"^(?P<unit>sm|smsp)__ops_path_tensor_(?:op_(?P<op>[a-z0-9]+)_)?"
                   r"src_(?P<src>[a-z0-9]+(?:_(?:fp|int|bf|tf)\d+)*)(?:_dst_(?P<dst>[a-z0-9]+))?(?:_sparsity_(?P<sp>on|off))?$")
#: Types without a sparse mode: no ``_sparsity_`` variants exist (ncu --query-metrics lists none for fp64 and int1).
_NO_SPARSE = frozenset({"fp64", "int1"})
#: The instanced per-opcode table of ncu's InstructionStats section, one value per SASS opcode with all its modifiers.
PER_OPCODE = "sass__inst_executed_per_opcode_with_modifier_all"
#: Warpgroup MMAs (Hopper wgmma): "a warpgroup is a set of four contiguous warps" that executes the instruction together
#: (PTX ISA 8.5, 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"), and ncu counts warp-level
#: instructions, so each wgmma is counted 4 times (corpus H100 GEMM: 16,777,216 HGMMA = 4 x 8192^3/(64*128*16)).
_GROUP = {"HGMMA": "fp16", "IGMMA": "int8", "QGMMA": "fp8", "BGMMA": "int1"}
#: Warp-level mma.sync instructions and their default input type (PTX ISA 9.7.14, "Warp Level Matrix Multiply-Accumulate
#: Instructions").
_WARP = {"HMMA": "fp16", "IMMA": "int8", "DMMA": "fp64", "BMMA": "int1", "QMMA": "fp8", "OMMA": "fp4"}
#: SASS type modifiers -> input type; F32/F16/S32 name the accumulator (HMMA.16816.F32 is fp16 in, fp32 out).
_TOKENS = {"BF16": "bf16", "TF32": "tf32", "E4M3": "fp8", "E5M2": "fp8", "E2M1": "fp4", "E3M2": "fp6", "E2M3": "fp6",
           "S8": "int8", "U8": "int8", "S4": "int4", "U4": "int4"}
#: CardBook peak keys (dense, FP32 accumulate; iotrace/data/cards.toml) per input type; fp4/fp6/int4/int1 have none.
_CARD_KEY = {"fp16": "fp16_tensor", "bf16": "bf16_tensor", "tf32": "tf32_tensor", "fp8": "fp8_tensor",
             "int8": "int8_tensor", "fp64": "fp64_tensor"}
_CLOCK = ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second")


@dataclass(frozen=True)
class TensorCount:
    """Tensor-pipe work of one launch: FLOPs (OPs for integers) per ``"<type> dense"`` / ``"<type> sparse"``."""

    flops_by_type: dict[str, float]
    source: str
    instructions: float | None = None
    lacking: str = ""
    #: (key, counter or SASS opcode, FLOPs) behind each key: the peak is taken from the counter with the most FLOPs.
    parts: tuple[tuple[str, str, float], ...] = field(default=(), repr=False)

    @property
    def dense(self) -> float:
        return sum(v for k, v in self.flops_by_type.items() if k.endswith(" dense"))

    @property
    def sparse(self) -> float:
        return sum(v for k, v in self.flops_by_type.items() if k.endswith(" sparse"))

    @property
    def total(self) -> float:
        return sum(self.flops_by_type.values())

    @property
    def dominant(self) -> str | None:
        return max(self.flops_by_type, key=self.flops_by_type.__getitem__) if self.flops_by_type else None


@dataclass(frozen=True)
class _Path:
    name: str
    op: str | None
    types: frozenset[str]
    dst: str | None
    sparsity: str | None
    value: float

    def covers(self, o: _Path) -> bool:
        return ((self.op is None or self.op == o.op) and o.types <= self.types and self.dst in (None, o.dst)
                and self.sparsity in (None, o.sparsity))

    def overlaps(self, o: _Path) -> bool:
        return (None in (self.op, o.op) or self.op == o.op) and bool(self.types & o.types) and \
            (None in (self.dst, o.dst) or self.dst == o.dst) and (None in (self.sparsity, o.sparsity) or
                                                                  self.sparsity == o.sparsity)

    @property
    def specificity(self) -> tuple[int, int]:
        return (self.op is not None) + (self.sparsity is not None) + (self.dst is not None), -len(self.types)


def _key(types: frozenset[str] | set[str], sparsity: str | None) -> str:
    label = "/".join(sorted(types))
    if sparsity == "on":
        return f"{label} sparse"
    return f"{label} dense" if sparsity == "off" or types <= _NO_SPARSE else f"{label} dense or sparse"


def _total(view: MetricView, kid: int, base: str, seconds: float | None) -> float | None:
    """A counter's total: ``.sum``, or the rate ncu's roofline sections store times the elapsed cycles."""
    total = view.get(kid, f"{base}.sum")
    if total is not None:
        return total
    rate, unit = view.get(kid, f"{base}.sum.per_cycle_elapsed"), base.split("__", 1)[0]
    cycles = view.get(kid, f"{unit}__cycles_elapsed.avg")
    if rate is not None and cycles is not None:
        return rate * cycles
    clock = view.get(kid, f"{unit}__cycles_elapsed.avg.per_second")
    return rate * clock * seconds if rate is not None and clock is not None and seconds else None


def _ops_paths(view: MetricView, kid: int, seconds: float | None) -> tuple[bool, TensorCount | None]:
    bases = {n.split(".", 1)[0] for n in view.of(kid) if "__ops_path_tensor_" in n}
    parsed = [(m, b) for b in sorted(bases) if (m := _PATH.match(b))]
    unit = "sm" if any(m["unit"] == "sm" for m, _ in parsed) else "smsp"  # sm__ and smsp__ count the same ops
    paths = [_Path(b, m["op"], frozenset(m["src"].split("_")), m["dst"], m["sp"], v) for m, b in parsed
             if m["unit"] == unit and (v := _total(view, kid, b, seconds)) is not None]
    if not paths:
        return False, None
    # Most specific first; a counter joins only if it overlaps nothing taken, or contains everything it overlaps,
    # and then adds only its remainder (the work of ops or types it has no finer counter for).
    taken: list[_Path] = []
    parts: list[tuple[str, str, float]] = []
    notes: list[str] = []
    for p in sorted(paths, key=lambda p: p.specificity, reverse=True):
        inside = [t for t in taken if p.overlaps(t)]
        astray = next((t for t in inside if not p.covers(t)), None)
        if astray is not None:  # overlaps a taken counter it does not contain: adding it could count work twice
            if p.value > 0:
                notes.append(f"{p.name} overlaps {astray.name} without containing it: left out")
            continue
        outer = [t for t in inside if not any(u is not t and u.covers(t) for u in inside)]
        rest = p.value - sum(t.value for t in outer)
        if rest < -1e-3 * p.value:
            notes.append(f"{p.name} ({p.value:.4g}) is less than its parts: left out")
            continue
        taken.append(p)
        if rest > 1e-3 * p.value:
            parts.append((_key(p.types, p.sparsity), p.name, rest))
    by_type: dict[str, float] = {}
    for key, _, flops in parts:
        by_type[key] = by_type.get(key, 0.0) + flops
    lacking = "; ".join(notes + [f"{k}: the file does not split this work into dense and sparse"
                                 for k in by_type if k.endswith(" or sparse")])
    used = sorted({name for _, name, _ in parts})
    return True, TensorCount(by_type, ", ".join(f"{n}.sum" for n in used), None, lacking, tuple(parts))


def sass_flops(sass: str) -> tuple[str, float] | str | None:
    """(key, FLOPs per warp-level instruction) of one SASS opcode with its modifiers; None for an opcode that is no
    matrix instruction (HFMA2.MMA, FFMA); a reason string for a matrix opcode whose shape the opcode does not fix."""
    op, *mods = sass.split(".")
    if op not in _GROUP and op not in _WARP:
        return "tcgen05 MMA: shape in the instruction descriptor" if op.startswith("UTC") and "MMA" in op else (
            f"{op}: unknown matrix opcode" if op.endswith("MMA") else None)
    types = {_TOKENS[m] for m in mods if m in _TOKENS} or {_GROUP.get(op) or _WARP[op]}
    sparsity = "on" if "SP" in mods else "off"
    shape = next((m for m in mods if m[:1].isdigit()), "")
    if op in _GROUP:  # HGMMA.64x128x16.F32.BF16: m x n x k, issued by the 4 warps of a warpgroup
        dims = re.fullmatch(r"(\d+)x(\d+)x(\d+)", shape)
        per_warp = 4
    else:  # HMMA.16816 = m16n8k16: every mma.sync shape has n = 8 (PTX ISA 9.7.14.2 "Matrix shapes")
        dims = re.fullmatch(r"(16|8)(8)(\d+)", shape)
        per_warp = 1
        if op == "HMMA" and (shape == "884" or any(m.startswith("STEP") for m in mods)):
            # mma.m8n8k4 is computed per quad-pair and split into STEP instructions (Volta): the work of one SASS
            # instruction is not fixed by its name.
            return f"{sass}: m8n8k4 quad-pair steps"
    if dims is None:
        return f"{sass}: no shape in the opcode"
    m, n, k = (int(x) for x in dims.groups())
    return _key(frozenset(types), sparsity), 2.0 * m * n * k / per_warp  # one multiply-add = 2 FLOPs


def _sass_counts(view: MetricView, kid: int, seconds: float | None) -> tuple[bool, TensorCount | None]:
    prefix = f"{PER_OPCODE}["
    rows = {n[len(prefix):-1]: v for n, v in view.of(kid).items() if n.startswith(prefix) and v > 0}
    if not rows:
        return False, None
    parts, lacking, instructions = [], [], 0.0
    for sass, count in sorted(rows.items()):
        decoded = sass_flops(sass)
        if decoded is None:
            continue
        instructions += count
        if isinstance(decoded, str):
            lacking.append(f"{count:.0f} × {decoded}")
        else:
            parts.append((decoded[0], sass, count * decoded[1]))
    by_type: dict[str, float] = {}
    for key, _, flops in parts:
        by_type[key] = by_type.get(key, 0.0) + flops
    return True, TensorCount(by_type, f"{PER_OPCODE} ({', '.join(s for _, s, _ in parts) or 'no countable opcode'}; "
                       "2·m·n·k per mma, ÷4 per warp for warpgroup MMAs)", instructions,
                       ("FLOPs not countable for " + "; ".join(lacking)) if lacking else "", tuple(parts))


def _pct(view: MetricView, kid: int, base: str) -> float | None:
    found = view.first(kid, tuple(f"{base}.{r}.pct_of_peak_sustained_{w}" for r in ("avg", "sum")
                                  for w in ("active", "elapsed")))
    return None if found is None else found[1]


def _evidence(view: MetricView, kid: int, seconds: float | None) -> TensorCount | None:
    """Tensor work the file shows without FLOPs: instruction counts and pipe utilisation."""
    gmma = view.get(kid, "smsp__sass_inst_executed_op_shared_gmma.sum")
    pipe = next((v for b in ("smsp__inst_executed_pipe_tensor", "sm__inst_executed_pipe_tensor")
                 if (v := _total(view, kid, b, seconds)) is not None), None)
    typed = _pct(view, kid, "sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active")
    seen = {op: _pct(view, kid, f"sm__inst_executed_pipe_tensor_op_{op}") for op in ("hmma", "imma", "dmma", "gmma")}
    matrix = [f"{op.upper()} pipe {v:.3g}% of peak" for op, v in seen.items() if v and op != "hmma"]
    if typed:
        matrix.append(f"tensor pipe busy with matrix ops {typed:.3g}% of elapsed cycles")
    if gmma:
        matrix.append(f"{gmma:,.0f} warp-level HGMMA/IGMMA/QGMMA/BGMMA instructions")
    if seen["hmma"] and typed is None:  # sm_90's typed counter leaves HFMA2.MMA out; without it HMMA is ambiguous
        matrix.append(f"HMMA pipe {seen['hmma']:.3g}% of peak (that counter also counts HFMA2.MMA, no matrix op)")
    if pipe and typed is None and not matrix:
        matrix.append(f"{pipe:,.0f} tensor-pipe warp instructions (HFMA2.MMA included)")
    if not matrix:
        return None
    where = (f"; the shapes and types sit in the file's per-opcode table ({PER_OPCODE}), of which iotrace's ncu reader "
             "keeps only the total") if view.get(kid, PER_OPCODE) is not None else ""
    return TensorCount({}, "tensor pipe counters (no FLOPs)", gmma or pipe,
                       "tensor FLOPs not countable: " + "; ".join(matrix) + where)


def tensor_flops(view: MetricView, kid: int, seconds: float | None) -> TensorCount | None:
    """Tensor-pipe FLOPs of launch ``kid``; None where the file shows no tensor work at all. Counted FLOPs
    (``sm__ops_path_tensor_*``) and the per-opcode table are authoritative: where they show none there was none,
    whatever the pipe counters say (HFMA2.MMA runs on the tensor pipe)."""
    for read in (_ops_paths, _sass_counts):
        found, count = read(view, kid, seconds)
        if found:
            return count if count is not None and (count.flops_by_type or count.lacking) else None
    return _evidence(view, kid, seconds)


def precision_of(key: str) -> str:
    """The roofline's precision name of a tensor key: ``bf16 dense`` -> ``bf16 tensor``, ``bf16 sparse`` ->
    ``bf16 tensor sparse``."""
    types, _, mode = key.partition(" ")
    return f"{types} tensor" + ("" if mode == "dense" else f" {mode}")


def key_of(precision: str) -> str | None:
    """The tensor key of a roofline precision name (the inverse of :func:`precision_of`); None for a CUDA-core one."""
    types, tensor, mode = precision.partition(" tensor")
    return f"{types} {mode.strip() or 'dense'}" if tensor else None


def tensor_peak(view: MetricView, kid: int, count: TensorCount, key: str | None = None) -> tuple[float, str] | None:
    """The file's peak for the same path and type as the work under ``key`` (default: the dominant one), from its
    ``*.sum.peak_sustained`` × the SM clock. A dense key only takes a ``_sparsity_off`` peak (or a type with no
    sparse mode): the unqualified counters' peak is the sparse one, twice the dense rate."""
    key = key or count.dominant
    clock = view.first(kid, _CLOCK)
    if key is None or clock is None:
        return None
    want = {"dense": "off", "sparse": "on"}.get(key.rsplit(" ", 1)[-1])
    for _, name, _ in sorted((p for p in count.parts if p[0] == key), key=lambda p: -p[2]):
        m = _PATH.match(name)
        if m is None or want is None:
            continue
        own = name if m["sp"] == want or (m["sp"] is None and set(m["src"].split("_")) <= _NO_SPARSE) else None
        for base in (own, name if m["sp"] else f"{name}_sparsity_{want}"):
            per_cycle = view.get(kid, f"{base}.sum.peak_sustained") if base else None
            if per_cycle:
                return per_cycle * clock[1], f"file: {base}.sum.peak_sustained × {clock[0]}"
    return None


def card_tensor_peak(card: Card | None, key: str) -> tuple[float, str] | None:
    """The CardBook's dense peak for the key's input type (fp16/bf16/fp8 at FP32 accumulate, at boost clock); a sparse
    key gets twice it (2:4 structured sparsity doubles tensor math throughput: NVIDIA A100 Tensor Core GPU Architecture
    whitepaper, "Fine-Grained Structured Sparsity"). None for types the card states no peak for (fp4, int4, int1)."""
    types, _, mode = key.rpartition(" ")
    card_key = _CARD_KEY.get(types)
    if card is None or card_key is None or card_key not in card.peak_tflops or mode not in ("dense", "sparse"):
        return None
    scale, how = (2.0, "2 × dense ") if mode == "sparse" else (1.0, "")
    return (scale * card.peak_tflops[card_key] * 1e12,
            f"card {card.key}: {how}{card_key} peak ({card.source(card_key)})")
