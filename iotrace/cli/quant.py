"""``iotrace quant``: the quantisation lab on the pinned model (bits, bytes, decode wall, quality drop);
``iotrace quant --kv``: the INT8 KV cache schemes against the 16-bit cache on the same model."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from iotrace.argtypes import count_at_least
from iotrace.cli.output import add_json, console, emit

__all__ = ["register"]

#: The card the walls are drawn for when none is named (a CPU run has no card of its own).
DEFAULT_CARD = "rtx3090"


def register(commands: argparse._SubParsersAction) -> None:
    quant = commands.add_parser(
        "quant", help="weight formats (int8, int4 groups, GGUF Q4/Q8, FP8, MXFP4, NVFP4) on the pinned model: bits, "
                      "bytes, decode wall and quality drop",
        description="Quantise every layer matrix of the pinned SmolLM2-135M to each format (a quantise-dequantise "
                    "round trip in torch that follows the format's definition) and report bits per weight with "
                    "scales, weight bytes per decode token, the decode wall on a card (identity 1) and the quality "
                    "drop (KL, top-1 agreement, perplexity) against the baseline, which is the dequantised Q4_1 "
                    "file itself (fp32 on the CPU). A table, not a ranking.")
    quant.add_argument("--format", metavar="F[,F...]",
                       help="formats to run (default: int8-channel, q8_0, fp8-tensor, fp8-channel, q4_0, "
                            "int4-sym-g64, q4_1, int4-asym-g64, mxfp4, nvfp4); see --list-formats")
    quant.add_argument("--card", metavar="KEY[,KEY...]", default=DEFAULT_CARD,
                       help=f"CardBook cards for the decode wall (default {DEFAULT_CARD}; see `iotrace cards`)")
    quant.add_argument("--tokens", type=count_at_least(2), metavar="N",
                       help="score the first N tokens of the shipped text (default: all 3,669)")
    quant.add_argument("--window", type=count_at_least(1), default=512, metavar="N",
                       help="non-overlapping windows of N tokens, each from an empty cache (default 512)")
    quant.add_argument("--quantise-head", action="store_true",
                       help="quantise the tied embedding/LM head too (default: kept at the file's Q8_0)")
    quant.add_argument("--list-formats", action="store_true", help="list the format families and exit")
    kv = quant.add_argument_group("INT8 KV cache (instead of the weight formats)")
    kv.add_argument("--kv", nargs="?", const="all", metavar="SCHEME[,SCHEME...]",
                    help="the INT8 KV cache against the 16-bit cache over one long context: every key scheme, or "
                         "those named (per-token, per-channel, per-channel+kept, per-token+kept, or 0-3)")
    kv.add_argument("--calibration", type=count_at_least(1), metavar="N",
                    help="with --kv: tokens the per-channel scales and kept channels are calibrated on (default 128)")
    kv.add_argument("--layers", action="store_true", help="with --kv: every layer's attention-output cosine")
    add_json(quant)
    quant.add_argument("--markdown", action="store_true", help="the table as Markdown")
    quant.set_defaults(func=_cmd_quant)


def _cmd_quant(args: argparse.Namespace) -> None:
    from iotrace.model.eval_text import check_tokens

    check_tokens(args.tokens)  # the text's stated length: before torch, the tokenizer and the model load
    from iotrace.cards import lookup
    from iotrace.model.quant_formats import format_listing, parse_formats
    from iotrace.render.quant import print_formats, print_quant, quant_markdown

    if args.list_formats:
        listing = format_listing()
        emit(args, listing, lambda: print_formats(console(), listing))
        return
    if args.kv is not None:
        _cmd_kv(args)
        return
    if args.calibration is not None or args.layers:
        from iotrace.errors import InvalidValueError

        raise InvalidValueError("--calibration and --layers apply to the INT8 KV cache", "add --kv")
    formats = parse_formats(args.format)  # bad names fail before the model loads
    cards = [lookup(key.strip()).key for key in args.card.split(",") if key.strip()]
    from iotrace.model.quant_lab import check_formats, run_lab

    weights, tokenizer = _pinned_model(args.tokens, lambda config: check_formats(config, formats, args.quantise_head))
    show = console()
    with _progress(args, "quant") as progress:
        result = run_lab(weights, tokenizer, formats, cards, tokens=args.tokens, window=args.window,
                         include_head=args.quantise_head, progress=progress)
    data = result.to_dict()
    if args.markdown:
        print(quant_markdown(data), end="")
        return
    emit(args, data, lambda: print_quant(show, data))


def _pinned_model(tokens: int | None, check: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    """The pinned model's fp32 weights and tokenizer; ``check(config)`` and a --tokens beyond the shipped text (checked
    again on its token ids) fail before the 10 s of loading the weights."""
    from iotrace.model.gguf_file import open_gguf, pinned_gguf
    from iotrace.model.quality import text_ids
    from iotrace.model.quant_lab import load_baseline
    from iotrace.model.tokenizer import gguf_tokenizer

    path = pinned_gguf()
    gguf = open_gguf(path)
    if check is not None:
        check(gguf.config)
    text_ids(gguf_tokenizer(path), tokens=tokens)
    return load_baseline()  # the same weights and tokenizer (both cached per process)


@contextmanager
def _progress(args: argparse.Namespace, name: str) -> Iterator[Callable[[int, int, str], None] | None]:
    """A rich progress bar on stderr when it is a terminal (None otherwise: a pipe gets no bar)."""
    if not sys.stderr.isatty() or args.json:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task(name, total=None)
    bar.start()

    def progress(done: int, total: int, what: str) -> None:
        bar.update(task, completed=done, total=total, description=f"{name}: {what}")

    try:
        yield progress
    finally:
        bar.stop()


def _cmd_kv(args: argparse.Namespace) -> None:
    from iotrace.errors import InvalidValueError
    from iotrace.model.kv_quality import DEFAULT_CALIBRATION, DEFAULT_TOKENS, kv_quality, parse_schemes
    from iotrace.render.kv_quality import print_kv_quality

    for flag, given in (("--format", args.format), ("--quantise-head", args.quantise_head),
                        ("--list-formats", args.list_formats), ("--markdown", args.markdown)):
        if given:
            raise InvalidValueError(f"{flag} is a weight-format option; --kv measures the KV cache",
                                    f"run `iotrace quant {flag} ...` and `iotrace quant --kv` separately")
    schemes = parse_schemes(None if args.kv == "all" else args.kv)  # bad names fail before the model loads
    tokens = args.tokens or DEFAULT_TOKENS
    calibration = args.calibration or DEFAULT_CALIBRATION
    if calibration >= tokens:
        raise InvalidValueError(f"--calibration {calibration} is not below --tokens {tokens}",
                                "calibrate on fewer tokens than the context, e.g. --calibration 128")
    weights, tokenizer = _pinned_model(tokens)
    with _progress(args, "quant --kv") as progress:
        result = kv_quality(weights, tokenizer, schemes=schemes, tokens=tokens, calibration=calibration,
                            progress=progress)
    data = result.to_dict()
    emit(args, data, lambda: print_kv_quality(console(), data, layers=args.layers))
