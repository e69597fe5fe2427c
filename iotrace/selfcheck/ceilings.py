"""Step 1's measured half: the two ceilings every percentage in the run is taken against.

Bandwidth: a device-to-device copy of a buffer far larger than L2, counting bytes read plus written. Compute: a
large bf16 matmul through torch (cuBLAS). Both timed with ``triton.testing.do_bench`` (L2 flushed, median).
"""

from __future__ import annotations

from iotrace.selfcheck.record import Step

#: Copy size: 2 GiB is ~40x the largest L2 of any CardBook card (H100/H200: 50 MB), so the copy streams DRAM.
COPY_BYTES = 2 * 2**30
#: Matmul size: 8192³ bf16 is 2·8192³ = 1.1 TFLOP, about 1.1 ms of every SM at an H200's 989 TFLOP/s dense.
MATMUL_SIZE = 8192


def measure(step: Step, quick: bool) -> Step:
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
    step.rows = [{"ceiling": "copy bandwidth (GB/s)", "measured": round(step.figures["copy_gbps"], 1)},
                 {"ceiling": "bf16 matmul (TFLOP/s)", "measured": round(step.figures["bf16_tflops"], 1)}]
    return step
