"""Build the kernel plugin manager: built-in kernels, installed entry points, and ``IOTRACE_PLUGINS`` modules.

Nothing is registered at import; :func:`registry` does the work once, when first asked. The building, validating
and collecting is :mod:`iotrace.plugin_manager`'s, shared with the trace formats. A broken plugin never stops the
others: it is recorded in :func:`broken` (one line each: plugin, hook, error, fix) and provides no kernel;
:func:`kernel` answers its name with that line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import pluggy

from iotrace.errors import PluginError
from iotrace.plugin_manager import ENV_NO_AUTOLOAD, PluginFailure, build, collect
from iotrace.plugins import hookspecs
from iotrace.plugins.spec import KernelSpec

__all__ = ["BUILTIN_PLUGINS", "ENV_NO_AUTOLOAD", "ENV_PLUGINS", "KernelRegistry", "PluginFailure", "broken", "kernel",
           "kernels", "plugin_manager", "prepare_triton", "registry"]

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


def _env_modules() -> list[tuple[str, str]]:
    """The modules named in ``IOTRACE_PLUGINS``, with where their name came from."""
    return [(name, f"from {ENV_PLUGINS}")
            for name in dict.fromkeys(filter(None, (n.strip() for n in os.environ.get(ENV_PLUGINS, "").split(","))))]


@dataclass(frozen=True)
class KernelRegistry:
    """Every kernel plugin as loaded: the kernels of the good ones, and the broken ones with why.

    A plugin that cannot be imported, does not match the hook specs, whose hook raises or returns something else
    than named :class:`KernelSpec` instances (an abstract spec cannot even be made), or that returns a kernel name
    another plugin took, is one :class:`~iotrace.plugin_manager.PluginFailure` in :attr:`broken` and provides no
    kernel; every other plugin's kernels are in :attr:`kernels`.
    """

    #: The good kernels, by name, in registration order (built-ins first).
    kernels: dict[str, KernelSpec]
    #: Kernel name -> the plugin that provides it (the module, or the entry point's name).
    owners: dict[str, str]
    #: Plugin name -> where it came from (``built-in``, ``from IOTRACE_PLUGINS``, an entry point of a package).
    sources: dict[str, str]
    #: The plugins that failed, in the order they failed.
    broken: tuple[PluginFailure, ...]

    def failure(self, name: str) -> PluginFailure | None:
        """The failure of the broken plugin called ``name``, or of the one whose module defines a kernel ``name``."""
        for failure in self.broken:
            if name == failure.plugin or name in failure.provides:
                return failure
        return None

    def kernel(self, name: str) -> KernelSpec:
        """The kernel called ``name``.

        :raises PluginError: ``name`` is a broken plugin or a kernel of one: its one line (plugin, hook, error, fix);
            else an unknown name, listing the installed kernels and any broken plugin (it may be the one meant).
        """
        if name in self.kernels:
            return self.kernels[name]
        failure = self.failure(name)
        if failure is not None:
            raise failure.as_error()
        fix = f"installed: {', '.join(sorted(self.kernels)) or 'none'} (see `iotrace kernels`)"
        if len(self.broken) == 1:  # it may be the one meant: say why it is not listed
            fix += f"; not listed, as broken: {self.broken[0].line}"
        elif self.broken:
            fix += (f"; not listed, as broken: {', '.join(f.plugin for f in self.broken)} (`iotrace run PLUGIN` or "
                    "`iotrace kernels` says why)")
        raise PluginError(f"no kernel called {name!r}", fix)


@cache
def _built() -> tuple[pluggy.PluginManager, tuple[PluginFailure, ...], dict[str, str]]:
    prepare_triton()  # before any @triton.jit runs: interpreter on when there is no GPU
    failures: list[PluginFailure] = []
    sources: dict[str, str] = {}
    pm = build(hookspecs, ((name, name) for name in BUILTIN_PLUGINS), ENTRY_POINT_GROUP, modules=_env_modules(),
               contract_file="iotrace/plugins/hookspecs.py", failures=failures, sources=sources)
    return pm, tuple(failures), sources


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager: every plugin that imported and whose hooks match a spec (the others are in
    :func:`registry`'s ``broken``)."""
    return _built()[0]


@cache
def registry() -> KernelRegistry:
    """Every kernel plugin, loaded once per process: the good kernels and the broken plugins."""
    pm, failed, sources = _built()
    failures = list(failed)
    owners: dict[str, str] = {}
    found = collect(pm, "iotrace_kernels", KernelSpec, noun="kernel",
                    clash_fix="rename one, or remove one of the two plugins", failures=failures, sources=sources,
                    owners=owners)
    return KernelRegistry(found, owners, sources, tuple(failures))


def kernels() -> dict[str, KernelSpec]:
    """Every kernel of every plugin that works, by name (:func:`broken` says which plugins do not)."""
    return registry().kernels


def broken() -> tuple[PluginFailure, ...]:
    """The plugins that failed to load or to provide their kernels, each with its one-line reason."""
    return registry().broken


def kernel(name: str) -> KernelSpec:
    """The kernel called ``name``; a broken plugin's name (or one of its kernels) raises its one-line failure, an
    unknown name lists the installed ones."""
    return registry().kernel(name)
