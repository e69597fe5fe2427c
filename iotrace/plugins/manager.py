"""Build the kernel plugin manager: built-in kernels, installed entry points, and ``IOTRACE_PLUGINS`` modules.

Nothing is registered at import; :func:`plugin_manager` does the work once, when first asked. The building,
validating and collecting is :mod:`iotrace.plugin_manager`'s, shared with the trace formats.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cache

import pluggy

from iotrace.errors import PluginError
from iotrace.plugin_manager import ENV_NO_AUTOLOAD, build, collect, import_plugin
from iotrace.plugins import hookspecs
from iotrace.plugins.spec import KernelSpec

__all__ = ["BUILTIN_PLUGINS", "ENV_NO_AUTOLOAD", "ENV_PLUGINS", "kernel", "kernels", "plugin_manager",
           "prepare_triton"]

#: Modules shipped with iotrace that register kernels: loaded by name, like any plugin, so this layer holds no
#: import of the kernels layer above it.
BUILTIN_PLUGINS = ("iotrace.kernels.gemm", "iotrace.kernels.rmsnorm", "iotrace.kernels.attention_prefill",
                   "iotrace.kernels.attention_decode", "iotrace.kernels.draft_verify", "iotrace.kernels.int8_kv",
                   "iotrace.kernels.rope", "iotrace.kernels.swiglu", "iotrace.kernels.gemm_decode")
#: Comma-separated modules to load as plugins (local work, tests).
ENV_PLUGINS = "IOTRACE_PLUGINS"
ENTRY_POINT_GROUP = "iotrace"


def prepare_triton() -> None:
    """Turn the Triton interpreter on when no CUDA device is visible and the user has not chosen.

    Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, i.e. when a plugin module is
    imported, so it is decided here, before the plugin manager imports any (built-in or third-party); an explicit
    ``TRITON_INTERPRET`` always wins.
    """
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 1 keeps its default
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch  # here, not at the top: importing iotrace.plugins must stay light

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def _builtins() -> Iterator[tuple[str, object]]:
    for name in BUILTIN_PLUGINS:
        yield name, import_plugin(name, "built-in")


def _env_plugins(pm: pluggy.PluginManager) -> None:
    for name in filter(None, (n.strip() for n in os.environ.get(ENV_PLUGINS, "").split(","))):
        if pm.get_plugin(name) is None:
            pm.register(import_plugin(name, f"from {ENV_PLUGINS}"), name=name)


@cache
def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, validated: every hook implementation matches a spec."""
    prepare_triton()  # before any @triton.jit runs: interpreter on when there is no GPU
    return build(hookspecs, _builtins(), ENTRY_POINT_GROUP, after_entry_points=_env_plugins,
                 contract_file="iotrace/plugins/hookspecs.py")


@cache
def kernels() -> dict[str, KernelSpec]:
    """Every kernel from every plugin, by name."""
    return collect(plugin_manager(), "iotrace_kernels", KernelSpec, noun="kernel",
                   clash_fix=f"rename one, or unset {ENV_PLUGINS}")


def kernel(name: str) -> KernelSpec:
    """The kernel called ``name``; an unknown name lists the installed ones."""
    found = kernels()
    if name not in found:
        raise PluginError(f"no kernel called {name!r}", f"installed: {', '.join(sorted(found)) or 'none'} "
                                                        "(see `iotrace kernels`)")
    return found[name]
