"""Hook specifications of iotrace (pluggy project name ``iotrace``). The docstrings are the contract.

A plugin is any module or object with functions marked ``@iotrace.plugins.hookimpl`` whose names match
the specs below. It reaches iotrace through the ``iotrace`` entry-point group of an installed package,
through ``IOTRACE_PLUGINS=module1,module2`` for local work, or by
``iotrace.plugins.plugin_manager().register(obj)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from iotrace.plugins.spec import KernelSpec

hookspec = pluggy.HookspecMarker("iotrace")

# --- kernels ----------------------------------------------------------------------------------------------


@hookspec
def iotrace_kernels() -> list[KernelSpec]:
    """Return the kernels this plugin provides.

    :return: a list of :class:`iotrace.plugins.spec.KernelSpec` instances; each ``name`` must be unique
        across all plugins (a clash is an error naming both plugins).

    Called once when the plugin manager is built. Use in a plugin module::

        from iotrace.plugins import hookimpl

        @hookimpl
        def iotrace_kernels():
            return [MyKernelSpec()]
    """
