"""The roofline of AMD kernels: FLOPs and bytes from rocprof-compute's counters, ceilings from its roofline.csv.

Formulas are rocprof-compute's own (ROCm/rocprofiler-compute ``src/utils/roofline_calc.py``, ``calc_ai``, at commit
1f0212a4a2bfb0c7a68364b77c20625c607b849c; unchanged from 95b600ea582f168425bbf50f9707bcce1aa9d73c):

* VALU FLOPs = lanes · (ADD + MUL + 2·FMA + TRANS) per type (``SQ_INSTS_VALU_{ADD,MUL,FMA,TRANS}_F{16,32,64}`` count
  wave instructions; rocprof-compute multiplies by 64, the CDNA wavefront).
* MFMA FLOPs = 512 · ``SQ_INSTS_VALU_MFMA_MOPS_<type>`` (the counter counts matrix ops in units of 512).
* HBM bytes: MI200 (and MI100, whose gfx908 panel 0200 "L2-Fabric Read/Write BW" uses the same terms)
  32·RDREQ_32B + 64·(RDREQ − RDREQ_32B) + 64·WRREQ_64B + 32·(WRREQ − WRREQ_64B) over ``TCC_EA_*_sum``; MI300
  128·TCC_BUBBLE + 64·(RDREQ − TCC_BUBBLE − RDREQ_32B) + 32·RDREQ_32B + the same write terms over ``TCC_EA0_*_sum``
  (TCC_BUBBLE counts 128-byte reads; gfx942 panel 0200 "L2-Fabric Read BW").
* L2 bytes = 64 · (TCP_TCC_READ_REQ + TCP_TCC_WRITE_REQ + TCP_TCC_ATOMIC_WITH_RET_REQ + TCP_TCC_ATOMIC_WITHOUT_RET_REQ),
  L1 (vL1D) bytes = 64 · TCP_TOTAL_CACHE_ACCESSES, LDS bytes = 4 · banks · (SQ_LDS_IDX_ACTIVE − SQ_LDS_BANK_CONFLICT).

Ceilings: roofline.csv's measured peaks (``rocprof-compute profile`` runs its roofline benchmark; device 0, the
``device_id`` rocprof-compute's own roofline plots by default, src/roofline.py), else the CardBook card's datasheet
peaks, each saying which. This module holds the counter arithmetic; :mod:`iotrace.trace.reports.roofline` places
the point with the same identity as NVIDIA kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iotrace.cards import Card
from iotrace.trace.reports.metricview import MetricView

__all__ = ["AMD_PREFIXES", "COLLECT", "AmdCeilings", "AmdFlops", "amd_bytes", "amd_flops", "has_amd_counters"]

#: What rocprof-compute collects the roofline counters and ceilings with (its "--roof-only" profiles the roofline
#: counters and runs the roofline benchmark alone: rocprofiler-compute docs, "Profile mode", roofline options).
COLLECT = "rocprof-compute profile --roof-only"

#: Counter families only AMD's profilers write (SQ: sequencer, TCC: L2, TCP: vL1D, GRBM: graphics block), and
#: rocprof v1's derived FETCH_SIZE/WRITE_SIZE; no ncu metric starts so (ncu names are unit__counter).
AMD_PREFIXES = ("SQ_", "SQC_", "TCC_", "TCP_", "TA_", "TD_", "GRBM_", "SPI_", "FETCH_SIZE", "WRITE_SIZE")

#: Lanes of a CDNA wavefront: roofline_calc.py multiplies every VALU count by 64; a card with another wave size
#: (RDNA's wave32) gives its own.
CDNA_LANES = 64
#: Matrix ops per unit of SQ_INSTS_VALU_MFMA_MOPS_* (roofline_calc.py: ``SQ_INSTS_VALU_MFMA_MOPS_BF16 * 512``).
MOPS_UNIT = 512
#: LDS banks per CU: sysinfo.csv's lds_banks_per_cu is 32 on MI100, MI210 and MI300X (the corpus' three workloads),
#: the value rocprof-compute's LDS bandwidth multiplies by (roofline_calc.py ``mspec.lds_banks_per_cu``).
LDS_BANKS_PER_CU = 32
#: Bytes per LDS bank access (roofline_calc.py: ``(SQ_LDS_IDX_ACTIVE - SQ_LDS_BANK_CONFLICT) * 4 * banks``).
LDS_BANK_BYTES = 4
#: Bytes of one vL1D access and one TCP→TCC request in roofline_calc.py (``TCP_TOTAL_CACHE_ACCESSES_sum * 64``).
REQUEST_BYTES = 64
#: A measured HBM peak is at least this share of the datasheet's: roofline.csv's HBMBw is 80% of the datasheet on
#: the corpus' MI300X (4244.35 of 5300 GB/s) and 85% on its MI210 (1392.46 of 1638.4 GB/s, sysinfo.csv hbm_bw); so
#: without a card, bytes above HBMBw / 0.75 moved faster than the memory can.
MEASURED_SHARE_OF_DATASHEET = 0.75
#: rocprof v1's FETCH_SIZE/WRITE_SIZE are kilobytes (ROCm/rocprofiler test/tool/metrics.xml).
KIB = 1024

# VALU precision -> counter suffix; MFMA input type -> SQ_INSTS_VALU_MFMA_MOPS_ suffix (F8 and I8 as the gfx942
# counters name them; rocprof-compute's panel 0200 counts I8 the same way: "SQ_INSTS_VALU_MFMA_MOPS_I8 * 512").
_VALU = {"fp16": "F16", "fp32": "F32", "fp64": "F64"}
_MFMA = {"fp16": "F16", "bf16": "BF16", "fp32": "F32", "fp64": "F64", "fp8": "F8", "int8": "I8"}

# Roofline precision -> roofline.csv column (rocprof-compute's benchmark names: roofline_calc.py calc_ceilings reads
# "<dtype>Flops" for VALU and "MFMA<dtype>Flops" / "MFMAI8Ops" for MFMA) and -> CardBook peak key. The CardBook's
# "*_tensor" peaks are AMD's matrix-core (MFMA) peaks; it states no FP32-matrix or FP16-vector peak.
_FILE_PEAK = {"fp16": "FP16Flops", "fp32": "FP32Flops", "fp64": "FP64Flops", "fp16 mfma": "MFMAF16Flops",
              "bf16 mfma": "MFMABF16Flops", "fp32 mfma": "MFMAF32Flops", "fp64 mfma": "MFMAF64Flops",
              "fp8 mfma": "MFMAF8Flops", "int8 mfma": "MFMAI8Ops"}
_CARD_PEAK = {"fp32": "fp32", "fp64": "fp64", "fp16 mfma": "fp16_tensor", "bf16 mfma": "bf16_tensor",
              "fp64 mfma": "fp64_tensor", "fp8 mfma": "fp8_tensor", "int8 mfma": "int8_tensor"}
# Level -> roofline.csv bandwidth column (roofline_calc.py: cacheHierarchy HBM, L2, L1, LDS + "Bw").
_FILE_BW = {"dram": "HBMBw", "l2": "L2Bw", "l1": "L1Bw", "lds": "LDSBw"}
#: The counter to name when a level is missing.
LEVEL_COUNTER = {"dram": "TCC_EA0_RDREQ_sum (MI300) or TCC_EA_RDREQ_sum (MI100/MI200)",
                 "l2": "TCP_TCC_READ_REQ_sum", "l1": "TCP_TOTAL_CACHE_ACCESSES_sum", "lds": "SQ_LDS_IDX_ACTIVE"}
LEVEL_NAME = {"dram": "HBM", "l2": "L2", "l1": "vL1D", "lds": "LDS"}


def has_amd_counters(view: MetricView, kid: int) -> bool:
    """Whether the kernel's counters are AMD's (then the AMD formulas place it)."""
    return any(name.startswith(AMD_PREFIXES) for name in view.of(kid))


@dataclass(frozen=True)
class AmdFlops:
    """FLOPs per precision ("fp32" VALU, "bf16 mfma" matrix core; only types with work), their total (0.0 when the
    counters exist and count nothing) and where they came from."""

    by_precision: dict[str, float]
    total: float
    source: str


def _get_all(view: MetricView, kid: int, names: Sequence[str]) -> list[float] | None:
    values = [view.get(kid, n) for n in names]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def amd_flops(view: MetricView, kid: int, lanes: int = CDNA_LANES) -> AmdFlops | None:
    """The kernel's FLOPs by roofline_calc.py's formulas, or None when none of the per-type counts were collected.
    A type whose four VALU counts (or whose MOPS count) are absent is left out, as rocprof-compute skips it."""
    out: dict[str, float] = {}
    said: list[str] = []
    for precision, suffix in _VALU.items():
        names = [f"SQ_INSTS_VALU_{op}_{suffix}" for op in ("ADD", "MUL", "FMA", "TRANS")]
        values = _get_all(view, kid, names)
        if values is None:
            continue
        add, mul, fma, trans = values
        out[precision] = lanes * (add + mul + 2.0 * fma + trans)
        said.append(f"{lanes}·(ADD+MUL+2·FMA+TRANS)_{suffix}")
    for precision, suffix in _MFMA.items():
        mops = view.get(kid, f"SQ_INSTS_VALU_MFMA_MOPS_{suffix}")
        if mops is None:
            continue
        out[f"{precision} mfma"] = MOPS_UNIT * mops
        said.append(f"{MOPS_UNIT}·MFMA_MOPS_{suffix}")
    if not said:
        return None
    source = ("SQ_INSTS_VALU_*: " + " + ".join(said) + " (rocprof-compute roofline_calc.py)")
    return AmdFlops({k: v for k, v in out.items() if v > 0}, float(sum(out.values())), source)


def _hbm(view: MetricView, kid: int) -> tuple[float, str] | None:
    """HBM bytes (reads and writes at the L2-fabric interface), by the first formula whose counters are all here."""
    mi300 = _get_all(view, kid, ("TCC_BUBBLE_sum", "TCC_EA0_RDREQ_sum", "TCC_EA0_RDREQ_32B_sum", "TCC_EA0_WRREQ_sum",
                                 "TCC_EA0_WRREQ_64B_sum"))
    if mi300 is not None:
        bubble, rd, rd32, wr, wr64 = mi300
        # The counters come from different replay passes, so TCC_BUBBLE can exceed RDREQ by a few hundred
        # requests; rocprof-compute applies the formula as it stands, and so does this.
        value = 128 * bubble + 64 * (rd - bubble - rd32) + 32 * rd32 + 32 * (wr - wr64) + 64 * wr64
        return value, ("128·TCC_BUBBLE_sum + 64·(TCC_EA0_RDREQ_sum − TCC_BUBBLE_sum − TCC_EA0_RDREQ_32B_sum) + "
                       "32·TCC_EA0_RDREQ_32B_sum + 32·(TCC_EA0_WRREQ_sum − TCC_EA0_WRREQ_64B_sum) + "
                       "64·TCC_EA0_WRREQ_64B_sum (rocprof-compute roofline_calc.py, MI300)")
    mi200 = _get_all(view, kid, ("TCC_EA_RDREQ_sum", "TCC_EA_RDREQ_32B_sum", "TCC_EA_WRREQ_sum",
                                 "TCC_EA_WRREQ_64B_sum"))
    if mi200 is not None:
        rd, rd32, wr, wr64 = mi200
        value = 32 * rd32 + 64 * (rd - rd32) + 64 * wr64 + 32 * (wr - wr64)
        return value, ("32·TCC_EA_RDREQ_32B_sum + 64·(TCC_EA_RDREQ_sum − TCC_EA_RDREQ_32B_sum) + "
                       "64·TCC_EA_WRREQ_64B_sum + 32·(TCC_EA_WRREQ_sum − TCC_EA_WRREQ_64B_sum) "
                       "(rocprof-compute roofline_calc.py, MI200)")
    sizes = _get_all(view, kid, ("FETCH_SIZE", "WRITE_SIZE"))
    if sizes is not None:
        return KIB * (sizes[0] + sizes[1]), "1024·(FETCH_SIZE + WRITE_SIZE) (rocprof derived metrics, KiB)"
    return None


def amd_bytes(view: MetricView, kid: int) -> list[tuple[str, float, str]]:
    """(level, bytes, how) for each of HBM ("dram"), L2, vL1D ("l1") and LDS whose counters are all here."""
    out: list[tuple[str, float, str]] = []
    hbm = _hbm(view, kid)
    if hbm is not None:
        out.append(("dram", *hbm))
    l2_names = ("TCP_TCC_READ_REQ_sum", "TCP_TCC_WRITE_REQ_sum", "TCP_TCC_ATOMIC_WITH_RET_REQ_sum",
                "TCP_TCC_ATOMIC_WITHOUT_RET_REQ_sum")
    l2 = _get_all(view, kid, l2_names)
    if l2 is not None:
        out.append(("l2", REQUEST_BYTES * sum(l2), f"{REQUEST_BYTES}·(" + " + ".join(l2_names) + ")"))
    l1 = view.get(kid, "TCP_TOTAL_CACHE_ACCESSES_sum")
    if l1 is not None:
        out.append(("l1", REQUEST_BYTES * l1, f"{REQUEST_BYTES}·TCP_TOTAL_CACHE_ACCESSES_sum"))
    lds = _get_all(view, kid, ("SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT"))
    if lds is not None:
        out.append(("lds", LDS_BANK_BYTES * LDS_BANKS_PER_CU * (lds[0] - lds[1]),
                    f"{LDS_BANK_BYTES}·{LDS_BANKS_PER_CU} banks·(SQ_LDS_IDX_ACTIVE − SQ_LDS_BANK_CONFLICT)"))
    return out


class AmdCeilings:
    """The ceilings an AMD kernel meets: the workload's measured roofline.csv peaks (``file``), else the card's."""

    def __init__(self, rows: Sequence[Mapping[str, Any]] | None, card: Card | None, ceilings: str = "auto") -> None:
        rows_given, rows = rows, list(rows or [])
        self.device = min((int(r["device"]) for r in rows), default=None) if rows else None
        if any(int(r["device"]) == 0 for r in rows):
            self.device = 0  # rocprof-compute's own roofline plots device 0 unless told otherwise
        self._file = {str(r["ceiling"]): r for r in rows if self.device is not None and int(r["device"]) == self.device}
        self.card = card
        self.use_file = ceilings != "card"
        self.use_card = ceilings != "file"
        # None: no ceilings were handed in; []: the workload has none (rocprof-compute ran no roofline benchmark,
        # as on MI100, where its roofline is unsupported: roofline_calc.py SUPPORTED_SOC = mi200, mi300).
        self._why_no_file = ("the workload has no roofline.csv: rocprof-compute measured no ceilings"
                             if rows_given is not None and not self._file else "")

    def _from_file(self, column: str, scale_name: str) -> tuple[float, str] | None:
        row = self._file.get(column) if self.use_file else None
        if row is None or not row.get("value"):  # 0 is roofline.csv's "not measured" (MFMAF4Flops on MI300X)
            return None
        spread = (f", {row['low']:g} to {row['high']:g}" if row.get("low") is not None and row.get("high") is not None
                  else "")
        return (float(row["value"]) * 1e9, f"file: roofline.csv {column} of device {self.device} "
                f"({float(row['value']):g} {row.get('unit') or scale_name}{spread}; rocprof-compute's measured peak)")

    def _fallback_note(self) -> str:
        return f"; {self._why_no_file}" if self._why_no_file and self.use_file else ""

    def bandwidth(self, level: str) -> tuple[float | None, str]:
        found = self._from_file(_FILE_BW[level], "GB/s")
        if found is not None:
            return found
        card = self.card
        if level == "dram" and self.use_card and card is not None and card.memory_bandwidth_gbs:
            return (card.memory_bandwidth_gbs * 1e9, f"card {card.key}: memory bandwidth "
                    f"({card.source('memory_bandwidth_gbs')}){self._fallback_note()}")
        if level != "dram":
            return None, (f"none: no measured {_FILE_BW[level]} (roofline.csv is the only source of a "
                          f"{LEVEL_NAME[level]} ceiling; the CardBook states DRAM bandwidth only)")
        return None, f"none: no roofline.csv HBMBw and no card bandwidth{self._fallback_note()}"

    def peak(self, precision: str | None) -> tuple[float | None, str]:
        if precision is None:
            return None, "none: the counters show no floating-point work"
        found = self._from_file(_FILE_PEAK[precision], "GFLOP/s")
        if found is not None:
            return found
        key, card = _CARD_PEAK.get(precision), self.card
        if self.use_card and key is not None and card is not None and key in card.peak_tflops:
            return (card.peak_tflops[key] * 1e12, f"card {card.key}: {key} peak ({card.source(key)})"
                    f"{self._fallback_note()}")
        return None, (f"none: no roofline.csv {_FILE_PEAK[precision]} and no CardBook {precision} peak"
                      f"{self._fallback_note()}")

    def implausible(self, hbm_bytes: float, seconds: float | None) -> str:
        """Why HBM bytes cannot be this dispatch's ("" when they can): moved faster than the memory can (the card's
        datasheet bandwidth, else the measured HBMBw / :data:`MEASURED_SHARE_OF_DATASHEET`), they were not counted
        for this dispatch alone (e.g. counters not reset between dispatches)."""
        card, measured = self.card, self._file.get("HBMBw")
        if card is not None and card.memory_bandwidth_gbs:
            limit, what = card.memory_bandwidth_gbs * 1e9, f"card {card.key}'s {card.memory_bandwidth_gbs:g} GB/s " \
                                                           "datasheet bandwidth"
        elif measured is not None and measured.get("value"):
            limit = float(measured["value"]) * 1e9 / MEASURED_SHARE_OF_DATASHEET
            what = (f"roofline.csv's measured {float(measured['value']):g} GB/s / {MEASURED_SHARE_OF_DATASHEET:g} "
                    "(no card: a measured peak is at least that share of the datasheet's)")
        else:
            return ""
        if not seconds or hbm_bytes / seconds <= limit:
            return ""
        return (f"the HBM counters give {hbm_bytes:.4g} B in {seconds * 1e9:.4g} ns, {hbm_bytes / seconds / 1e9:.4g} "
                f"GB/s, above {what}: they are not this dispatch's alone")
