"""The one way iotrace builds a pluggy plugin manager: for kernel plugins and for trace formats alike.

Both managers do the same four things (pluggy's own order, as pytest does it): add the hook specs, register the
built-ins, load the installed entry points of a group (then any modules named for local work), validate every
implementation against its spec; then a hook's results are collected into one dict by name, refusing a wrong
return value or a name two plugins claim.

What happens to a plugin that fails depends on the caller:

- given a ``failures`` list (the kernel plugins), :func:`build` and :func:`collect` record each failing plugin there
  as a :class:`PluginFailure` (plugin, hook, error, fix), leave it out, and carry on with the others: one broken
  plugin never takes the rest down;
- without one (the trace formats), the first failure is raised as a :class:`~iotrace.errors.PluginError`.

Either way the message is one line naming the plugin, the hook (or ``import``) and the error, so the CLI prints it as
one line.

Low in the package on purpose: it imports only pluggy, the standard library and :mod:`iotrace.errors`, so the
plugin layer and the trace layer can both use it without importing each other.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import pluggy

from iotrace.errors import PluginError

__all__ = ["ENV_NO_AUTOLOAD", "PROJECT", "PluginFailure", "build", "collect", "hookimpl", "hookspec",
           "import_plugin"]

#: The pluggy project name of every iotrace hook (kernels and trace formats): one marker pair for both.
PROJECT = "iotrace"
#: Marks a plugin's hook functions, e.g. ``@hookimpl def iotrace_kernels(): ...``.
hookimpl = pluggy.HookimplMarker(PROJECT)
#: Marks iotrace's hook specifications (``iotrace/plugins/hookspecs.py``, ``iotrace/trace/hookspecs.py``).
hookspec = pluggy.HookspecMarker(PROJECT)
#: Set to 1 to skip installed entry points, as pytest's ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``; shared by both groups.
ENV_NO_AUTOLOAD = "IOTRACE_DISABLE_PLUGIN_AUTOLOAD"

T = TypeVar("T")

#: The step before any hook runs, named in a failure's ``hook`` when the plugin's module cannot be imported.
IMPORT = "import"


@dataclass(frozen=True)
class PluginFailure:
    """One plugin iotrace could not use, and why: recorded instead of stopping, so the other plugins keep working.

    ``str(failure)`` (and :attr:`line`) is the one line the CLI prints, e.g. ``plugin 'scale_plugin' (from
    IOTRACE_PLUGINS) is broken: iotrace_kernels raised RuntimeError: boom — fix the plugin's iotrace_kernels, or
    leave it out of IOTRACE_PLUGINS``.
    """

    #: The name the plugin is registered under: its module (built-in, ``IOTRACE_PLUGINS``) or its entry point's name.
    plugin: str
    #: The hook that failed (``iotrace_kernels``), or ``import`` when the module could not be imported at all.
    hook: str
    #: What went wrong, one line, starting with a verb: ``raised RuntimeError: boom``, ``returned dict, ...``.
    error: str
    #: What to do about it.
    fix: str
    #: Where the plugin came from: ``built-in``, ``from IOTRACE_PLUGINS``, ``entry point of iotrace-scale 0.1``.
    source: str = ""
    #: The kind of plugin in the message: ``plugin``, ``trace plugin``.
    what: str = "plugin"
    #: The names of what it would have provided, where they are known (found in its module), so asking for one of
    #: them by name answers with this failure rather than "no such kernel".
    provides: tuple[str, ...] = ()

    @property
    def problem(self) -> str:
        source = f" ({self.source})" if self.source else ""
        return f"{self.what} {self.plugin!r}{source} is broken: {self.hook} {self.error}"

    @property
    def line(self) -> str:
        return f"{self.problem} — {self.fix}" if self.fix else self.problem

    def __str__(self) -> str:
        return self.line

    def as_error(self) -> PluginError:
        """This failure as the :class:`~iotrace.errors.PluginError` the CLI prints (one line, exit 2)."""
        return PluginError(self.problem, self.fix)

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "hook": self.hook, "error": self.error, "fix": self.fix, "source": self.source,
                "provides": list(self.provides), "message": self.line}


class _Failures:
    """Where a build or a collect puts its failures: a caller's list, or raised at once (``into`` is None)."""

    def __init__(self, into: list[PluginFailure] | None) -> None:
        self.into = into

    def add(self, failure: PluginFailure) -> None:
        if self.into is None:
            raise failure.as_error()
        self.into.append(failure)

    def names(self) -> set[str]:
        return {f.plugin for f in self.into or ()}


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (pluggy's and Python's messages may span lines)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def import_plugin(name: str, how: str) -> ModuleType:
    """Import the plugin module ``name``; ``how`` says where the name came from (``built-in``, an env variable).

    :raises PluginError: it cannot be imported (any exception its import raises), one line naming it.
    """
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise _import_failure(name, how, exc).as_error() from exc


def _import_failure(name: str, how: str, exc: BaseException, what: str = "plugin") -> PluginFailure:
    if isinstance(exc, ModuleNotFoundError) and exc.name is not None and name.startswith(exc.name):
        fix = "check the module name, and that its folder is on sys.path (PYTHONPATH) or its package is installed"
    elif isinstance(exc, ModuleNotFoundError) and exc.name is not None:
        fix = f"install {exc.name.partition('.')[0]!r}, which the plugin imports, or remove the plugin"
    else:
        fix = "fix the error in the plugin's module (or what it imports), or remove the plugin"
    return PluginFailure(name, IMPORT, f"raised {_one_line(exc)}", fix, how, what)


def _hook_of(exc: pluggy.PluginValidationError) -> str:
    """The hook a pluggy validation error is about (its message names it), else ``register``."""
    found = re.search(r"hook '(\w+)'", str(exc))
    return found.group(1) if found else "register"


def _register(pm: pluggy.PluginManager, plugin: object, name: str, source: str, failures: _Failures, *, what: str,
              contract: str, contract_file: str) -> bool:
    """Register ``plugin`` as ``name``; a hook that does not match its spec (or no spec at all) is a failure."""
    if pm.is_registered(plugin) or pm.has_plugin(name):
        return False  # the same module named twice (an entry point and IOTRACE_PLUGINS): once is enough
    see = f"see {contract_file} for the contract" if contract_file else f"match {contract}"
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:  # pluggy validated before registering: nothing of it is left behind
        detail = re.sub(r"^Plugin '.*?' for hook '\w+' ", "", " ".join(str(exc).split()))  # both named already
        failures.add(PluginFailure(name, _hook_of(exc), f"does not match {contract}: {detail}", see, source, what))
        return False
    except ValueError as exc:  # pluggy: already registered under another name
        failures.add(PluginFailure(name, "register", f"raised {_one_line(exc)}", "name the plugin once", source,
                                   what))
        return False
    for caller in pm.get_hookcallers(plugin) or ():
        if caller.has_spec():
            continue
        impls = [i for i in caller.get_hookimpls() if i.plugin is plugin and not i.optionalhook]
        if impls:  # a misspelt hook would never be called: refuse it rather than ignore the plugin silently
            pm.unregister(plugin)
            failures.add(PluginFailure(name, caller.name, f"is not a hook of {contract}",
                                       f"{see}; mark an extra hook @hookimpl(optionalhook=True)", source, what))
            return False
    return True


def build(specs: ModuleType, builtins: Iterable[tuple[str, object]], entry_point_group: str, *,
          what: str = "plugin", installed: str = "plugin", contract: str = "iotrace's hook specs",
          contract_file: str = "", modules: Iterable[tuple[str, str]] = (),
          failures: list[PluginFailure] | None = None, sources: dict[str, str] | None = None) -> pluggy.PluginManager:
    """A validated plugin manager: ``specs`` added, ``builtins`` registered, ``entry_point_group`` loaded, then
    ``modules`` imported and registered.

    :param specs: the module holding the ``@hookspec`` functions.
    :param builtins: (name, plugin) pairs registered first, in order; a plugin given as a string is a module name,
        imported when its turn comes (as is any module of ``modules``).
    :param entry_point_group: the setuptools entry-point group of installed plugins; skipped when
        ``IOTRACE_DISABLE_PLUGIN_AUTOLOAD=1``. Each is loaded on its own: one that fails does not stop the next.
    :param what: the kind of plugin in messages, e.g. ``"plugin"`` or ``"trace plugin"``.
    :param installed: the kind of installed plugin in an import failure, e.g. ``"trace-format plugin"``.
    :param contract: what a plugin must match, in messages, e.g. ``"iotrace's hook specs"``.
    :param contract_file: the file documenting the contract, named in the fix of a validation error.
    :param modules: (module name, where the name came from) pairs registered after the entry points, each under
        its module name (e.g. the modules named in an env variable).
    :param failures: where to record each plugin that cannot be imported or does not match its spec (it is then
        left out, and the others are registered); None raises the first instead.
    :param sources: filled with plugin name -> where it came from (``built-in``, an entry point, ...), for
        :func:`collect`'s messages.
    :raises PluginError: without ``failures``, the first plugin that cannot be imported or does not match.
    """
    record = _Failures(failures)
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(specs)
    checks = {"what": what, "contract": contract, "contract_file": contract_file}
    where = sources if sources is not None else {}

    def load(name: str, plugin: object, source: str) -> None:
        if isinstance(plugin, str):
            try:
                plugin = importlib.import_module(plugin)
            except Exception as exc:
                record.add(_import_failure(name, source, exc, what))
                return
        if _register(pm, plugin, name, source, record, **checks):
            where[name] = source

    for name, plugin in builtins:
        load(name, plugin, "built-in")
    if os.environ.get(ENV_NO_AUTOLOAD) != "1":
        for dist, ep in _entry_points(entry_point_group):
            if pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
                continue
            source = f"entry point '{ep.name} = {ep.value}' of {dist}"
            try:
                plugin = ep.load()
            except Exception as exc:
                record.add(PluginFailure(ep.name, IMPORT, f"raised {_one_line(exc)}",
                                         f"reinstall or uninstall {dist.split()[0]} (an iotrace {installed}), or set "
                                         f"{ENV_NO_AUTOLOAD}=1", source, what))
                continue
            if _register(pm, plugin, ep.name, source, record, **checks):
                where[ep.name] = source
    for name, how in modules:
        if not pm.has_plugin(name):
            load(name, name, how)  # a module an entry point registered already is skipped by _register
    return pm


def _entry_points(group: str) -> Iterable[tuple[str, importlib.metadata.EntryPoint]]:
    """(``name version`` of the distribution, entry point) for every installed entry point of ``group``."""
    for ep in importlib.metadata.entry_points(group=group):
        yield (f"{ep.dist.metadata['Name']} {ep.dist.version}" if ep.dist is not None else "an unknown package"), ep


def _provides(plugin: object, kind: type) -> tuple[str, ...]:
    """The names of the ``kind`` subclasses a plugin module defines (what a broken plugin meant to provide)."""
    module = getattr(plugin, "__name__", None)
    found: list[str] = []
    for value in list(vars(plugin).values()) if hasattr(plugin, "__dict__") else ():
        if (isinstance(value, type) and issubclass(value, kind) and value is not kind
                and value.__module__ == module and isinstance(getattr(value, "name", None), str) and value.name):
            found.append(value.name)
    return tuple(dict.fromkeys(found))


def collect(pm: pluggy.PluginManager, hook: str, kind: type[T], *, what: str = "plugin", noun: str,
            clash_fix: str = "rename one", failures: list[PluginFailure] | None = None,
            sources: dict[str, str] | None = None, owners: dict[str, str] | None = None) -> dict[str, T]:
    """Call every implementation of the no-argument hook ``hook`` and gather what they return, by ``name``.

    Each implementation must return a list (or tuple) of named ``kind`` instances; a name two plugins return is
    an error naming both. The dict keeps registration order (built-ins first), so ties in any later sort stay put.
    A plugin either provides everything it returns or, when anything about it is wrong, nothing.

    :param what: the kind of plugin in messages (``"plugin"``, ``"trace plugin"``).
    :param noun: what the items are in messages (``"kernel"``, ``"trace format"``).
    :param clash_fix: the fix offered when two plugins return the same name.
    :param failures: where to record a plugin whose hook raises, returns something else, or returns a name taken
        (the later plugin is recorded, the earlier keeps the name); None raises the first instead. Plugins already
        recorded there (by :func:`build`) are not called.
    :param sources: plugin name -> where it came from, for the messages.
    :param owners: filled with item name -> the plugin that provided it.
    :raises PluginError: without ``failures``, the first wrong return value, unnamed item, or name clash.
    """
    record = _Failures(failures)
    skip = record.names()
    found: dict[str, T] = {}
    owner: dict[str, str] = {}
    for impl in getattr(pm.hook, hook).get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or repr(impl.plugin)
        if plugin_name in skip:
            continue
        provided = _check_one(impl.function, hook, kind, found, owner, noun)
        if isinstance(provided, tuple):
            error, fix = provided
            record.add(PluginFailure(plugin_name, hook, error, fix or clash_fix, (sources or {}).get(plugin_name, ""),
                                     what, _provides(impl.plugin, kind)))
            continue
        for name, item in provided.items():
            found[name], owner[name] = item, plugin_name
    if owners is not None:
        owners.update(owner)
    return found


def _check_one(function: Any, hook: str, kind: type[T], found: dict[str, T], owner: dict[str, str],
               noun: str) -> dict[str, T] | tuple[str, str]:
    """Call one implementation: what it provides by name, or (error, fix) when anything about it is wrong (a fix of
    "" is a name clash, whose fix the caller knows)."""
    kind_name, contract = kind.__name__, f"{kind.__module__}.{kind.__name__}"
    try:
        given: Any = function()
    except Exception as exc:
        if isinstance(exc, TypeError) and "abstract" in str(exc):
            return f"raised {_one_line(exc)}", f"implement every abstract method of {contract}"
        return f"raised {_one_line(exc)}", f"fix the plugin's {hook}, or remove the plugin"
    if not isinstance(given, (list, tuple)):
        return (f"returned {type(given).__name__}, not a list of {kind_name}",
                f"return a list of {kind_name} instances")
    mine: dict[str, T] = {}
    for item in given:
        if not isinstance(item, kind) or not getattr(item, "name", ""):
            return f"returned {_short_repr(item)}, not a named {kind_name}", f"derive from {contract} and set `name`"
        name: str = item.name  # type: ignore[attr-defined]  # checked just above
        if name in mine:
            return f"returned {noun} {name!r} twice", "return each name once"
        if name in found:
            return f"returned {noun} {name!r}, which {owner[name]!r} provides too", ""
        mine[name] = item
    return mine


def _short_repr(value: object, limit: int = 80) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
