"""The ``iotrace`` command line.

Every command has ``--help``; data commands take ``--json``. A user error (a bad value, an unknown card,
a missing file) prints one line on stderr and exits with code 2; nothing a user can cause ends in a
traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from iotrace.errors import (
    InvalidValueError,
    IotraceError,
    KernelWrongError,
    SelfcheckFailedError,
    StaleNotesError,
)

__all__ = ["EXIT_USAGE", "build_parser", "main"]

#: Exit code for every error the user can cause (argparse uses the same).
EXIT_USAGE = 2

# ---------------------------------------------------------------------------------------------------------------
# Argument types: each raises ArgumentTypeError with the offending text, which the parser turns into one line.
# ---------------------------------------------------------------------------------------------------------------

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)$")


def number(text: str) -> float:
    """A real number: ``27e9``, ``27B``, ``8.03b``, ``936.2``, ``70M`` (k, M, B/G, T are powers of 1000).

    Ranges are checked where the value is used, so the message can say what the value means.
    """
    match = _NUMBER.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number (e.g. 27e9, 27B, 0.5)")
    value = float(match.group(1)) * _SI[match.group(2)]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


#: The largest whole number a flag takes: beyond 2^53 a float cannot hold every integer.
MAX_COUNT = 2**53


def count(text: str) -> int:
    """A whole number: ``8192``, or ``8k`` = 8192 (k counts tokens and bytes in 1024s here)."""
    cleaned = text.strip().lower()
    scale = 1024 if cleaned.endswith("k") else 1
    body = cleaned[:-1] if scale == 1024 else cleaned
    if not re.fullmatch(r"-?[0-9]{1,20}", body):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number (e.g. 256, 8k)")
    value = int(body) * scale
    if abs(value) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r} is larger than any real count (at most 2^53)")
    return value


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number as :func:`count` reads it, of at least ``minimum``."""
    def whole(text: str) -> int:
        value = count(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be {minimum} or more")
        return value

    return whole


def above_zero(text: str) -> float:
    """An argparse type: a finite number above 0 (a time, a ratio)."""
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number above 0, e.g. 0.05")
    return value


def bits(text: str) -> float:
    value = number(text)
    if value <= 0 or value > 64:
        raise argparse.ArgumentTypeError(f"{text!r} bits per value is outside 0 < bits <= 64")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``iotrace math decode: error: ... (see --help)`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_card(parser: argparse.ArgumentParser, required_hint: str = "") -> None:
    parser.add_argument("--card", metavar="NAME",
                        help=f"a CardBook card (e.g. rtx3090, h100; see `iotrace cards`){required_hint}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="iotrace", description="Kernel runs and profiler traces as FLOPs, bytes and occupancy "
                                                 "on a named card.")
    parser.add_argument("--version", action="version", version=f"iotrace {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    tour = commands.add_parser("tour", help="a tour that needs no GPU: cards, the identities, an occupancy answer")
    _add_card(tour, " (default rtx3090)")
    tour.set_defaults(func=_cmd_tour)

    cards = commands.add_parser("cards", help="list the CardBook")
    _add_json(cards)
    cards.set_defaults(func=_cmd_cards)

    card = commands.add_parser("card", help="one card's specifications with sources (no NAME: detect the local GPU)")
    card.add_argument("name", nargs="?", metavar="NAME", help="card name or alias; omitted: $IOTRACE_CARD, then GPU 0")
    _add_json(card)
    card.set_defaults(func=_cmd_card)

    math_parser = commands.add_parser("math", help="the six identities, worked with the numbers substituted")
    identities = math_parser.add_subparsers(dest="identity", metavar="IDENTITY", parser_class=_Parser)
    identities.required = True

    decode = identities.add_parser("decode", help="1. decode wall: tok/s ≈ B / (N · q)")
    _add_card(decode)
    decode.add_argument("--bandwidth-gbs", type=number, metavar="GB/s", help="memory bandwidth instead of a card")
    decode.add_argument("--params", type=number, metavar="N", help="parameters, e.g. 27e9 or 27B")
    decode.add_argument("--model", metavar="NAME", help="take --params from a known model (e.g. llama-3-8b)")
    weights = decode.add_mutually_exclusive_group()
    weights.add_argument("--bits", type=bits, help="bits per weight (e.g. 4, 8, 16)")
    weights.add_argument("--tokens-per-s", type=number, metavar="TOK/S",
                         help="solve for q instead: the bytes per weight this rate needs")
    _add_json(decode)
    decode.set_defaults(func=_cmd_decode)

    prefill = identities.add_parser("prefill", help="2. prefill: FLOPs ≈ 2 · N · S; tok/s ≈ peak / (2 · N)")
    _add_card(prefill)
    prefill.add_argument("--peak-tflops", type=number, metavar="TF", help="peak TFLOP/s instead of a card")
    prefill.add_argument("--precision", default="bf16_tensor", help="card peak to use (default bf16_tensor)")
    prefill.add_argument("--params", type=number, metavar="N", help="parameters, e.g. 8e9")
    prefill.add_argument("--model", metavar="NAME", help="take --params from a known model")
    prefill.add_argument("--tokens", type=count, required=True, metavar="S", help="prompt tokens, e.g. 2048 or 2k")
    _add_json(prefill)
    prefill.set_defaults(func=_cmd_prefill)

    kv = identities.add_parser("kv", help="3. KV cache: bytes = 2 · L · n_kv · d_h · S · q_kv")
    kv.add_argument("--model", metavar="NAME", help="take layers, KV heads and head dim from a known model")
    kv.add_argument("--layers", type=count, metavar="L")
    kv.add_argument("--kv-heads", type=count, metavar="N_KV")
    kv.add_argument("--head-dim", type=count, metavar="D_H")
    kv.add_argument("--tokens", type=count, required=True, metavar="S", help="context length, e.g. 8192 or 8k")
    kv.add_argument("--bits", type=bits, default=16.0, help="bits per cached value (default 16; int8 is 8)")
    kv.add_argument("--batch", type=count, default=1, help="sequences (default 1)")
    kv.add_argument("--scale-bytes", type=number, default=0.0, metavar="B",
                    help="a quantised cache's scale bytes per token, layer and KV head (int8 with fp32 K and V "
                         "scales: 8)")
    _add_card(kv, ": also say how much context fits in its memory")
    kv.add_argument("--weight-bits", type=bits,
                    help="with --card and --model: leave room for the weights at this width")
    _add_json(kv)
    kv.set_defaults(func=_cmd_kv)

    roof = identities.add_parser("roofline", help="4. roofline: I = FLOPs/bytes; attainable = min(peak, I·B)")
    _add_card(roof)
    roof.add_argument("--flops", type=number, required=True, help="operations of the kernel, e.g. 1.37e11")
    roof.add_argument("--bytes", type=number, required=True, help="bytes to and from device memory")
    roof.add_argument("--precision", default="bf16_tensor", help="card peak to use (default bf16_tensor)")
    roof.add_argument("--peak-tflops", type=number, metavar="TF", help="peak instead of a card")
    roof.add_argument("--bandwidth-gbs", type=number, metavar="GB/s", help="bandwidth instead of a card")
    _add_json(roof)
    roof.set_defaults(func=_cmd_roofline)

    spec = identities.add_parser("spec", help="5. speculation: E[tokens] = (1 − α^(γ+1)) / (1 − α)")
    spec.add_argument("--alpha", type=number, required=True, help="acceptance rate per draft token, 0..1")
    spec.add_argument("--gamma", type=count, required=True, help="draft tokens per step")
    spec.add_argument("--draft-cost", type=number, metavar="C",
                      help="draft step time over target step time: also give the speedup")
    _add_json(spec)
    spec.set_defaults(func=_cmd_spec)

    for parent, name in ((identities, "occupancy"), (commands, "occupancy")):
        occ = parent.add_parser(name, help="6. occupancy: active warps / max warps, with every limit")
        _add_occupancy_args(occ)

    kernels = commands.add_parser("kernels", help="list the installed kernel plugins, their presets and spaces")
    _add_card(kernels, " for the space sizes (default h100)")
    _add_json(kernels)
    kernels.set_defaults(func=_cmd_kernels)

    run = commands.add_parser("run", help="run a kernel: check it, cost it, compile it for a card, time it on a GPU")
    run.add_argument("kernel", metavar="KERNEL", help="a kernel name (see `iotrace kernels`)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--preset", metavar="NAME", help="a named shape from a real model (see `iotrace kernels`)")
    where.add_argument("--shape", type=_mapping, metavar="K=V,...", help="a free shape, e.g. M=4096,N=4096,K=4096")
    run.add_argument("--dtype", help="input dtype (default: the kernel's first, e.g. fp16)")
    run.add_argument("--config", type=_mapping, metavar="K=V,...",
                     help="tuning parameters over the card's default, e.g. BLOCK_M=64,num_warps=4")
    run.add_argument("--backend", default="triton", help="triton (default) or cuda where the kernel has it")
    _add_card(run, " (default: $IOTRACE_CARD, then the local GPU)")
    run.add_argument("--seed", type=count, help="seed of the random inputs (default: fresh each run)")
    run.add_argument("--no-check", action="store_true", help="skip the comparison with the reference")
    _add_json(run)
    from iotrace.cli import profile as profile_command

    profile_command.add_arguments(run)  # --nsys | --ncu | --cupti and their options
    run.set_defaults(func=_cmd_run)

    info = commands.add_parser("info", help="what a profiler export holds: format, devices and cards, counts, "
                                            "top kernels (ncu-rep, ncu/nvprof CSV, nsys sqlite/nsys-rep, Kineto)")
    info.add_argument("trace", type=Path, metavar="TRACE", help="the export; its format is found from its content")
    info.add_argument("--top", type=count, default=10, help="how many kernels to list (default 10)")
    _add_json(info)
    info.set_defaults(func=_cmd_info)

    check = commands.add_parser("selfcheck", help="prove the kernels, tuner and profiler path on this GPU (or, with "
                                                   "--cpu, the same steps at tiny sizes); writes results.md/json")
    check.add_argument("out", type=Path, metavar="OUT", help="folder for results.md, results.json and the captures")
    check.add_argument("--cpu", action="store_true", help="no GPU: interpreter backend, static tuning, no profilers")
    check.add_argument("--quick", action="store_true", help="one preset per kernel and smaller ceiling probes")
    _add_card(check, " (default: the local GPU; h100 with --cpu)")
    check.add_argument("--budget", type=number, default=480.0, metavar="SECONDS",
                       help="time budget; steps past it are recorded as not run (default 480)")
    _add_json(check)
    check.set_defaults(func=_cmd_selfcheck)

    note = commands.add_parser("note", help="write an annotated-trace note (Markdown + figures) from a profiler export")
    note.add_argument("trace", type=Path, metavar="TRACE", help="the export; its format is found from its content")
    note.add_argument("--title", required=True, help="the note's title")
    note.add_argument("-o", "--output", type=Path, required=True, metavar="NOTE.md",
                      help="where to write it; figures go to img/ beside it; annotations already there are kept")
    note.add_argument("--kernel", metavar="REGEX", help="only kernels whose name matches")
    _add_card(note, " (default: the file's device)")
    note.add_argument("--no-images", action="store_true", help="no PNG figures (they need kaleido and Chromium)")
    note.set_defaults(func=_cmd_note)

    notes = commands.add_parser("notes", help="the published annotated-trace notes in notes/: rebuild them, or check "
                                              "that none is stale")
    notes_actions = notes.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    notes_actions.required = True
    for action, text in (("rebuild", "rewrite the notes (and their images), keeping the human annotations"),
                         ("check", "exit 1 when a note's numbers differ from what the code computes now")):
        sub = notes_actions.add_parser(action, help=text)
        sub.add_argument("names", nargs="*", metavar="NAME", help="only these notes (default: all)")
        sub.add_argument("--dir", type=Path, default=Path("notes"), help="the notes folder (default notes/)")
        if action == "rebuild":
            sub.add_argument("--no-images", action="store_true", help="leave the PNG figures as they are")
        _add_json(sub)
        sub.set_defaults(func=_cmd_notes)

    # Commands whose flags live beside their implementation (each module: add_arguments(parser), main(args)).
    from iotrace.cli import report as report_command
    from iotrace.cli import tune as tune_command

    report = commands.add_parser("report", help="warp stalls, roofline, occupancy and timeline of a profiler export, "
                                                "with findings (terminal, md, html, png, json)")
    report_command.add_report_arguments(report)
    report.set_defaults(func=report_command.report_main)
    diff = commands.add_parser("diff", help="per-kernel deltas of two exports (before/after): time, stalls, bytes, "
                                            "occupancy")
    report_command.add_diff_arguments(diff)
    diff.set_defaults(func=report_command.diff_main)
    tune = commands.add_parser("tune", help="autotune a kernel for a card: static pruning from compiled resources, "
                                            "verified measurements on a GPU, cached")
    tune_command.add_arguments(tune)
    tune.set_defaults(func=tune_command.main)
    return parser


def _mapping(text: str) -> dict[str, int | bool]:
    """``K=V,K=V`` with integer values (``true``/``false`` for switches): a shape or a config."""
    out: dict[str, int | bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE (e.g. M=4096,N=4096)")
        if key.strip() in out:
            raise argparse.ArgumentTypeError(f"{key.strip()} is given twice in {text!r}")
        value = value.strip().lower()
        if value in ("true", "false"):
            out[key.strip()] = value == "true"
        else:
            try:
                out[key.strip()] = count(value)
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(f"{key.strip()}={value!r} is not a whole number") from None
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing (e.g. M=4096,N=4096)")
    return out


def _add_occupancy_args(occ: argparse.ArgumentParser) -> None:
    target = occ.add_mutually_exclusive_group()
    target.add_argument("--cc", help="compute capability, e.g. 8.6, 90, sm_120")
    target.add_argument("--card", metavar="NAME",
                        help="a CardBook card; its compute capability is used (neither: $IOTRACE_CARD, then GPU 0)")
    occ.add_argument("--threads", type=count, required=True, help="threads per block (1..1024)")
    occ.add_argument("--regs", type=count, required=True, help="registers per thread (0..255)")
    occ.add_argument("--smem-static", type=count, default=0, metavar="BYTES", help="static shared memory per block")
    occ.add_argument("--smem-dynamic", type=count, default=0, metavar="BYTES", help="dynamic shared memory per block")
    occ.add_argument("--smem-reserved", type=count, metavar="BYTES",
                     help="driver-reserved shared memory per block (default: the CC's, 1 KB from 8.0)")
    carve = occ.add_mutually_exclusive_group()
    carve.add_argument("--carveout-pct", type=count, metavar="PCT", help="preferred carveout, 0..100 (-1 default)")
    carve.add_argument("--smem-config", type=count, metavar="BYTES",
                       help="shared memory per SM the driver configured (ncu: launch__shared_mem_config_size)")
    occ.add_argument("--barriers", type=count, default=1, help="block barriers the kernel uses (default 1)")
    occ.add_argument("--no-optin", action="store_true",
                     help="the kernel did not opt in to more than 48 KB of shared memory per block")
    occ.add_argument("--curves", action="store_true", help="include the what-if curves (with --json)")
    occ.add_argument("-o", "--output", type=Path, metavar="FILE.html", help="write the what-if curves as a plotly page")
    _add_json(occ)
    occ.set_defaults(func=_cmd_occupancy)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iotrace")
    except PackageNotFoundError:
        return "unknown (not installed)"


# ---------------------------------------------------------------------------------------------------------------
# Commands: each returns a JSON-able object, or None when it has printed for a person already.
# ---------------------------------------------------------------------------------------------------------------


def _console():
    from iotrace.render.console import make_console

    return make_console()


def _emit(args: argparse.Namespace, data: Any, draw: Callable[[], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(_finite_json(data), indent=2, default=_json_default, allow_nan=False))
    else:
        draw()


def _finite_json(value: Any) -> Any:
    """JSON has no NaN or infinity: a number that is not finite is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


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
    _emit(args, [c.to_dict() for c in book], lambda: print_cards(_console(), book))


def _cmd_card(args: argparse.Namespace) -> None:
    from iotrace.cards import detect
    from iotrace.render.console import print_card

    found = detect(args.name)
    _emit(args, found.to_dict(), lambda: print_card(_console(), found))


def _show(args: argparse.Namespace, derivation: Any) -> None:
    from iotrace.render.console import print_derivation

    _emit(args, derivation.to_dict(), lambda: print_derivation(_console(), derivation))


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


def _cmd_kv(args: argparse.Namespace) -> None:
    from iotrace.derivations import kv_cache

    layers = _model_field(args, "layers", args.layers)
    kv_heads = _model_field(args, "kv_heads", args.kv_heads)
    head_dim = _model_field(args, "head_dim", args.head_dim)
    weight_bytes = 0.0
    if args.weight_bits is not None:
        if args.model is None or args.card is None:
            raise InvalidValueError("--weight-bits needs --model (for the parameter count) and --card (for memory)",
                                    "e.g. --model llama-3-8b --card h200 --weight-bits 16")
        weight_bytes = _model_field(args, "params", None) * args.weight_bits / 8
    _show(args, kv_cache(layers, kv_heads, head_dim, args.tokens, args.bits / 8, batch=args.batch,
                         card=_card_or_none(args.card, needed=False), weight_bytes=weight_bytes,
                         scale_bytes=args.scale_bytes))


def _cmd_roofline(args: argparse.Namespace) -> None:
    from iotrace.derivations import roofline

    needed = args.peak_tflops is None or args.bandwidth_gbs is None
    _show(args, roofline(args.flops, args.bytes, card=_card_or_none(args.card, needed), precision=args.precision,
                         peak_tflops=args.peak_tflops, bandwidth_gbs=args.bandwidth_gbs))


def _cmd_spec(args: argparse.Namespace) -> None:
    from iotrace.derivations import speculation

    _show(args, speculation(args.alpha, args.gamma, args.draft_cost))


def _cmd_occupancy(args: argparse.Namespace) -> None:
    from iotrace.occupancy import curve_block_size, curve_registers, curve_shared_mem, occupancy
    from iotrace.render.console import print_occupancy

    cc = args.cc if args.cc is not None else _card_or_none(args.card).sm_limits
    result = occupancy(cc, args.threads, args.regs, args.smem_static, args.smem_dynamic,
                       smem_reserved=args.smem_reserved, carveout_pct=args.carveout_pct,
                       smem_config=args.smem_config, barriers=args.barriers, smem_optin=not args.no_optin)
    data = result.to_dict()
    if args.curves:
        data["curves"] = {name: [vars(p) for p in build(result)] for name, build in
                          (("block_size", curve_block_size), ("registers", curve_registers),
                           ("shared_mem", curve_shared_mem))}
    if args.output is not None:
        _write_figure(args.output, result)
    _emit(args, data, lambda: print_occupancy(_console(), result))
    if args.output is not None and not args.json:
        print(f"wrote {args.output}")


def _write_figure(path: Path, result: Any) -> None:
    from iotrace.render.html_figure import write_html
    from iotrace.render.occupancy_figure import occupancy_figure

    write_html(occupancy_figure(result), path)


def _cmd_kernels(args: argparse.Namespace) -> None:
    from iotrace.cards import lookup
    from iotrace.plugins import kernels
    from iotrace.render.console import print_kernels

    card = lookup(args.card or "h100")
    rows = []
    for spec in kernels().values():
        shape = spec.check_shape(spec.default_shape)
        rows.append({"name": spec.name, "summary": spec.summary, "dtypes": list(spec.dtypes),
                     "backends": list(spec.backends), "shape_keys": list(spec.shape_keys),
                     "default_shape": shape, "presets": spec.presets,
                     "space_size": {b: len(spec.space(shape, spec.dtypes[0], card, b)) for b in spec.backends},
                     "space_card": card.key})
    _emit(args, rows, lambda: print_kernels(_console(), rows))


def _cmd_run(args: argparse.Namespace) -> None:
    from iotrace.cards import detect
    from iotrace.plugins import kernel
    from iotrace.render.console import print_run
    from iotrace.runner import resolve_config, run

    spec = kernel(args.kernel)
    shape = spec.shape_for(args.preset, args.shape)
    dtype = spec.check_dtype(args.dtype or spec.dtypes[0])
    card = detect(args.card)
    config = resolve_config(spec, shape, dtype, card, args.backend, args.config)
    from iotrace.cli import profile as profile_command

    if profile_command.wanted(args):  # the run goes to a child process under the profiler
        profile_command.main(args, spec, shape, dtype, card, config)
        return
    result = run(spec, shape, dtype, card, backend=args.backend, config=config, check=not args.no_check,
                 seed=args.seed)
    _emit(args, result.to_dict(), lambda: print_run(_console(), result, card))
    if result.check.ran and not result.check.correct:
        raise KernelWrongError(f"{spec.name} {config} gave wrong results: {result.check.where}",
                               f"reproduce with --seed {result.check.seed}")


def _cmd_info(args: argparse.Namespace) -> None:
    from iotrace.trace.info import render_info, summarise
    from iotrace.trace.loader import load

    if args.top < 0:
        raise InvalidValueError(f"--top {args.top} is negative", "give 0 or more")
    info = summarise(load(args.trace), top=args.top)
    _emit(args, info, lambda: print(render_info(info)))


def _cmd_selfcheck(args: argparse.Namespace) -> None:
    if args.cpu:  # before any kernel module is imported: Triton reads it at decoration time
        os.environ["TRITON_INTERPRET"] = "1"
    from iotrace.render.console import print_selfcheck
    from iotrace.selfcheck.run import selfcheck

    console = _console()
    result = selfcheck(args.out, cpu=args.cpu, quick=args.quick, card_name=args.card, budget_s=args.budget,
                       progress=(lambda _: None) if args.json else lambda name: console.print(f"… {name}"))
    _emit(args, result.to_dict(), lambda: print_selfcheck(console, result, args.out))
    failed = [f"{step.name}: {step.reason}" for step in result.steps if step.status == "failed"]
    if failed:
        raise SelfcheckFailedError(f"the self-check failed: {'; '.join(failed)}", f"see {args.out / 'results.md'}")


def _cmd_note(args: argparse.Namespace) -> None:
    from iotrace.notes import catalog, from_trace
    from iotrace.notes.images import write_images

    if args.output.suffix != ".md":
        raise InvalidValueError(f"-o {args.output} is not a .md file", "name the note NAME.md")
    note = from_trace.build(args.trace, name=args.output.stem, title=args.title, corpus=catalog.CORPUS,
                            kernel=args.kernel, card=args.card, images=not args.no_images)
    text = catalog.render_with_kept(note, args.output)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    written = write_images(note, args.output.parent / "img") if note.images else []
    args.output.write_text(text)
    for path in [*written, args.output]:
        print(f"wrote {path}")


def _cmd_notes(args: argparse.Namespace) -> None:
    from iotrace.notes import catalog

    if args.action == "rebuild":
        written = catalog.rebuild(args.dir, args.names, images=not args.no_images)
        _emit(args, [str(p) for p in written], lambda: print("\n".join(f"wrote {p}" for p in written)))
        return
    found = catalog.stale(args.dir, args.names)
    _emit(args, found, lambda: print("\n".join(f"stale: {name}: {why}" for name, why in found.items()) or
                                     f"every note in {args.dir} matches the code"))
    if found:
        raise StaleNotesError(f"{len(found)} note(s) are stale: {', '.join(found)}",
                              "run `iotrace notes rebuild` (or `make notes`) and commit the result")


def _cmd_tour(args: argparse.Namespace) -> None:
    from iotrace.tour import run_tour

    run_tour(_console(), args.card or "rtx3090")


# ---------------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except IotraceError as exc:
        print(f"iotrace: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `iotrace cards | head`: the reader left; not an error of ours or theirs
        _silence_stdout()
        return 0
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return 0


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail a second time.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
