"""Kernel plugins: the hook specs, the KernelSpec contract and the plugin manager.

Public surface: ``hookimpl`` (mark a plugin's hook functions), ``KernelSpec`` and its records, ``kernels()`` /
``kernel(name)`` to look kernels up, and ``broken()`` for the plugins that failed (``registry()`` holds both).
"""

from iotrace.plugin_manager import hookimpl
from iotrace.plugins.manager import broken, kernel, kernels, plugin_manager, registry
from iotrace.plugins.spec import Cost, CudaUnit, KernelSpec, Tolerance, TritonLaunch, TritonUnit

__all__ = ["Cost", "CudaUnit", "KernelSpec", "Tolerance", "TritonLaunch", "TritonUnit", "broken", "hookimpl", "kernel",
           "kernels", "plugin_manager", "registry"]
