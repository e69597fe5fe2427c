"""Hook specification of inference engines (pluggy project name ``iotrace``). The docstring is the contract.

A plugin adds an engine (SGLang, ExLlama, LocalAI, TensorRT-LLM, ...) by returning
:class:`iotrace.engines.engine_def.EngineDef` records. It reaches iotrace through the ``iotrace.engines``
entry-point group of an installed package (a group of its own, so listing engines never imports kernel plugins or
Triton), through ``IOTRACE_ENGINE_PLUGINS=module1,module2`` for local work, or by
``iotrace.engines.registry.engine_plugin_manager().register(obj)`` followed by
``iotrace.engines.registry.reload(rebuild=False)``.

A plugin that breaks this contract in any way (its module does not import, the hook does not match its spec or is not
one, the hook raises or returns something else, an engine name or alias another plugin has) is *broken*: it provides
no engine, and is one line naming the plugin, the hook and the error (:class:`iotrace.plugin_manager.PluginFailure`);
the built-in engines and every other plugin keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.plugin_manager import hookimpl, hookspec

if TYPE_CHECKING:
    from iotrace.engines.engine_def import EngineDef

__all__ = ["hookimpl", "hookspec", "iotrace_engines"]  # hookimpl: the one marker, also importable from here

# --- engines ----------------------------------------------------------------------------------------------


@hookspec
def iotrace_engines() -> list[EngineDef]:
    """Return the engines this plugin provides.

    Parameters: none; iotrace calls the hook without arguments.

    :return: a list (or tuple) of :class:`iotrace.engines.engine_def.EngineDef` records, each with a ``name`` (lower
        case) unique across all plugins, and ``aliases`` that are no other engine's name or alias. ``EngineDef``
        checks its own fields when made, so a wrong one raises in the hook. Anything else (an exception, another
        type, a name or alias another plugin returned first) makes the plugin broken, with one line naming it, this
        hook and the error (and, for a clash, the plugin that has the name).

    Called once per process when the engines are first asked for (``iotrace.engines.registry.registry()``), after
    the built-in engines (iotrace, transformers, vllm, llama.cpp), which keep their names. The hook only describes:
    it must not start or import the engine, which runs in its own interpreter. A plugin module::

        from iotrace.engines.registry import EngineDef, ServeArgs, dist_version, hookimpl

        def sglang_argv(args: ServeArgs) -> list[str]:
            return [str(args.python), "-m", "sglang.launch_server", "--model-path", str(args.model_dir),
                    "--host", args.host, "--port", str(args.port), "--context-length", str(args.context),
                    *args.extra_args]

        @hookimpl
        def iotrace_engines():
            return [EngineDef(name="sglang", summary="SGLang's OpenAI-compatible server", own_venv=True,
                              model_format="hf", server_argv=sglang_argv, ready_path="/v1/models",
                              version_of=lambda python: dist_version(python, "sglang"))]

    ``docs/contributing/plugins.md`` (section "An engine plugin") gives it complete, with how to load it.
    """
