"""``iotrace info``, ``iotrace report`` and ``iotrace diff``: what a profiler export holds, its report, two compared."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from iotrace.argtypes import binary_count, key_values
from iotrace.cli.output import SUFFIXES, add_json, add_names, add_wide, emit, output_format, text_of, write_output
from iotrace.errors import InvalidValueError

__all__ = ["FORMATS", "add_diff_arguments", "add_report_arguments", "diff_main", "register", "report_main"]

#: Output formats of ``iotrace report``; png and svg go through kaleido and need Chromium.
FORMATS = ("term", "md", "html", "png", "svg", "json")
DIFF_FORMATS = ("term", "md", "json")


def register(commands: argparse._SubParsersAction) -> None:
    info = commands.add_parser("info", help="what a profiler export holds: format, devices and cards, counts, "
                                            "top kernels (ncu-rep, ncu/nvprof CSV, nsys sqlite/nsys-rep, Kineto)")
    info.add_argument("trace", type=Path, metavar="TRACE", help="the export; its format is found from its content")
    info.add_argument("--top", type=binary_count, default=10, help="how many kernels to list (default 10)")
    add_wide(info)
    add_names(info)
    add_json(info)
    info.set_defaults(func=_cmd_info)
    report = commands.add_parser("report", help="warp stalls, roofline, occupancy and timeline of a profiler export, "
                                                "with findings (terminal, md, html, png, json)")
    add_report_arguments(report)
    report.set_defaults(func=report_main)
    diff = commands.add_parser("diff", help="per-kernel deltas of two exports (before/after): time, stalls, bytes, "
                                            "occupancy")
    add_diff_arguments(diff)
    diff.set_defaults(func=diff_main)


def _cmd_info(args: argparse.Namespace) -> None:
    from iotrace.trace.info import summarise
    from iotrace.trace.loader import load

    if args.top < 0:
        raise InvalidValueError(f"--top {args.top} is negative", "give 0 or more")
    info = summarise(load(args.trace), top=args.top)
    emit(args, info, lambda: print(info_text(info, wide=args.wide, names=args.names)))


def info_text(info: dict[str, Any], wide: bool = False, names: str = "short") -> str:
    """``iotrace info``'s summary for a person: each long kernel name as its base name and a key, the full names
    listed once below (``names="full"``: whole, inline); in a terminal cut to fit unless ``wide``."""
    from iotrace.render.console import natural_output
    from iotrace.trace.info import render_info
    from iotrace.trace.render.fmt import short
    from iotrace.trace.render.names import NameKeys

    natural = natural_output(wide)
    keys = NameKeys.of(names)
    shown = {**info, "top_kernels": [{**k, "name": keys.cell(k["name"])} for k in info.get("top_kernels", [])]}
    text = render_info(shown, wide=natural)
    listed = [f"[{key}] {name}" for key, name in keys.take()]
    if not natural:
        import shutil

        listed = [short(line, max(shutil.get_terminal_size().columns - 6, 20)) for line in listed]
    return "\n".join([text, *(f"      {line}" for line in listed)])


def _common(parser: argparse.ArgumentParser, formats: tuple[str, ...]) -> None:
    parser.add_argument("--kernel", metavar="REGEX", help="only kernels whose name matches this regular expression")
    parser.add_argument("--card", metavar="NAME",
                        help="a CardBook card for ceilings and compute capability (default: the file's device)")
    parser.add_argument("--format", choices=formats, default=None, help=f"output format (default term; "
                        f"{', '.join(formats)}); with -o FILE its extension says it")
    parser.add_argument("--json", action="store_true", help="shorthand for --format json")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="write to FILE instead of stdout, in the format its extension names ("
                             + ", ".join(SUFFIXES[f] for f in formats) + "; --format, when given, must agree)")
    parser.add_argument("--ceilings", choices=("auto", "file", "card"), default="auto",
                        help="roofline ceilings: the file's own *.peak_sustained (file), the card (card), or the "
                             "file's where present, else the card's (auto, default)")
    parser.add_argument("--top", type=binary_count, default=50,
                        help="show at most this many kernel rows and findings; findings are ranked across every row "
                             "by the time they can save (default 50)")
    parser.add_argument("--each-launch", action="store_true",
                        help="one row per launch; by default identical launches (same name, grid, block, "
                             "registers, shared memory) are one row with their count, min/median/max time and "
                             "averaged counters")
    add_wide(parser)
    add_names(parser)


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, nargs="+", metavar="TRACE",
                        help="the export; its format is found from its content. A folder of per-rank traces, or "
                             "several files of one distributed job, gives the report across ranks: per-rank kernel "
                             "time side by side, NCCL against compute and their overlap, idle time, stragglers "
                             "(ranks matched by the files' distributedInfo; files of different jobs or runs, or a "
                             "damaged file: exit 2)")
    _common(parser, FORMATS)
    parser.add_argument("--workers", type=int, metavar="N",
                        help="across ranks: load the rank files in N processes (default one per CPU)")
    parser.add_argument("--ranks", action="store_true",
                        help="across ranks: the files are ranks of one job even though their formats, device models "
                             "or capture times differ (by default such files are refused as not one run)")
    parser.add_argument("--require-all-ranks", action="store_true",
                        help="across ranks: fail (exit 2) when a rank of the world size has no file, instead of "
                             "reporting the ranks given and naming the missing ones")
    parser.add_argument("--plugin", metavar="KERNEL",
                        help="treat the selected kernels as this iotrace kernel plugin (see `iotrace kernels`); "
                             "kernels under an iotrace/<kernel> NVTX range are matched without it")
    parser.add_argument("--shape", type=key_values, metavar="K=V,...",
                        help="the plugin's problem shape, for its cost model beside the counters (e.g. "
                             "M=4096,N=4096,K=4096)")
    parser.add_argument("--dtype", help="the plugin's dtype for its cost model (default: its first)")
    parser.add_argument("--details", type=binary_count, default=5,
                        help="kernels shown in full detail in the terminal and Markdown (default 5)")
    parser.add_argument("--images", action="store_true",
                        help="with --format md and -o: write the figures as PNG beside the Markdown (kaleido)")
    steps = parser.add_argument_group(
        "engine steps",
        "an inference engine's trace, step by step against the wall (docs/commands/traces.md#engine-steps)")
    steps.add_argument("--steps", metavar="REGEX", help="the ranges that mark one step each (default: vLLM's step "
                       "annotations, iotrace's runner ranges or vLLM's execute_model, whichever the trace holds)")
    which = steps.add_mutually_exclusive_group()
    which.add_argument("--model", metavar="KEY", help="the model the trace ran, a models.toml key (see `iotrace math "
                       "--help`), at --bits (default 16)")
    which.add_argument("--gguf", type=Path, metavar="PATH", help="the model as a GGUF (its bits as stored)")
    which.add_argument("--hf-config", type=Path, metavar="DIR", help="the model's Hugging Face folder (config.json)")
    which.add_argument("--params", type=float, metavar="N", help="the model's parameters (with --bits)")
    steps.add_argument("--bits", type=float, metavar="Q", help="bits per weight as the engine reads them")
    steps.add_argument("--active-params", type=float, metavar="N",
                       help="a mixture of experts: the parameters one token reads")
    steps.add_argument("--bandwidth", type=float, metavar="GB/s", help="the device's memory bandwidth (default: the "
                       "card's datasheet, or the copy-loop figure in the bench manifest beside the trace)")
    steps.add_argument("--tp", type=int, metavar="N", help="tensor-parallel degree (default: the trace's world size)")
    steps.add_argument("--batch", type=int, metavar="N",
                       help="requests per step where the trace's marks do not say (vLLM's execute_model)")


def add_diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, metavar="BEFORE", help="the trace before the change")
    parser.add_argument("after", type=Path, metavar="AFTER", help="the trace after the change")
    _common(parser, DIFF_FORMATS)


def _format(args: argparse.Namespace, command: str, formats: tuple[str, ...]) -> str:
    """The format to write: ``-o FILE``'s extension, ``--format`` or ``--json`` (which must agree with it), else the
    terminal's text."""
    given = args.format
    if args.json:
        if args.format not in (None, "json"):
            raise InvalidValueError(f"--json and --format {args.format} disagree", "give one of them")
        given = "json"
    return output_format(command, args.output, formats, given, flag="--json" if args.json else "--format")


def _build(args: argparse.Namespace, trace: Path, **extra: Any):
    from iotrace.trace.loader import load
    from iotrace.trace.reports.report import build_report

    tables = load(trace)
    return build_report(tables, kernel=args.kernel, card=args.card, ceilings=args.ceilings, top=args.top,
                        each_launch=args.each_launch, steps=_step_options(args, trace, tables), **extra)


def _step_options(args: argparse.Namespace, trace: Path, tables: Any) -> Any:
    """The model, machine and step marks ``iotrace report`` was given (or found in a bench manifest beside the
    trace), for the step report."""
    from iotrace.model import step_model

    bits, active = getattr(args, "bits", None), getattr(args, "active_params", None)
    if getattr(args, "batch", None) is not None and args.batch < 1:
        raise InvalidValueError(f"--batch {args.batch} must be 1 or more", "give the requests per step")
    model = None
    if getattr(args, "model", None):
        model = step_model.from_key(args.model, bits, active)
    elif getattr(args, "gguf", None):
        model = step_model.from_gguf(args.gguf, bits, active)
    elif getattr(args, "hf_config", None):
        model = step_model.from_hf_config(args.hf_config, bits, active)
    elif getattr(args, "params", None) is not None:
        model = step_model.from_numbers(args.params, bits, active)
    elif bits is not None or active is not None:
        raise InvalidValueError("--bits and --active-params describe a model", "give --model, --gguf, --hf-config or "
                                                                               "--params too")
    return step_model.step_options(tables, trace, model=model, card=getattr(args, "card", None),
                                   bandwidth_gbs=getattr(args, "bandwidth", None), tp=getattr(args, "tp", None),
                                   pattern=getattr(args, "steps", None), batch=getattr(args, "batch", None))


def _terminal_text(draw: Any, to_file: bool, wide: bool = False) -> str | None:
    """Draw with rich: to the terminal (at its width; natural width with ``wide`` or into a pipe), or captured as
    plain text at natural width for -o (a file, like a pipe, gets every cell whole)."""
    from iotrace.render.console import make_console

    if not to_file:
        draw(make_console(wide=wide))
        return None
    return text_of(draw)


def report_main(args: argparse.Namespace) -> None:
    fmt = _format(args, "iotrace report", FORMATS)
    if args.details < 0:
        raise InvalidValueError(f"--details {args.details} is negative", "give 0 or more")
    if fmt in ("html", "png", "svg") and args.output is None:
        raise InvalidValueError(f"--format {fmt} writes a file", f"give -o FILE.{fmt}")
    if args.images and (fmt != "md" or args.output is None):
        raise InvalidValueError("--images needs --format md and -o FILE.md", "the PNGs are written beside the file")
    if fmt in ("png", "svg") or args.images:
        from iotrace.render.image_export import check_export

        check_export()  # kaleido and a browser are there, before the trace is read
    from iotrace.trace.loader import is_export_folder

    # A folder is one job's rank traces, unless it is itself one export (a rocprof-compute workload folder).
    if len(args.trace) > 1 or (args.trace[0].is_dir() and not is_export_folder(args.trace[0])):
        _ranks_main(args, fmt)
        return
    if args.ranks:
        raise InvalidValueError(f"--ranks says several files are ranks of one job, but one trace was given "
                                f"({args.trace[0]})", "give the rank files (or their folder), or leave out --ranks")
    report = _build(args, args.trace[0], plugin=args.plugin, shape=args.shape, dtype=args.dtype)
    if fmt == "json":
        from iotrace.trace.render.jsonout import dumps

        write_output(args.output, dumps(report.to_dict()))
    elif fmt == "term":
        from iotrace.trace.render.terminal import print_report

        text = _terminal_text(lambda c: print_report(c, report, args.details, args.names), args.output is not None,
                              args.wide)
        if text is not None:
            write_output(args.output, text)
    elif fmt == "md":
        from iotrace.trace.render.markdown import report_markdown

        images: dict[str, str] = {}
        if args.images:
            from iotrace.trace.render.image import write_figures

            images = write_figures(report, args.output.with_suffix(""), "png")
        write_output(args.output, report_markdown(report, args.details, images, args.names))
    elif fmt == "html":
        from iotrace.trace.render.html import report_html

        write_output(args.output, report_html(report))
    else:
        from iotrace.trace.render.image import write_figures

        written = write_figures(report, args.output.with_suffix(""), fmt, first=args.output)
        for path in written.values():
            print(f"wrote {path}")


#: Options of the single-trace report that the report across ranks does not take, with their defaults.
_ONE_TRACE_ONLY = {"kernel": None, "card": None, "ceilings": "auto", "each_launch": False, "plugin": None,
                   "shape": None, "dtype": None, "images": False}


def _ranks_main(args: argparse.Namespace, fmt: str) -> None:
    """``iotrace report DIR`` or several files: the report across one job's ranks (reports/ranks_report.py)."""
    from iotrace.trace.ranks import load_ranks
    from iotrace.trace.render import ranks as render
    from iotrace.trace.reports.ranks_report import rank_report

    given = [f"--{name.replace('_', '-')}" for name, default in _ONE_TRACE_ONLY.items()
             if getattr(args, name) != default]
    if given:
        raise InvalidValueError(f"{', '.join(given)} applies to one trace, not to the report across ranks",
                                "give one trace file, or leave the option out")
    if fmt in ("png", "svg"):
        raise InvalidValueError(f"--format {fmt} is for one trace", "use --format html for the ranks' figure")
    source = args.trace[0] if len(args.trace) == 1 else args.trace
    found = load_ranks(source, workers=args.workers, assume_ranks=args.ranks)
    if args.require_all_ranks and found.missing:
        from iotrace.trace.reports.ranks_report import spans

        raise InvalidValueError(f"{len(found.ranks)} of {found.world_size} ranks given: no file holds rank(s) "
                                f"{spans(found.missing)}", "give every rank's file, or leave out --require-all-ranks")
    report = rank_report(found, top=args.top)
    if fmt == "json":
        write_output(args.output, render.ranks_json(report))
    elif fmt == "md":
        write_output(args.output, render.ranks_markdown(report, args.names))
    elif fmt == "html":
        write_output(args.output, render.ranks_html(report))
    else:
        text = _terminal_text(lambda c: render.print_ranks(c, report, args.names), args.output is not None,
                              args.wide)
        if text is not None:
            write_output(args.output, text)


def print_terminal(report: Any, details: int = 5) -> None:
    """``report`` in the terminal as ``iotrace report`` draws it (a pipe gets natural width)."""
    from iotrace.render.console import make_console
    from iotrace.trace.render.terminal import print_report

    print_report(make_console(), report, details)


def diff_main(args: argparse.Namespace) -> None:
    from iotrace.trace.reports.diff import diff_reports

    fmt = _format(args, "iotrace diff", DIFF_FORMATS)
    diff = diff_reports(_build(args, args.before), _build(args, args.after))
    if fmt == "json":
        from iotrace.trace.render.jsonout import dumps

        write_output(args.output, dumps(diff.to_dict()))
    elif fmt == "md":
        from iotrace.trace.render.markdown import diff_markdown

        write_output(args.output, diff_markdown(diff, args.names))
    else:
        from iotrace.trace.render.terminal import print_diff

        text = _terminal_text(lambda c: print_diff(c, diff, args.names), args.output is not None, args.wide)
        if text is not None:
            write_output(args.output, text)
