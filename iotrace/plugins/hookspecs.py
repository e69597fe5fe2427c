"""Hook specifications of iotrace's kernel plugins (pluggy project name ``iotrace``). The docstrings are the contract.

A plugin is any module or object with functions marked ``@iotrace.plugins.hookimpl`` whose names match
the specs below. It reaches iotrace through the ``iotrace`` entry-point group of an installed package,
through ``IOTRACE_PLUGINS=module1,module2`` for local work, or by
``iotrace.plugins.plugin_manager().register(obj)``. An implementation may take fewer parameters than its spec
(pluggy passes only those it names), never one the spec lacks.

A plugin that breaks this contract in any way (its module does not import, a hook does not match its spec or is
not one, a hook raises or returns something else than its spec says) is *broken*: it provides nothing, and is one
line naming the plugin, the hook and the error (:class:`iotrace.plugin_manager.PluginFailure`), listed by
``iotrace kernels`` and printed by a command that asks for it; every other plugin keeps working.
``docs/contributing/plugins.md`` builds a complete plugin package step by step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotrace.plugin_manager import hookspec

if TYPE_CHECKING:
    from iotrace.plugins.spec import KernelSpec

# --- kernels ----------------------------------------------------------------------------------------------


@hookspec
def iotrace_kernels() -> list[KernelSpec]:
    """Return the kernels this plugin provides.

    Parameters: none; iotrace calls the hook without arguments.

    :return: a list (or tuple) of :class:`iotrace.plugins.spec.KernelSpec` instances, each with a non-empty
        ``name`` unique across all plugins. Each class must implement every abstract method of ``KernelSpec``
        (else it cannot be instantiated, and the hook raises). Anything else (an exception, another type, an
        unnamed spec, a name another plugin returned first) makes the plugin broken, with one line naming it,
        this hook and the error (and, for a clash, the plugin that has the name).

    Called once per process, when the kernels are first asked for (the first ``iotrace.plugins.kernels()``), after
    the Triton interpreter has been switched on where no GPU is visible. The shape of a plugin module::

        from iotrace.plugins import KernelSpec, hookimpl

        class MyKernelSpec(KernelSpec):
            name = "my-kernel"
            # and every abstract method of KernelSpec: make_inputs, make_outputs, reference, launch_kernel,
            # tolerance, cost, space, default_config, compile_units

        @hookimpl
        def iotrace_kernels():
            return [MyKernelSpec()]

    ``docs/contributing/plugins.md`` gives a complete plugin (y = 1.5·x in Triton) with its ``pyproject.toml``;
    ``tests/plugins/iotrace_example_kernel.py`` is the same kernel as a single module.
    """
