"""Build the plugin manager: built-in kernels, installed entry points, and ``IOTRACE_PLUGINS`` modules.

Nothing is registered at import; :func:`plugin_manager` does the work once, when first asked.
"""

from __future__ import annotations

import importlib
import os
from functools import cache

import pluggy

from iotrace.errors import PluginError
from iotrace.plugins import hookspecs
from iotrace.plugins.spec import KernelSpec

__all__ = ["BUILTIN_PLUGINS", "ENV_NO_AUTOLOAD", "ENV_PLUGINS", "kernel", "kernels", "plugin_manager"]

#: Modules shipped with iotrace that register kernels.
BUILTIN_PLUGINS = ("iotrace.kernels.gemm", "iotrace.kernels.rmsnorm", "iotrace.kernels.attention_prefill",
                   "iotrace.kernels.attention_decode", "iotrace.kernels.draft_verify", "iotrace.kernels.int8_kv")
#: Comma-separated modules to load as plugins (local work, tests).
ENV_PLUGINS = "IOTRACE_PLUGINS"
#: Set to 1 to skip installed ``iotrace`` entry points (as pytest's PYTEST_DISABLE_PLUGIN_AUTOLOAD).
ENV_NO_AUTOLOAD = "IOTRACE_DISABLE_PLUGIN_AUTOLOAD"
ENTRY_POINT_GROUP = "iotrace"


def _import(name: str, how: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PluginError(f"plugin module {name!r} ({how}) cannot be imported: {exc}",
                          "check the module name and that its package is installed") from exc


@cache
def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, validated: every hook implementation matches a spec."""
    from iotrace.kernels.backend import prepare_triton

    prepare_triton()  # before any @triton.jit runs: interpreter on when there is no GPU
    pm = pluggy.PluginManager("iotrace")
    pm.add_hookspecs(hookspecs)
    try:
        for name in BUILTIN_PLUGINS:
            pm.register(_import(name, "built-in"), name=name)
        if os.environ.get(ENV_NO_AUTOLOAD) != "1":
            try:
                pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            except ImportError as exc:
                raise PluginError(f"an installed iotrace plugin cannot be imported: {exc}",
                                  f"reinstall or remove it, or set {ENV_NO_AUTOLOAD}=1") from exc
        for name in filter(None, (n.strip() for n in os.environ.get(ENV_PLUGINS, "").split(","))):
            if pm.get_plugin(name) is None:
                pm.register(_import(name, f"from {ENV_PLUGINS}"), name=name)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = getattr(exc.plugin, "__name__", repr(exc.plugin))
        detail = " ".join(str(exc).split())  # pluggy's message spans lines; the CLI prints one
        raise PluginError(f"plugin {name!r} does not match iotrace's hook specs: {detail}",
                          "see iotrace/plugins/hookspecs.py for the contract") from exc
    return pm


@cache
def kernels() -> dict[str, KernelSpec]:
    """Every kernel from every plugin, by name."""
    pm = plugin_manager()
    found: dict[str, KernelSpec] = {}
    owner: dict[str, str] = {}
    for impl in pm.hook.iotrace_kernels.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)
        specs = impl.function()
        if not isinstance(specs, (list, tuple)):
            raise PluginError(f"plugin {plugin_name!r}: iotrace_kernels returned {type(specs).__name__}",
                              "return a list of KernelSpec instances")
        for spec in specs:
            if not isinstance(spec, KernelSpec) or not spec.name:
                raise PluginError(f"plugin {plugin_name!r} returned {spec!r}, not a named KernelSpec",
                                  "derive from iotrace.plugins.spec.KernelSpec and set `name`")
            if spec.name in found:
                raise PluginError(f"kernel {spec.name!r} is provided by both {owner[spec.name]!r} and {plugin_name!r}",
                                  f"rename one, or unset {ENV_PLUGINS}")
            found[spec.name], owner[spec.name] = spec, plugin_name
    return found


def kernel(name: str) -> KernelSpec:
    """The kernel called ``name``; an unknown name lists the installed ones."""
    found = kernels()
    if name not in found:
        raise PluginError(f"no kernel called {name!r}", f"installed: {', '.join(sorted(found)) or 'none'} "
                                                        "(see `iotrace kernels`)")
    return found[name]
