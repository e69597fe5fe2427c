"""Kernel plugins: the hook specs, the KernelSpec contract and the plugin manager.

Public surface: ``hookimpl`` (mark a plugin's hook functions), ``KernelSpec`` and its records, and
``kernels()`` / ``kernel(name)`` to look kernels up.
"""

from iotrace.plugin_manager import hookimpl
from iotrace.plugins.manager import kernel, kernels, plugin_manager
from iotrace.plugins.spec import Cost, CudaUnit, KernelSpec, Tolerance, TritonLaunch, TritonUnit

__all__ = ["Cost", "CudaUnit", "KernelSpec", "Tolerance", "TritonLaunch", "TritonUnit", "hookimpl", "kernel", "kernels",
           "plugin_manager"]
