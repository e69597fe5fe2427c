"""``iotrace tour``: the main job on an embedded default, with no GPU needed.

It walks a reader through the CardBook, the six identities on one named card with the numbers
substituted, and one occupancy answer, all from data shipped with iotrace.
"""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule

from iotrace import derivations
from iotrace.cards import card_book, lookup
from iotrace.console import print_cards, print_derivation, print_occupancy
from iotrace.models import model
from iotrace.occupancy import occupancy

__all__ = ["run_tour"]

# The tour's worked examples: a 27B model at 4 bits (a common local-inference case), Llama-3-8B shapes,
# a 4096³ fp16 GEMM (compute-bound) beside a batch-1 GEMV over the same weights (memory-bound).
TOUR_PARAMS = 27e9
TOUR_BITS = 4
GEMM = 4096


def run_tour(console: Console, card_name: str) -> None:
    card = lookup(card_name)
    llama = model("llama-3-8b")

    console.print(Rule("1. The CardBook: named GPUs with sourced specs (`iotrace cards`, `iotrace card NAME`)"))
    print_cards(console, card_book())

    console.print(Rule(f"2. Decode is memory-bound: {TOUR_PARAMS / 1e9:.0f}B parameters at {TOUR_BITS} bits "
                       f"on {card.name}"))
    print_derivation(console, derivations.decode(TOUR_PARAMS, TOUR_BITS / 8, card=card))

    console.print(Rule(f"3. Prefill is compute-bound: {llama.name}, 2048-token prompt"))
    # The best 16-bit peak the card has: tensor cores where it has them (bf16 from Ampere), else plain FP32.
    precision = next(p for p in ("bf16_tensor", "fp16_tensor", "fp32") if p in card.peak_tflops)
    print_derivation(console, derivations.prefill(llama.params, 2048, card=card, precision=precision))

    console.print(Rule(f"4. Long context is a KV tax: {llama.name} at 8192 tokens, fp16"))
    weights = llama.params * 2  # fp16 weights, when the card holds them at all
    print_derivation(console, derivations.kv_cache(llama.layers, llama.kv_heads, llama.head_dim, 8192, 2, card=card,
                                                   weight_bytes=weights if weights < card.memory_bytes else 0.0))

    console.print(Rule(f"5. Roofline: a {GEMM}³ fp16 GEMM and a batch-1 GEMV on {card.name}"))
    gemm_flops = 2.0 * GEMM**3
    gemm_bytes = 2.0 * 3 * GEMM * GEMM  # read A and B, write C, fp16
    gemm_peak = "fp16_tensor" if "fp16_tensor" in card.peak_tflops else "fp32"
    print_derivation(console, derivations.roofline(gemm_flops, gemm_bytes, card=card, precision=gemm_peak))
    gemv_flops = 2.0 * GEMM * GEMM
    gemv_bytes = 2.0 * (GEMM * GEMM + 2 * GEMM)  # the weight matrix dominates
    print_derivation(console, derivations.roofline(gemv_flops, gemv_bytes, card=card, precision=gemm_peak))

    console.print(Rule("6. Speculation is an expected value: α = 0.8, γ = 4, draft at 5% of the target's cost"))
    print_derivation(console, derivations.speculation(0.8, 4, 0.05))

    if card.cc is not None:
        console.print(Rule(f"7. Occupancy is a resource limit: 256 threads, 64 registers, 32 KB shared memory, "
                           f"CC {card.cc}"))
        print_occupancy(console, occupancy(card.sm_limits, 256, 64, 32 * 1024))
    console.print(Rule())
    console.print("Next: `iotrace math --help`, `iotrace occupancy --help`, and the README.")
