"""``iotrace tour``: the main job on an embedded default, with no GPU needed.

It walks a reader through the CardBook, the six identities on one named card with the numbers
substituted, one occupancy answer, all from data shipped with iotrace, and a static tune: a slice of the
GEMM's space really compiled for the card's target, pruned, ranked by the cost model, its winner checked
under the Triton interpreter; last, the pinned model (SmolLM2-135M) decoded by the kernels' torch references on the
CPU (iotrace's Triton kernels on a GPU), its figures beside the card's walls.
"""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule

from iotrace import derivations
from iotrace.cards import Card, card_book, lookup
from iotrace.errors import IotraceError
from iotrace.model_shapes import model
from iotrace.occupancy import occupancy
from iotrace.render.console import print_cards, print_derivation, print_occupancy

__all__ = ["run_tour"]

# The tour's worked examples: a 27B model at 4 bits (a common local-inference case), Llama-3-8B shapes,
# a 4096³ fp16 GEMM (compute-bound) beside a batch-1 GEMV over the same weights (memory-bound).
TOUR_PARAMS = 27e9
TOUR_BITS = 4
GEMM = 4096
#: The tour's tune: six GEMM configs (128-row tiles, BLOCK_K 64, 4 warps; two tile widths by three pipeline depths)
#: straddle the shared-memory limits of every CC from 8.0 on, so pruning shows; six compiles take seconds the first
#: time and come from the compile cache after.
TOUR_TUNE_FIX = {"BLOCK_M": 128, "BLOCK_N": (128, 256), "BLOCK_K": 64, "num_warps": 4, "num_stages": (3, 4, 5),
                 "USE_TMA": False}


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
    fp16 = llama.params * 2  # fp16 weights, when the card holds them at all; said either way
    if fp16 < card.memory_bytes:
        weights = derivations.Quantity("W", fp16, "B", f"{llama.key}'s weights, its parameters × 16 bits / 8",
                                       "models.toml")
    else:
        weights = derivations.Quantity("W", 0.0, "B", f"weights not counted: {llama.key}'s {fp16 / 1e9:.1f} GB at 16 "
                                       f"bits exceed {card.name}'s memory, so 'fits' is the KV cache alone", "given")
    print_derivation(console, derivations.kv_cache(llama.layers, llama.kv_heads, llama.head_dim, 8192, 2, card=card,
                                                   weights=weights))

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
    console.print(Rule(f"8. Autotuning starts without a GPU: a {GEMM}³ fp16 GEMM slice compiled for {card.name} "
                       "(`iotrace tune`)"))
    tour_tune(console, card)
    console.print(Rule(f"9. A real model made of these kernels: SmolLM2-135M decoding on this machine, walls on "
                       f"{card.name} (`iotrace bench`)"))
    tour_bench(console, card)
    console.print(Rule())
    console.print("Next: `iotrace math --help`, `iotrace occupancy --help`, `iotrace tune --help`, and docs/index.md.")


#: The tour's bench: the pinned model on the shipped prompt, few tokens and one repetition (seconds on a CPU).
TOUR_BENCH = {"gen_tokens": 16, "reps": 1}


def tour_bench(console: Console, card: Card) -> None:
    """A bench of the pinned model (the torch path on a CPU), or one line saying why there is none."""
    from iotrace.model.measure import BenchRequest, run_bench
    from iotrace.model.prompts import default_prompt
    from iotrace.render.bench import print_bench

    request = BenchRequest(model="smollm2-135m", prompt=default_prompt(), **TOUR_BENCH)
    try:
        with console.status("bench: loading SmolLM2-135M") as status:
            result = run_bench(request, card, progress=lambda text: status.update(f"bench: {text}"))
    except IotraceError as exc:
        console.print(f"No bench: {exc}")
        return
    print_bench(console, result.to_dict())


def tour_tune(console: Console, card: Card) -> None:
    """A static tune of :data:`TOUR_TUNE_FIX` on ``card``, or one line saying why this card has none."""
    from iotrace.autotune.render import BarProgress, print_tune
    from iotrace.autotune.tuner import TuneOptions, tune
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins import kernel

    spec = kernel("gemm")
    shape = spec.check_shape(spec.presets["square-4096"])
    try:
        result = tune(KernelCall(spec, shape, "fp16", card),
                      TuneOptions(mode="interpreter", fix=TOUR_TUNE_FIX, verify_top=1),
                      BarProgress(console) if console.is_terminal else None)
    except IotraceError as exc:  # a card iotrace cannot compile for (no CUDA CC, no fp16 tensor cores): say so
        console.print(f"No tune on {card.name}: {exc}")
        return
    print_tune(console, result)
