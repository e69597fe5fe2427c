"""``iotrace tune``: its flags and its entry point (wired into the CLI by ``iotrace.cli``).

Examples (no GPU needed)::

    iotrace tune gemm --card h100 --preset square-4096 --fix BLOCK_K=64,num_stages=3
    iotrace tune gemm --card rtx3090 --shape M=2048,N=2048,K=2048 --static --json
    iotrace tune gemm --replay bench/sweeps/gemm-h100-square-4096-synth.json --strategy random --budget 20

On a Ray cluster (``pip install 'iotrace[ray]'``; :mod:`iotrace.autotune.ray_runner`)::

    iotrace tune gemm --preset square-4096 --strategy exhaustive --ray 10.0.0.5:6379
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from iotrace.argtypes import binary_count, key_values, si_number
from iotrace.autotune.cache import default_path
from iotrace.cli.output import add_card, add_output, answer_format, finite_json, write_answer
from iotrace.errors import InvalidValueError, IotraceError

if TYPE_CHECKING:
    from iotrace.autotune.result import TuneResult
    from iotrace.autotune.tuner import Progress, TuneOptions
    from iotrace.plugins.spec import KernelSpec

__all__ = ["TUNE_WRITES", "TuneInterrupted", "add_arguments", "main"]

#: What ``tune -o FILE`` writes, by extension: the chart of time against occupancy and against the predicted time as a
#: plotly page (.html) or an image (.png, .svg; kaleido and Chromium), or the result as JSON or the terminal's text.
TUNE_WRITES = ("html", "png", "svg", "json", "term")


class TuneInterrupted(IotraceError):
    """Ctrl-C during a tune: what was measured is committed, a rerun resumes (exit 130, as a shell reports SIGINT)."""

    exit_code = 130


def register(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser("tune", help="autotune a kernel for a card: static pruning from compiled resources, "
                                            "verified measurements on a GPU, cached")
    add_arguments(tune)
    tune.set_defaults(func=main)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", metavar="KERNEL", help="a kernel name (see `iotrace kernels`)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--preset", metavar="NAME", help="a named shape from a real model (see `iotrace kernels`)")
    where.add_argument("--shape", type=key_values, metavar="K=V,...", help="a free shape, e.g. M=4096,N=4096,K=4096")
    parser.add_argument("--dtype", help="input dtype (default: the kernel's first, e.g. fp16)")
    add_card(parser, " (default: $IOTRACE_CARD, then the local GPU)")
    parser.add_argument("--backend", default="triton", help="triton (default) or cuda where the kernel has it")
    parser.add_argument("--strategy", default="model", metavar="NAME",
                        help="exhaustive, random or model (default: measure the model's top-k, then local search)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=binary_count, metavar="N", help="at most N evaluations")
    budget.add_argument("--time", type=si_number, metavar="S", help="at most S seconds of evaluation")
    parser.add_argument("--fix", type=key_values, metavar="K=V,...",
                        help="tune only the configs with these values, e.g. BLOCK_K=64,num_stages=3")
    parser.add_argument("--static", action="store_true",
                        help="static phase only: compile, prune, rank by the cost model; launch nothing")
    parser.add_argument("--verify", type=binary_count, default=3, metavar="N",
                        help="without a GPU: check the top N ranked configs under the Triton interpreter "
                             "(default 3; 0: none). On a GPU every measured config is checked")
    parser.add_argument("--replay", type=Path, metavar="SWEEP.json",
                        help="measure nothing: answer from a recorded sweep (compare strategies offline)")
    parser.add_argument("--record", type=Path, metavar="SWEEP.json", help="on a GPU: save the measurements as a sweep")
    parser.add_argument("--export", type=Path, metavar="BEST.json",
                        help="add the best config to a tuned-config file kernels load at run time ($IOTRACE_TUNED)")
    parser.add_argument("--cache", type=Path, metavar="FILE",
                        help="the tuning cache (default $XDG_CACHE_HOME/iotrace/tune.sqlite3)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the tuning cache")
    parser.add_argument("--jobs", type=binary_count, metavar="N", help="compile workers (default: one per CPU core)")
    parser.add_argument("--seed", type=binary_count, metavar="N", help="seed of the inputs and of random search")
    parser.add_argument("--rows", type=binary_count, default=15, metavar="N", help="table rows to show (default 15)")
    add_output(parser, TUNE_WRITES, "a chart of time against occupancy and against the predicted time (.html, .png, "
                                    ".svg) or the result (.json, .txt), besides printing it,")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="tune on a Ray cluster: compiles on its CPUs, one measuring worker per GPU, one tune per "
                             "card type present (ADDRESS: HOST:PORT of its head node; alone: $RAY_ADDRESS, else this "
                             "machine). Needs pip install 'iotrace[ray]'")


def main(args: argparse.Namespace) -> None:
    from iotrace.autotune.export import export_best
    from iotrace.autotune.render import BarProgress, print_tune
    from iotrace.autotune.tuner import TuneOptions, tune, tune_from_sweep
    from iotrace.cards import detect
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins import kernel
    from iotrace.render.console import make_console

    spec = kernel(args.kernel)
    if args.jobs is not None and args.jobs < 1:
        raise InvalidValueError(f"--jobs {args.jobs} starts no compile worker", "give --jobs 1 or more")
    if args.rows < 0:
        raise InvalidValueError(f"--rows {args.rows} is negative", "give 0 or more")
    # The file's format, from its extension, before minutes of compiling, not after.
    fmt = answer_format("iotrace tune", args.output, TUNE_WRITES)
    options = TuneOptions(strategy=args.strategy, budget=args.budget, time_s=args.time,
                          mode="static" if args.static else None, verify_top=args.verify, replay=args.replay,
                          record=args.record, cache=args.cache, use_cache=not args.no_cache, fix=args.fix or {},
                          jobs=args.jobs, seed=args.seed)
    if args.replay is None and args.ray is None:
        call = KernelCall.make(spec, args.shape, args.dtype, args.card, args.backend, preset=args.preset)
    console = make_console()
    progress = BarProgress(console) if console.is_terminal and not args.json else None
    try:
        if args.ray is not None:
            results = _on_ray(args, spec, options, progress)
        elif args.replay is None:
            results = [tune(call, options, progress)]
        else:  # the sweep says the shape, dtype and card; what is given beside it must agree
            given = None if args.preset is None and args.shape is None else spec.shape_for(args.preset, args.shape)
            results = [tune_from_sweep(spec, options, progress, shape=given, dtype=args.dtype,
                                       card=detect(args.card) if args.card else None)]
    except KeyboardInterrupt:
        if progress is not None:
            progress.stop()
        if args.no_cache:
            raise TuneInterrupted("interrupted: --no-cache kept no result", "run the same command again") from None
        if args.static or args.replay:  # these modes measure nothing and open no cache
            raise TuneInterrupted("interrupted: nothing was measured, so nothing is saved",
                                  "run the same command again") from None
        where = str(args.cache or default_path())
        raise TuneInterrupted(f"interrupted: every result measured so far is saved in {where}",
                              "run the same command again to resume where it stopped") from None
    if args.output is not None and fmt is not None:
        from iotrace.autotune.render import tune_figure

        result = results[0]  # one card type only (checked in _on_ray)
        write_answer(args.output, fmt, figure=lambda: tune_figure(result), data=result.to_dict,
                     draw=lambda c: print_tune(c, result, args.rows))
    exported = [export_best(result, args.export) for result in results] if args.export is not None else []
    if args.json:
        # One tune: its object, as always; a cluster with several card types: one object per card type.
        found = [finite_json(result.to_dict()) for result in results]
        print(json.dumps(found[0] if len(found) == 1 else found, indent=2, allow_nan=False))
        return
    for result in results:
        print_tune(console, result, args.rows)
    if args.output is not None:
        console.print(f"wrote {args.output}")
    if exported:
        console.print(f"exported the best config to {args.export} (load it with {'IOTRACE_TUNED'}={args.export})")


def _on_ray(args: argparse.Namespace, spec: KernelSpec, options: TuneOptions,
            progress: Progress | None) -> list[TuneResult]:
    """``--ray``: a replay or the static phase on the cluster's CPUs, else one GPU tune per card type present."""
    from iotrace.autotune import ray_runner
    from iotrace.autotune.tuner import tune, tune_from_sweep
    from iotrace.cards import detect
    from iotrace.kernel_call import KernelCall

    ray_runner.connect(args.ray or None)
    if args.replay is not None:
        given = None if args.preset is None and args.shape is None else spec.shape_for(args.preset, args.shape)
        return [tune_from_sweep(spec, options, progress, shape=given, dtype=args.dtype,
                                card=detect(args.card) if args.card else None, runner=ray_runner.RayRunner())]
    if args.static:
        call = KernelCall.make(spec, args.shape, args.dtype, args.card, args.backend, preset=args.preset)
        return [tune(call, options, progress, ray_runner.RayRunner())]
    every = groups = ray_runner.gpu_workers(args.ray or None)
    try:
        if args.card:
            named = detect(args.card)
            present = ", ".join(g.card.name for g in groups)
            groups = [g for g in groups if (g.card.cc, g.card.sm_count) == (named.cc, named.sm_count)]
            if not groups:
                raise InvalidValueError(f"--card {args.card}: the Ray cluster has no {named.name} (it has {present})",
                                        "leave --card out to tune every card type present, or name one of those")
        for flag, value in (("--record", args.record), ("--output", args.output)):
            if value is not None and len(groups) > 1:
                raise InvalidValueError(f"{flag} {value} holds one card's tune and the Ray cluster has {len(groups)} "
                                        f"card types ({', '.join(g.card.name for g in groups)})",
                                        "add --card NAME to tune one of them")
        return ray_runner.tune_each_card(groups, lambda card: KernelCall.make(spec, args.shape, args.dtype, card,
                                                                              args.backend, preset=args.preset),
                                         options, progress)
    finally:
        ray_runner.stop_workers([actor for group in every for actor in group.actors])
