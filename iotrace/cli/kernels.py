"""``iotrace kernels`` and ``iotrace run KERNEL``; ``--nsys | --ncu | --cupti`` come from :mod:`iotrace.cli.profile`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from iotrace.argtypes import binary_count, key_values
from iotrace.cli.output import add_card, add_json, add_wide, console, emit
from iotrace.errors import IotraceError, KernelWrongError

if TYPE_CHECKING:
    from rich.console import Console

    from iotrace.plugin_manager import PluginFailure
    from iotrace.plugins.spec import KernelSpec

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
    """Every good kernel, and every broken plugin as a row of its own (its one line also on stderr); exit 0 either
    way, so one broken plugin never hides the others."""
    from iotrace.cards import lookup
    from iotrace.plugins import registry

    card = lookup(args.card or "h100")
    found = registry()
    rows: list[dict[str, Any]] = []
    broken = list(found.broken)
    for spec in found.kernels.values():
        plugin = found.owners.get(spec.name, "")
        try:  # a plugin's own methods run here: one that raises marks its kernel broken, the listing goes on
            shape = spec.check_shape(spec.default_shape)
            spaces = {b: len(spec.space(shape, spec.dtypes[0], card, b)) for b in spec.backends}
        except Exception as exc:
            broken.append(_listing_failure(spec, plugin, found.sources.get(plugin, ""), exc))
            continue
        rows.append({"name": spec.name, "summary": spec.summary, "dtypes": list(spec.dtypes),
                     "backends": list(spec.backends), "shape_keys": list(spec.shape_keys),
                     "default_shape": shape, "presets": spec.presets, "space_size": spaces, "space_card": card.key,
                     "plugin": plugin, "broken": None})
    for failure in broken:
        print(f"iotrace: warning: {failure}", file=sys.stderr)
        name = failure.provides[0] if len(failure.provides) == 1 else failure.plugin
        rows.append({"name": name, "plugin": found.owners.get(name, failure.plugin), "broken": failure.to_dict()})
    emit(args, rows, lambda: _print_kernels(console(args.wide), rows))


def _listing_failure(spec: KernelSpec, plugin: str, source: str, exc: Exception) -> PluginFailure:
    """The failure of a kernel whose own method raised (while it was listed, or run): named by the kernel, since the
    plugin's other kernels may work."""
    from iotrace.plugin_manager import PluginFailure

    error = " ".join(f"{type(exc).__name__}: {exc}".split())
    method = _method_of(spec, exc)
    where = ", ".join(filter(None, (f"plugin {plugin!r}" if plugin else "", source)))
    return PluginFailure(spec.name, method, f"raised {error}", f"fix {method}, or remove the plugin", where,
                         what="kernel", provides=(spec.name,))


def _method_of(spec: KernelSpec, exc: BaseException) -> str:
    """``Class.method``: the method of ``spec`` an exception came out of, the innermost one written in the spec's own
    module (``launch_kernel``, not iotrace's ``launch`` around it); ``KernelSpec`` when none is on the traceback."""
    import inspect

    try:
        own = inspect.getfile(type(spec))
    except TypeError:
        own = ""
    found = ""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if tb.tb_frame.f_locals.get("self") is spec and (not found or code.co_filename == own):
            found = f"{type(spec).__name__}.{code.co_name}"
        tb = tb.tb_next
    return found or "KernelSpec"


def _print_kernels(out: Console, rows: list[dict[str, Any]]) -> None:
    """The good kernels' table (:func:`iotrace.render.console.print_kernels`), then the broken plugins and kernels, each
    with its one line, in a table of their own."""
    from rich.markup import escape
    from rich.table import Table

    from iotrace.render.console import print_kernels

    print_kernels(out, [row for row in rows if not row["broken"]])
    broken = [row for row in rows if row["broken"]]
    if broken:
        table = Table(title="Broken (not listed above: each provides nothing until fixed)", title_justify="left")
        table.add_column("kernel")
        table.add_column("why", overflow="fold")
        for row in broken:
            table.add_row(escape(row["name"]), f"[red]{escape(row['broken']['message'])}[/red]")
        out.print(table)


def _cmd_run(args: argparse.Namespace) -> None:
    from iotrace.plugins import kernel, registry

    spec = kernel(args.kernel)
    try:
        _run(args, spec)
    except (IotraceError, KeyboardInterrupt):
        raise
    except Exception as exc:  # a third-party kernel's own method raised: one line naming it, as a broken plugin is
        if type(spec).__module__.startswith("iotrace."):
            raise  # iotrace's own kernels: a bug of ours, whose traceback we want
        found = registry()
        plugin = found.owners.get(spec.name, spec.name)
        raise _listing_failure(spec, plugin, found.sources.get(plugin, ""), exc).as_error() from exc


def _run(args: argparse.Namespace, spec: KernelSpec) -> None:
    from iotrace.cli import profile as profile_command
    from iotrace.kernel_call import KernelCall
    from iotrace.render.console import print_run
    from iotrace.runner import resolve_config, run

    call = KernelCall.make(spec, args.shape, args.dtype, args.card, args.backend, preset=args.preset)
    config = resolve_config(call, args.config)
    if profile_command.wanted(args):  # the run goes to a child process under the profiler
        call.check_launch(config)  # refused here, before the child starts (run's static analysis checks otherwise)
        profile_command.main(args, call, config)
        return
    result = run(call, config=config, check=not args.no_check, seed=args.seed)
    emit(args, result.to_dict(), lambda: print_run(console(), result, call.card))
    if result.check.ran and not result.check.correct:
        raise KernelWrongError(f"{call.spec.name} {config} gave wrong results: {result.check.where}",
                               f"reproduce with --seed {result.check.seed}")
