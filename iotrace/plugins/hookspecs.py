"""Hook specifications of iotrace's kernel plugins (pluggy project name ``iotrace``). The docstrings are the contract.

A plugin is any module or object with functions marked ``@iotrace.plugins.hookimpl`` whose names match
the specs below. It reaches iotrace through the ``iotrace`` entry-point group of an installed package,
through ``IOTRACE_PLUGINS=module1,module2`` for local work, or by
``iotrace.plugins.plugin_manager().register(obj)``. An implementation may take fewer parameters than its spec
(pluggy passes only those it names), never one the spec lacks: that is refused with an error naming the plugin.
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
        ``name`` unique across all plugins. Anything else (another type, an unnamed spec, a name two plugins
        return) is an error naming the plugin (both plugins, for a clash).

    Called once, when the plugin manager is built (the first ``iotrace.plugins.kernels()``), after the Triton
    interpreter has been switched on where no GPU is visible. Use in a plugin module::

        from iotrace.plugins import KernelSpec, hookimpl

        class MyKernelSpec(KernelSpec):
            name = "my-kernel"
            ...

        @hookimpl
        def iotrace_kernels():
            return [MyKernelSpec()]

    ``tests/plugins/iotrace_example_kernel.py`` is a complete plugin (y = a*x in Triton).
    """
