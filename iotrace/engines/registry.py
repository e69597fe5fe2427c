"""The engines' plugin manager: the built-in engines, ``iotrace.engines`` entry points and ``IOTRACE_ENGINE_PLUGINS``
modules, built by :mod:`iotrace.plugin_manager` exactly as the kernel plugins are.

Nothing is loaded at import; :func:`registry` does the work once, when first asked. A broken engine plugin never
stops the others: it is one :class:`~iotrace.plugin_manager.PluginFailure` in :attr:`EngineRegistry.broken` (one line:
plugin, hook, error, fix) and provides no engine; asking for one of its engines by name answers with that line.

Its own env variable and entry-point group (not the kernels' ``IOTRACE_PLUGINS``/``iotrace``): a kernel plugin's
manager refuses a module whose hooks are not kernel hooks, and listing engines must not import Triton.

``python -m iotrace.engines.registry`` lists the engines and the broken plugins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import pluggy

from iotrace.engines import hookspecs
from iotrace.engines.engine_def import EngineDef, ServeArgs, default_python, dist_version
from iotrace.errors import InvalidValueError
from iotrace.plugin_manager import ENV_NO_AUTOLOAD, PluginFailure, build, collect, hookimpl

__all__ = ["BUILTIN_PLUGINS", "ENTRY_POINT_GROUP", "ENV_ENGINE_PLUGINS", "ENV_NO_AUTOLOAD", "EngineDef",
           "EngineRegistry", "PluginFailure", "ServeArgs", "broken", "dist_version", "engine", "engine_plugin_manager",
           "engines", "hookimpl", "listing", "registry", "reload"]

#: Modules shipped with iotrace that register engines, loaded by name like any plugin.
BUILTIN_PLUGINS = ("iotrace.engines.builtins",)
#: The entry-point group of installed engine plugins.
ENTRY_POINT_GROUP = "iotrace.engines"
#: Comma-separated modules to load as engine plugins (local work, tests).
ENV_ENGINE_PLUGINS = "IOTRACE_ENGINE_PLUGINS"
_HOOK = "iotrace_engines"
_WHAT = "engine plugin"


@dataclass(frozen=True)
class EngineRegistry:
    """Every engine plugin as loaded: the engines of the good ones, and the broken ones with why."""

    #: The good engines by name, in registration order (built-ins first: the order tables list them).
    engines: dict[str, EngineDef]
    #: Alias -> engine name (``llama-cpp`` -> ``llama.cpp``).
    aliases: dict[str, str]
    #: Engine name -> the plugin that provides it (its module, or the entry point's name).
    owners: dict[str, str]
    #: Plugin name -> where it came from (``built-in``, ``from IOTRACE_ENGINE_PLUGINS``, an entry point).
    sources: dict[str, str]
    #: The plugins that failed, in the order they failed.
    broken: tuple[PluginFailure, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.engines)

    def resolve(self, name: str) -> str:
        """``name`` lower-cased and with an alias replaced by its engine's name (unchecked otherwise)."""
        name = name.strip().lower()
        return self.aliases.get(name, name)

    def failure(self, name: str) -> PluginFailure | None:
        """The failure of the broken plugin called ``name`` (engines of a broken plugin are not known by name)."""
        return next((f for f in self.broken if f.plugin == name), None)

    def unknown(self, name: str) -> str:
        """What to do about an unknown engine: the names to use, and why a broken plugin's are not among them."""
        fix = f"use one of {', '.join(self.engines)}"
        if self.broken:
            fix += "; not listed, as broken: " + "; ".join(f.line for f in self.broken)
        return fix

    def engine(self, name: str) -> EngineDef:
        """The engine called ``name`` (or an alias of it).

        :raises PluginError: ``name`` is a broken plugin: its one line.
        :raises InvalidValueError: an unknown name, listing the engines (and any broken plugin).
        """
        resolved = self.resolve(name)
        if resolved in self.engines:
            return self.engines[resolved]
        failure = self.failure(name)
        if failure is not None:
            raise failure.as_error()
        raise InvalidValueError(f"unknown engine {resolved!r}", self.unknown(name))


def _env_modules() -> list[tuple[str, str]]:
    return [(name, f"from {ENV_ENGINE_PLUGINS}") for name in
            dict.fromkeys(filter(None, (n.strip() for n in os.environ.get(ENV_ENGINE_PLUGINS, "").split(","))))]


@cache
def _built() -> tuple[pluggy.PluginManager, tuple[PluginFailure, ...], dict[str, str]]:
    failures: list[PluginFailure] = []
    sources: dict[str, str] = {}
    pm = build(hookspecs, ((name, name) for name in BUILTIN_PLUGINS), ENTRY_POINT_GROUP, what=_WHAT,
               installed=_WHAT, contract="iotrace's engine hook spec", contract_file="iotrace/engines/hookspecs.py",
               modules=_env_modules(), failures=failures, sources=sources)
    return pm, tuple(failures), sources


def engine_plugin_manager() -> pluggy.PluginManager:
    """The process-wide engine plugin manager, validated. An object registered on it directly
    (``engine_plugin_manager().register(obj)``) is seen after ``reload(rebuild=False)``."""
    return _built()[0]


def _check_aliases(found: dict[str, EngineDef], owners: dict[str, str], sources: dict[str, str],
                   failures: list[PluginFailure]) -> dict[str, str]:
    """Alias -> name, plugin by plugin in registration order; a plugin whose name or alias an earlier one claims (or
    that claims one twice) is recorded broken and its engines removed from ``found``."""
    claimed: dict[str, tuple[str, str]] = {}  # a name or an alias -> (engine, plugin) that has it
    aliases: dict[str, str] = {}
    plugins = list(dict.fromkeys(owners[name] for name in found))
    for plugin in plugins:
        mine = [defn for name, defn in found.items() if owners[name] == plugin]
        claims = [(defn.name, defn.name) for defn in mine] + [(a, defn.name) for defn in mine for a in defn.aliases]
        clash = None
        seen: set[str] = set()
        for word, engine_name in claims:
            if word in claimed:
                other_engine, other = claimed[word]
                if word != engine_name:
                    clash = f"returned alias {word!r} of {engine_name!r}, which {other!r} has for {other_engine!r}"
                else:  # two names are collect's clash: this name is an earlier engine's alias
                    clash = f"returned engine {word!r}, which {other!r} has as an alias of {other_engine!r}"
                break
            if word in seen:
                clash = f"returned the name or alias {word!r} twice"
                break
            seen.add(word)
        if clash:
            failures.append(PluginFailure(plugin, _HOOK, clash, "rename one, or remove one of the two plugins",
                                          sources.get(plugin, ""), _WHAT))
            for defn in mine:
                del found[defn.name]
            continue
        for word, engine_name in claims:
            claimed[word] = (engine_name, plugin)
            if word != engine_name:
                aliases[word] = engine_name
    return aliases


@cache
def registry() -> EngineRegistry:
    """Every engine plugin, loaded once per process (:func:`reload` loads again): the good engines and the broken
    plugins."""
    pm, failed, sources = _built()
    failures = list(failed)
    owners: dict[str, str] = {}
    found = collect(pm, _HOOK, EngineDef, what=_WHAT, noun="engine",
                    clash_fix="rename one, or remove one of the two plugins", failures=failures, sources=sources,
                    owners=owners)
    aliases = _check_aliases(found, owners, sources, failures)
    return EngineRegistry(found, aliases, {k: v for k, v in owners.items() if k in found}, dict(sources),
                          tuple(failures))


def reload(rebuild: bool = True) -> EngineRegistry:
    """Ask the plugins for their engines again: with ``rebuild``, load the plugins afresh too (after
    ``IOTRACE_ENGINE_PLUGINS`` changed, in tests), which forgets objects registered directly; without, keep the
    plugin manager (after ``engine_plugin_manager().register(obj)``)."""
    if rebuild:
        _built.cache_clear()
    registry.cache_clear()
    return registry()


def engines() -> dict[str, EngineDef]:
    """Every engine of every plugin that works, by name (:func:`broken` says which plugins do not)."""
    return registry().engines


def broken() -> tuple[PluginFailure, ...]:
    """The engine plugins that failed, each with its one-line reason."""
    return registry().broken


def engine(name: str) -> EngineDef:
    """The engine called ``name`` or an alias of it; an unknown name lists the engines, a broken plugin's name
    raises its line."""
    return registry().engine(name)


def listing() -> list[dict[str, object]]:
    """One row per engine, for a listing: name, aliases, default interpreter, offline, server, plugin."""
    reg = registry()
    rows: list[dict[str, object]] = []
    for name, defn in reg.engines.items():
        python = default_python(defn)
        rows.append({"name": name, "aliases": list(defn.aliases), "summary": defn.summary,
                     "interpreter": str(python), "installed": python.exists(), "offline": defn.offline,
                     "server": defn.serves, "ready_path": defn.ready_path if defn.serves else None,
                     "no_server": None if defn.serves else defn.why_no_server(),
                     "plugin": reg.owners.get(name, ""), "source": reg.sources.get(reg.owners.get(name, ""), "")})
    return rows


def _main() -> int:
    for row in listing():
        aliases = f" (also {', '.join(row['aliases'])})" if row["aliases"] else ""  # type: ignore[arg-type]
        server = f"server, ready at {row['ready_path']}" if row["server"] else row["no_server"]
        print(f"{row['name']}{aliases}: {'offline, ' if row['offline'] else ''}{server}; "
              f"{row['interpreter']}{'' if row['installed'] else ' (not installed)'}; plugin {row['plugin']} "
              f"({row['source']})")
    for failure in broken():
        print(f"broken: {failure.line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
