"""``iotrace selfcheck OUT``: the kernels, tuner and profiler path proven on this GPU (or at tiny sizes on the CPU)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from iotrace.argtypes import si_number
from iotrace.cli.output import add_card, add_json, console, emit
from iotrace.errors import SelfcheckFailedError

__all__ = ["register"]


def register(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser("selfcheck", help="prove the kernels, tuner and profiler path on this GPU (or, with "
                                                   "--cpu, the same steps at tiny sizes); writes results.md/json")
    check.add_argument("out", type=Path, metavar="OUT", help="folder for results.md, results.json and the captures")
    check.add_argument("--cpu", action="store_true", help="no GPU: interpreter backend, static tuning, no profilers")
    check.add_argument("--quick", action="store_true", help="one preset per kernel and smaller ceiling probes")
    add_card(check, " (default: the local GPU; h100 with --cpu)")
    check.add_argument("--budget", type=si_number, default=480.0, metavar="SECONDS",
                       help="time budget; steps past it are recorded as not run (default 480)")
    add_json(check)
    check.set_defaults(func=_cmd_selfcheck)


def _cmd_selfcheck(args: argparse.Namespace) -> None:
    if args.cpu:  # before any kernel module is imported: Triton reads it at decoration time
        os.environ["TRITON_INTERPRET"] = "1"
    from iotrace.render.console import print_selfcheck
    from iotrace.selfcheck.run import selfcheck

    screen = console()
    result = selfcheck(args.out, cpu=args.cpu, quick=args.quick, card_name=args.card, budget_s=args.budget,
                       progress=(lambda _: None) if args.json else lambda name: screen.print(f"… {name}"))
    emit(args, result.to_dict(), lambda: print_selfcheck(screen, result, args.out))
    failed = [f"{step.name}: {step.reason}" for step in result.steps if step.status == "failed"]
    if failed:
        raise SelfcheckFailedError(f"the self-check failed: {'; '.join(failed)}", f"see {args.out / 'results.md'}")

