"""Step 1's measured half: the two ceilings every percentage in the run is taken against.

Bandwidth: a device-to-device copy of a buffer far larger than L2, counting bytes read plus written. Compute: a
large bf16 matmul through torch (cuBLAS). Both timed with ``triton.testing.do_bench`` (L2 flushed, median).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from iotrace.ceilings import achievable
from iotrace.selfcheck.record import Step

if TYPE_CHECKING:
    from iotrace.cards import Card

#: Copy size: 2 GiB is ~40x the largest L2 of any CardBook card (H100/H200: 50 MB), so the copy streams DRAM.
COPY_BYTES = 2 * 2**30
#: Matmul size: 8192³ bf16 is 2·8192³ = 1.1 TFLOP, about 1.1 ms of every SM at an H200's 989 TFLOP/s dense.
MATMUL_SIZE = 8192


def against_table(figures: dict[str, Any], card: Card) -> list[dict[str, Any]]:
    """The two measured ceilings as shares of ``card``'s datasheet, beside the share the cost model divides by
    (:mod:`iotrace.ceilings`): where they part, the table's entry for this architecture is the thing to update."""
    table = achievable(card)
    basis = "stand-in (" + table.measured + ")" if table.stand_in else table.measured
    pairs = [("copy bandwidth (GB/s)", figures["copy_gbps"], card.memory_bandwidth_gbs, table.memory),
             ("bf16 matmul (TFLOP/s)", figures["bf16_tflops"], card.peak_tflops.get("bf16_tensor"), table.tensor)]
    rows = []
    for name, measured, datasheet, share in pairs:
        rows.append({"ceiling": name, "measured": round(measured, 1), "datasheet": datasheet,
                     "share_of_datasheet": round(measured / datasheet, 3) if datasheet else None,
                     "cost_model_share": share, "cost_model_basis": basis})
    if figures.get("matmul_n", MATMUL_SIZE) < MATMUL_SIZE:  # --quick: a smaller product reaches less of the peak
        rows[1]["note"] = f"{figures['matmul_n']}³ (--quick), below the {MATMUL_SIZE}³ the table's share rests on"
    return rows


def measure(step: Step, quick: bool, card: Card) -> Step:
    import torch
    import triton.testing

    size = COPY_BYTES // (4 if quick else 1)
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    n = MATMUL_SIZE // (2 if quick else 1)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm_ms = triton.testing.do_bench(lambda: torch.matmul(a, b), return_mode="median")
    step.figures = {"copy_gbps": 2 * size / copy_ms / 1e6, "copy_bytes": size, "copy_ms": copy_ms,
                    "bf16_tflops": 2 * n**3 / mm_ms / 1e9, "matmul_n": n, "matmul_ms": mm_ms,
                    "method": "triton.testing.do_bench, median; copy counts bytes read + written"}
    step.rows = against_table(step.figures, card)
    return step
