"""``iotrace tour``, ``cards``, ``card``, ``math IDENTITY`` and ``occupancy``: the CardBook and the six identities."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from iotrace.argtypes import binary_count, bits, bits_or_zero, si_number
from iotrace.cli.output import (
    OneLineParser,
    add_card,
    add_json,
    add_output,
    answer_format,
    console,
    emit,
    write_answer,
)
from iotrace.errors import InvalidValueError

__all__ = ["OCCUPANCY_WRITES", "register"]

#: What ``occupancy -o FILE`` writes, by extension: the what-if curves as a plotly page (.html) or an image (.png,
#: .svg; kaleido and Chromium), or the answer itself as JSON (with the curves), Markdown or the terminal's text.
OCCUPANCY_WRITES = ("html", "png", "svg", "json", "md", "term")


def register(commands: argparse._SubParsersAction) -> None:
    tour = commands.add_parser("tour", help="a tour that needs no GPU: cards, the identities, an occupancy answer")
    add_card(tour, " (default rtx3090)")
    tour.set_defaults(func=_cmd_tour)

    cards = commands.add_parser("cards", help="list the CardBook")
    add_json(cards)
    cards.set_defaults(func=_cmd_cards)

    card = commands.add_parser("card", help="one card's specifications with sources (no NAME: detect the local GPU)")
    card.add_argument("name", nargs="?", metavar="NAME", help="card name or alias; omitted: $IOTRACE_CARD, then GPU 0")
    add_json(card)
    card.set_defaults(func=_cmd_card)

    math_parser = commands.add_parser("math", help="the six identities, worked with the numbers substituted")
    identities = math_parser.add_subparsers(dest="identity", metavar="IDENTITY", parser_class=OneLineParser)
    identities.required = True

    decode = identities.add_parser("decode", help="1. decode wall: tok/s ≈ B / (N · q)")
    add_card(decode)
    decode.add_argument("--bandwidth-gbs", type=si_number, metavar="GB/s", help="memory bandwidth instead of a card")
    decode.add_argument("--params", type=si_number, metavar="N", help="parameters, e.g. 27e9 or 27B")
    decode.add_argument("--model", metavar="NAME", help="take --params from a known model (e.g. llama-3-8b)")
    weights = decode.add_mutually_exclusive_group()
    weights.add_argument("--bits", type=bits, help="bits per weight (e.g. 4, 8, 16)")
    weights.add_argument("--tokens-per-s", type=si_number, metavar="TOK/S",
                         help="solve for q instead: the bytes per weight this rate needs")
    add_json(decode)
    decode.set_defaults(func=_cmd_decode)

    prefill = identities.add_parser("prefill", help="2. prefill: FLOPs ≈ 2 · N · S; tok/s ≈ peak / (2 · N)")
    add_card(prefill)
    prefill.add_argument("--peak-tflops", type=si_number, metavar="TF", help="peak TFLOP/s instead of a card")
    prefill.add_argument("--precision", default="bf16_tensor", help="card peak to use (default bf16_tensor)")
    prefill.add_argument("--params", type=si_number, metavar="N", help="parameters, e.g. 8e9")
    prefill.add_argument("--model", metavar="NAME", help="take --params from a known model")
    prefill.add_argument("--tokens", type=binary_count, required=True, metavar="S",
                         help="prompt tokens, e.g. 2048 or 2k")
    add_json(prefill)
    prefill.set_defaults(func=_cmd_prefill)

    kv = identities.add_parser("kv", help="3. KV cache: bytes = 2 · L · n_kv · d_h · S · q_kv")
    kv.add_argument("--model", metavar="NAME", help="take layers, KV heads and head dim from a known model")
    kv.add_argument("--layers", type=binary_count, metavar="L")
    kv.add_argument("--kv-heads", type=binary_count, metavar="N_KV")
    kv.add_argument("--head-dim", type=binary_count, metavar="D_H")
    kv.add_argument("--tokens", type=binary_count, required=True, metavar="S", help="context length, e.g. 8192 or 8k")
    kv.add_argument("--bits", type=bits, default=16.0, help="bits per cached value (default 16; int8 is 8)")
    kv.add_argument("--batch", type=binary_count, default=1, help="sequences (default 1)")
    kv.add_argument("--scale-bytes", type=si_number, default=0.0, metavar="B",
                    help="a quantised cache's scale bytes per token, layer and KV head (int8 with fp32 K and V "
                         "scales: 8)")
    add_card(kv, ": also say how much context fits in its memory")
    kv.add_argument("--weight-bits", type=bits_or_zero, metavar="BITS",
                    help="with --card: leave room for --model's weights at this width (default 16, said in the "
                         "output; 0: count the KV cache alone)")
    add_json(kv)
    kv.set_defaults(func=_cmd_kv)

    roof = identities.add_parser("roofline", help="4. roofline: I = FLOPs/bytes; attainable = min(peak, I·B)")
    add_card(roof)
    roof.add_argument("--flops", type=si_number, required=True, help="operations of the kernel, e.g. 1.37e11")
    roof.add_argument("--bytes", type=si_number, required=True, help="bytes to and from device memory")
    roof.add_argument("--precision", default="bf16_tensor", help="card peak to use (default bf16_tensor)")
    roof.add_argument("--peak-tflops", type=si_number, metavar="TF", help="peak instead of a card")
    roof.add_argument("--bandwidth-gbs", type=si_number, metavar="GB/s", help="bandwidth instead of a card")
    add_json(roof)
    roof.set_defaults(func=_cmd_roofline)

    spec = identities.add_parser("spec", help="5. speculation: E[tokens] = (1 − α^(γ+1)) / (1 − α)")
    spec.add_argument("--alpha", type=si_number, help="acceptance rate per draft token, 0..1")
    spec.add_argument("--gamma", type=binary_count, help="draft tokens per step")
    spec.add_argument("--bench", type=Path, metavar="FILE",
                      help="an `iotrace bench --spec --json` file: work the identity with each run's measured α, "
                           "γ and c (--gamma picks one γ)")
    spec.add_argument("--draft-cost", type=si_number, metavar="C",
                      help="draft step time over target step time: also give the speedup")
    add_json(spec)
    spec.set_defaults(func=_cmd_spec)

    for parent, name in ((identities, "occupancy"), (commands, "occupancy")):
        occ = parent.add_parser(name, help="6. occupancy: active warps / max warps, with every limit")
        _add_occupancy_args(occ)


def _add_occupancy_args(occ: argparse.ArgumentParser) -> None:
    target = occ.add_mutually_exclusive_group()
    target.add_argument("--cc", help="compute capability, e.g. 8.6, 90, sm_120")
    target.add_argument("--card", metavar="NAME",
                        help="a CardBook card; its compute capability is used (neither: $IOTRACE_CARD, then GPU 0)")
    target.add_argument("--gfx", help="an AMD gfx target (gfx908, gfx90a, gfx942, gfx950, gfx1100, gfx1201): "
                                      "waves per SIMD and per CU instead")
    occ.add_argument("--threads", type=binary_count, required=True,
                     help="threads per block (1..1024); with --gfx, work-items per workgroup")
    occ.add_argument("--regs", type=binary_count, required=True,
                     help="registers per thread (0..255); with --gfx, arch VGPRs per work-item (rocprof Arch_VGPR)")
    amd = occ.add_argument_group("AMD (--gfx, or a card with a gfx target)")
    amd.add_argument("--accum-vgpr", type=binary_count, default=0, help="accumulation VGPRs (rocprof Accum_VGPR)")
    amd.add_argument("--sgpr", type=binary_count, default=0, help="SGPRs per wave (rocprof SGPR)")
    amd.add_argument("--lds", type=binary_count, default=0, metavar="BYTES",
                     help="LDS per workgroup (rocprof LDS_Per_Workgroup)")
    amd.add_argument("--wave-size", type=binary_count, help="32 or 64 (default: the target's)")
    occ.add_argument("--smem-static", type=binary_count, default=0, metavar="BYTES",
                     help="static shared memory per block")
    occ.add_argument("--smem-dynamic", type=binary_count, default=0, metavar="BYTES",
                     help="dynamic shared memory per block")
    occ.add_argument("--smem-reserved", type=binary_count, metavar="BYTES",
                     help="driver-reserved shared memory per block (default: the CC's, 1 KB from 8.0)")
    carve = occ.add_mutually_exclusive_group()
    carve.add_argument("--carveout-pct", type=binary_count, metavar="PCT",
                       help="preferred carveout, 0..100 (-1 default)")
    carve.add_argument("--smem-config", type=binary_count, metavar="BYTES",
                       help="shared memory per SM the driver configured (ncu: launch__shared_mem_config_size)")
    occ.add_argument("--barriers", type=binary_count, default=1, help="block barriers the kernel uses (default 1)")
    occ.add_argument("--no-optin", action="store_true",
                     help="the kernel did not opt in to more than 48 KB of shared memory per block")
    occ.add_argument("--curves", action="store_true", help="include the what-if curves (with --json)")
    add_output(occ, OCCUPANCY_WRITES, "the what-if curves (.html: a plotly page; .png/.svg: an image) or the answer "
                                      "(.json with the curves, .md, .txt), besides printing it,")
    add_json(occ)
    occ.set_defaults(func=_cmd_occupancy)


def _card_or_none(name: str | None, needed: bool = True):
    """The card named by --card; without one, $IOTRACE_CARD or the local GPU when the answer needs a card."""
    from iotrace.cards import ENV_CARD, detect, lookup

    if name is not None:
        return lookup(name)
    if os.environ.get(ENV_CARD) or needed:
        return detect()
    return None


def _model_field(args: argparse.Namespace, field: str, given: Any) -> Any:
    if given is not None:
        return given
    if getattr(args, "model", None):
        from iotrace.model_shapes import model

        return getattr(model(args.model), field)
    flag = "--" + field.replace("_", "-")
    raise InvalidValueError(f"{flag} is missing", f"give {flag} or --model NAME (e.g. --model llama-3-8b)")


def _cmd_cards(args: argparse.Namespace) -> None:
    from iotrace.cards import card_book
    from iotrace.render.console import print_cards

    book = card_book()
    emit(args, [c.to_dict() for c in book], lambda: print_cards(console(), book))


def _cmd_card(args: argparse.Namespace) -> None:
    from iotrace.cards import ENV_CARD, detect
    from iotrace.errors import NoGpuError
    from iotrace.render.console import print_card

    try:
        found = detect(args.name)
    except NoGpuError as exc:  # detect() advises --card NAME, a flag this command does not take: advise its own form
        raise NoGpuError(exc.problem, f"give a card name: iotrace card h100, or set {ENV_CARD} "
                                      "(see `iotrace cards`)") from None
    emit(args, found.to_dict(), lambda: print_card(console(), found))


def _show(args: argparse.Namespace, derivation: Any) -> None:
    from iotrace.render.console import print_derivation

    emit(args, derivation.to_dict(), lambda: print_derivation(console(), derivation))


def _cmd_decode(args: argparse.Namespace) -> None:
    from iotrace.derivations import decode

    params = _model_field(args, "params", args.params)
    _show(args, decode(params, None if args.bits is None else args.bits / 8,
                       card=_card_or_none(args.card, needed=args.bandwidth_gbs is None),
                       bandwidth_gbs=args.bandwidth_gbs, tokens_per_s=args.tokens_per_s))


def _cmd_prefill(args: argparse.Namespace) -> None:
    from iotrace.derivations import prefill

    params = _model_field(args, "params", args.params)
    _show(args, prefill(params, args.tokens, card=_card_or_none(args.card, needed=args.peak_tflops is None),
                        precision=args.precision,
                        peak_tflops=args.peak_tflops))


#: The weights' width when --weight-bits is not given: a model served unquantised runs at 16 bits (vLLM's default
#: --dtype auto: FP16 for FP32 and FP16 checkpoints, BF16 for BF16 ones; docs.vllm.ai, engine arguments).
DEFAULT_WEIGHT_BITS = 16.0


def _kv_weights(args: argparse.Namespace, card: Any) -> Any:
    """The weights ``math kv`` leaves room for beside the cache, as a quantity that says how they were sized: the
    model's parameters at --weight-bits, at 16 bits when not given (said so), or not counted (--weight-bits 0, or
    no --model to size them)."""
    from iotrace.derivations import Quantity, num

    if args.weight_bits is not None and (card is None or (args.model is None and args.weight_bits > 0)):
        raise InvalidValueError("--weight-bits needs --model (for the parameter count) and --card (for memory)",
                                "e.g. --model llama-3-8b --card h200 --weight-bits 16 (0: the KV cache alone)")
    if card is None:
        return None
    if args.weight_bits == 0:
        return Quantity("W", 0.0, "B", "weights not counted (--weight-bits 0): 'fits' is the KV cache alone", "given")
    if args.model is None:
        return Quantity("W", 0.0, "B", "weights not counted (no --model to size them): 'fits' is the KV cache alone",
                        "given")
    from iotrace.model_shapes import model

    shape = model(args.model)
    width = DEFAULT_WEIGHT_BITS if args.weight_bits is None else args.weight_bits
    meaning = f"{shape.key}'s weights, {num(shape.params)} parameters × {num(width)} bits / 8"
    if args.weight_bits is None:
        return Quantity("W", shape.params * width / 8, "B", f"{meaning} ({num(width)} bits assumed: no --weight-bits "
                        "given; --weight-bits 0 counts the KV cache alone)", "assumed")
    return Quantity("W", shape.params * width / 8, "B", meaning, "given")


def _cmd_kv(args: argparse.Namespace) -> None:
    from iotrace.derivations import kv_cache

    layers = _model_field(args, "layers", args.layers)
    kv_heads = _model_field(args, "kv_heads", args.kv_heads)
    head_dim = _model_field(args, "head_dim", args.head_dim)
    card = _card_or_none(args.card, needed=False)
    _show(args, kv_cache(layers, kv_heads, head_dim, args.tokens, args.bits / 8, batch=args.batch, card=card,
                         weights=_kv_weights(args, card), scale_bytes=args.scale_bytes))


def _cmd_roofline(args: argparse.Namespace) -> None:
    from iotrace.derivations import roofline

    needed = args.peak_tflops is None or args.bandwidth_gbs is None
    _show(args, roofline(args.flops, args.bytes, card=_card_or_none(args.card, needed), precision=args.precision,
                         peak_tflops=args.peak_tflops, bandwidth_gbs=args.bandwidth_gbs))


def _cmd_spec(args: argparse.Namespace) -> None:
    from iotrace.derivations import speculation

    if args.bench is not None:
        _cmd_spec_bench(args)
        return
    if args.alpha is None or args.gamma is None:
        raise InvalidValueError("iotrace math spec needs --alpha and --gamma, or --bench FILE",
                                "e.g. iotrace math spec --alpha 0.8 --gamma 4")
    _show(args, speculation(args.alpha, args.gamma, args.draft_cost))


def _cmd_spec_bench(args: argparse.Namespace) -> None:
    import json

    from iotrace.derivations import speculation_measured
    from iotrace.render.console import print_derivation

    path = args.bench
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        prompts = data["speculation"]["prompts"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InvalidValueError(f"{path} is not an `iotrace bench --spec --json` file ({str(exc)[:80]})",
                                "run iotrace bench --spec ngram --json > FILE") from None
    if args.alpha is not None or args.draft_cost is not None:
        raise InvalidValueError("--bench takes α and c from the file", "drop --alpha and --draft-cost")
    worked = [speculation_measured(run, f"{prompt['key']} / {draft['draft']} / γ = {run['gamma']}", path.name)
              for prompt in prompts for draft in prompt["drafts"] for run in draft["runs"]
              if (args.gamma is None or run["gamma"] == args.gamma)
              and (run.get("full_alpha") is not None or run.get("alpha") is not None)]
    if not worked:
        raise InvalidValueError(f"{path}: no run{f' at γ = {args.gamma}' if args.gamma else ''} measured an α",
                                "pick a γ the file ran, or a draft that proposed tokens")
    if getattr(args, "json", False):
        emit(args, [d.to_dict() for d in worked], lambda: None)
        return
    for derivation in worked:
        print_derivation(console(), derivation)


def _cmd_occupancy(args: argparse.Namespace) -> None:
    from iotrace.occupancy import curve_block_size, curve_registers, curve_shared_mem, occupancy
    from iotrace.render.console import print_occupancy

    # The file's format, from its extension, before any work: a name it cannot write is refused first.
    fmt = answer_format("iotrace occupancy", args.output, OCCUPANCY_WRITES)
    gfx = args.gfx or (getattr(_card_or_none(args.card), "gfx", None) if args.card else None)
    if gfx:
        _amd_occupancy(args, gfx)
        return
    cc = args.cc if args.cc is not None else _card_or_none(args.card).sm_limits
    result = occupancy(cc, args.threads, args.regs, args.smem_static, args.smem_dynamic,
                       smem_reserved=args.smem_reserved, carveout_pct=args.carveout_pct,
                       smem_config=args.smem_config, barriers=args.barriers, smem_optin=not args.no_optin)
    data = result.to_dict()

    def curves() -> dict[str, list[dict[str, Any]]]:  # only for --curves or a .json file
        return {name: [vars(p) for p in build(result)] for name, build in
                (("block_size", curve_block_size), ("registers", curve_registers), ("shared_mem", curve_shared_mem))}

    if args.curves:
        data["curves"] = curves()
    if args.output is not None and fmt is not None:
        from iotrace.render.occupancy_figure import occupancy_figure, occupancy_markdown

        write_answer(args.output, fmt, figure=lambda: occupancy_figure(result),
                     data=lambda: data if "curves" in data else {**data, "curves": curves()},
                     draw=lambda c: print_occupancy(c, result), markdown=lambda: occupancy_markdown(result))
    emit(args, data, lambda: print_occupancy(console(), result))
    if args.output is not None and not args.json:
        print(f"wrote {args.output}")


def _amd_occupancy(args: argparse.Namespace, gfx: str) -> None:
    """``occupancy --gfx``: the AMD answer (waves per SIMD and per CU), printed like the NVIDIA one or as JSON."""
    from rich.markup import escape

    from iotrace.occupancy_amd import AMD_LIMIT_NAMES, amd_occupancy

    if args.output is not None or args.curves:
        raise InvalidValueError("--output and --curves are for NVIDIA targets only", "drop them with --gfx")
    r = amd_occupancy(gfx, args.threads, args.regs, args.accum_vgpr, args.sgpr, args.lds, args.wave_size)

    def draw() -> None:
        out = console()
        out.print("[bold]occupancy (identity 6)[/bold]   occ = active waves / max waves   [dim](modelled)[/dim]")
        out.print(f"  {r.gfx} ({r.arch}): {r.workgroup_size} work-items ({r.waves_per_workgroup} wave{r.wave_size}s) "
                  f"per workgroup, {r.arch_vgpr} arch + {r.accum_vgpr} accum VGPRs, {r.sgpr} SGPRs, "
                  f"{r.lds_per_workgroup} B LDS ({r.lds_allocated} B allocated)")
        for name in AMD_LIMIT_NAMES:
            mark = "◀ binds" if name in r.limiters else ("not used" if name in r.unlimited else "")
            out.print(f"  {name:<11} {r.limits[name]:>4} workgroups/{r.unit}  {mark}")
        for step in r.steps:
            out.print(f"  → {escape(step)}")
        out.print(f"  [bold green]occupancy = {r.waves_per_simd:.4g} waves per SIMD = {r.occupancy_pct:.4g} %"
                  f"[/bold green]   limited by {', '.join(r.limiters) or '—'}")
        if r.reason:
            out.print(f"  [bold red]cannot launch:[/bold red] {escape(r.reason)}")

    emit(args, r.to_dict(), draw)


def _cmd_tour(args: argparse.Namespace) -> None:
    from iotrace.tour import run_tour

    run_tour(console(), args.card or "rtx3090")

