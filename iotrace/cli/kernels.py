"""``iotrace kernels`` and ``iotrace run KERNEL``; ``--nsys | --ncu | --cupti`` come from :mod:`iotrace.cli.profile`."""

from __future__ import annotations

import argparse

from iotrace.argtypes import binary_count, key_values
from iotrace.cli.output import add_card, add_json, add_wide, console, emit
from iotrace.errors import KernelWrongError

__all__ = ["register"]


def register(commands: argparse._SubParsersAction) -> None:
    kernels = commands.add_parser("kernels", help="list the installed kernel plugins, their presets and spaces")
    add_card(kernels, " for the space sizes (default h100)")
    add_wide(kernels)
    add_json(kernels)
    kernels.set_defaults(func=_cmd_kernels)

    run = commands.add_parser("run", help="run a kernel: check it, cost it, compile it for a card, time it on a GPU")
    run.add_argument("kernel", metavar="KERNEL", help="a kernel name (see `iotrace kernels`)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--preset", metavar="NAME", help="a named shape from a real model (see `iotrace kernels`)")
    where.add_argument("--shape", type=key_values, metavar="K=V,...", help="a free shape, e.g. M=4096,N=4096,K=4096")
    run.add_argument("--dtype", help="input dtype (default: the kernel's first, e.g. fp16)")
    run.add_argument("--config", type=key_values, metavar="K=V,...",
                     help="tuning parameters over the card's default, e.g. BLOCK_M=64,num_warps=4")
    run.add_argument("--backend", default="triton", help="triton (default) or cuda where the kernel has it")
    add_card(run, " (default: $IOTRACE_CARD, then the local GPU)")
    run.add_argument("--seed", type=binary_count, help="seed of the random inputs (default: fresh each run)")
    run.add_argument("--no-check", action="store_true", help="skip the comparison with the reference")
    add_json(run)
    from iotrace.cli import profile as profile_command

    profile_command.add_arguments(run)  # --nsys | --ncu | --cupti and their options
    run.set_defaults(func=_cmd_run)


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
    emit(args, rows, lambda: print_kernels(console(args.wide), rows))


def _cmd_run(args: argparse.Namespace) -> None:
    from iotrace.cli import profile as profile_command
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins import kernel
    from iotrace.render.console import print_run
    from iotrace.runner import resolve_config, run

    call = KernelCall.make(kernel(args.kernel), args.shape, args.dtype, args.card, args.backend, preset=args.preset)
    config = resolve_config(call, args.config)
    if profile_command.wanted(args):  # the run goes to a child process under the profiler
        profile_command.main(args, call, config)
        return
    result = run(call, config=config, check=not args.no_check, seed=args.seed)
    emit(args, result.to_dict(), lambda: print_run(console(), result, call.card))
    if result.check.ran and not result.check.correct:
        raise KernelWrongError(f"{call.spec.name} {config} gave wrong results: {result.check.where}",
                               f"reproduce with --seed {result.check.seed}")

