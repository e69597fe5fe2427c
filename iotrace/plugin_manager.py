"""The one way iotrace builds a pluggy plugin manager: for kernel plugins and for trace formats alike.

Both managers do the same four things (pluggy's own order, as pytest does it): add the hook specs, register the
built-ins, load the installed entry points of a group, validate every implementation against its spec; then a
hook's results are collected into one dict by name, refusing a wrong return value or a name two plugins claim.
Every failure is a :class:`~iotrace.errors.PluginError` naming the plugin, so the CLI prints it as one line.

Low in the package on purpose: it imports only pluggy, the standard library and :mod:`iotrace.errors`, so the
plugin layer and the trace layer can both use it without importing each other.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar

import pluggy

from iotrace.errors import PluginError

__all__ = ["ENV_NO_AUTOLOAD", "PROJECT", "build", "collect", "hookimpl", "hookspec", "import_plugin"]

#: The pluggy project name of every iotrace hook (kernels and trace formats): one marker pair for both.
PROJECT = "iotrace"
#: Marks a plugin's hook functions, e.g. ``@hookimpl def iotrace_kernels(): ...``.
hookimpl = pluggy.HookimplMarker(PROJECT)
#: Marks iotrace's hook specifications (``iotrace/plugins/hookspecs.py``, ``iotrace/trace/hookspecs.py``).
hookspec = pluggy.HookspecMarker(PROJECT)
#: Set to 1 to skip installed entry points, as pytest's ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``; shared by both groups.
ENV_NO_AUTOLOAD = "IOTRACE_DISABLE_PLUGIN_AUTOLOAD"

T = TypeVar("T")


def import_plugin(name: str, how: str) -> ModuleType:
    """Import the plugin module ``name``; ``how`` says where the name came from (``built-in``, an env variable)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PluginError(f"plugin module {name!r} ({how}) cannot be imported: {exc}",
                          "check the module name and that its package is installed") from exc


def build(specs: ModuleType, builtins: Iterable[tuple[str, object]], entry_point_group: str, *,
          what: str = "plugin", installed: str = "plugin", contract: str = "iotrace's hook specs",
          contract_file: str = "",
          after_entry_points: Callable[[pluggy.PluginManager], None] | None = None) -> pluggy.PluginManager:
    """A validated plugin manager: ``specs`` added, ``builtins`` registered, ``entry_point_group`` loaded.

    :param specs: the module holding the ``@hookspec`` functions.
    :param builtins: (name, plugin object) pairs registered first, in order; an iterable, so a generator can
        import each module only when its turn comes.
    :param entry_point_group: the setuptools entry-point group of installed plugins; skipped when
        ``IOTRACE_DISABLE_PLUGIN_AUTOLOAD=1``.
    :param what: the kind of plugin in messages, e.g. ``"plugin"`` or ``"trace plugin"``.
    :param installed: the kind of installed plugin in an import failure, e.g. ``"trace-format plugin"``.
    :param contract: what a plugin must match, in messages, e.g. ``"iotrace's hook specs"``.
    :param contract_file: the file documenting the contract, named in the fix of a validation error.
    :param after_entry_points: registers more plugins after the entry points (e.g. modules named in an env var).
    :raises PluginError: a module cannot be imported or a hook implementation does not match its spec.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(specs)
    try:
        for name, plugin in builtins:
            pm.register(plugin, name=name)
        if os.environ.get(ENV_NO_AUTOLOAD) != "1":
            try:
                pm.load_setuptools_entrypoints(entry_point_group)
            except ImportError as exc:
                raise PluginError(f"an installed iotrace {installed} cannot be imported: {exc}",
                                  f"reinstall or remove it, or set {ENV_NO_AUTOLOAD}=1") from exc
        if after_entry_points is not None:
            after_entry_points(pm)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = getattr(exc.plugin, "__name__", repr(exc.plugin))
        detail = " ".join(str(exc).split())  # pluggy's message spans lines; the CLI prints one
        raise PluginError(f"{what} {name!r} does not match {contract}: {detail}",
                          f"see {contract_file} for the contract") from exc
    return pm


def collect(pm: pluggy.PluginManager, hook: str, kind: type[T], *, what: str = "plugin", noun: str,
            clash_fix: str = "rename one") -> dict[str, T]:
    """Call every implementation of the no-argument hook ``hook`` and gather what they return, by ``name``.

    Each implementation must return a list (or tuple) of named ``kind`` instances; a name two plugins return is
    an error naming both. The dict keeps registration order (built-ins first), so ties in any later sort stay put.

    :param what: the kind of plugin in messages (``"plugin"``, ``"trace plugin"``).
    :param noun: what the items are in messages (``"kernel"``, ``"trace format"``).
    :param clash_fix: the fix offered when two plugins return the same name.
    :raises PluginError: a wrong return value, an unnamed item, or a name clash.
    """
    found: dict[str, T] = {}
    owner: dict[str, str] = {}
    kind_name = kind.__name__
    for impl in getattr(pm.hook, hook).get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)
        given: Any = impl.function()
        if not isinstance(given, (list, tuple)):
            raise PluginError(f"{what} {plugin_name!r}: {hook} returned {type(given).__name__}",
                              f"return a list of {kind_name} instances")
        for item in given:
            if not isinstance(item, kind) or not getattr(item, "name", ""):
                raise PluginError(f"{what} {plugin_name!r} returned {item!r}, not a named {kind_name}",
                                  f"derive from {kind.__module__}.{kind_name} and set `name`")
            name = item.name  # type: ignore[attr-defined]  # checked just above
            if name in found:
                raise PluginError(f"{noun} {name!r} is provided by both {owner[name]!r} and {plugin_name!r}",
                                  clash_fix)
            found[name], owner[name] = item, plugin_name
    return found
