"""Compile a kernel config for a card's target on the CPU and read its static resources.

Triton kernels are cross-compiled with ``triton.compile`` for a ``GPUTarget`` (no GPU needed) and ptxas's ``-v``
log gives registers, spills and barriers; CUDA C++ kernels go through ``nvcc -cubin -Xptxas -v``. Resources feed
``iotrace.occupancy`` unchanged, so a Triton kernel and a CUDA kernel are judged by the same rules.

The package, one concern a module (imports run top to bottom, no circles):

- :mod:`~iotrace.compiler.errors`: :class:`CompileError`, :class:`ToolMissingError`;
- :mod:`~iotrace.compiler.resources`: the :class:`Resources` record and :func:`parse_ptxas_log`;
- :mod:`~iotrace.compiler.triton_target`: one Triton unit compiled inside a worker;
- :mod:`~iotrace.compiler.nvcc`: one CUDA C++ unit compiled with nvcc;
- :mod:`~iotrace.compiler.disk_cache`: results cached on disk by (kernel source, launch, target, compiler);
- :mod:`~iotrace.compiler.pool`: :func:`compile_each` and :func:`compile_resources`, the fan-out over workers;
- :mod:`~iotrace.compiler.worker`: the worker process, ``python -m iotrace.compiler``.
- :mod:`~iotrace.compiler.mma`: the matrix (Tensor Core) instructions a unit compiles to, PTX and SASS.
"""

from __future__ import annotations

from iotrace.compiler.disk_cache import CACHE_SCHEMA, cache_dir, iotrace_cache_root, package_source
from iotrace.compiler.errors import CompileError, ToolMissingError
from iotrace.compiler.nvcc import nvcc_path
from iotrace.compiler.pool import COMPILE_TIMEOUT_S, UNITS_PER_WORKER, CompileBatch, compile_each, compile_resources
from iotrace.compiler.resources import Resources, parse_ptxas_log

__all__ = ["CACHE_SCHEMA", "COMPILE_TIMEOUT_S", "UNITS_PER_WORKER", "CompileBatch", "CompileError", "Resources",
           "ToolMissingError", "cache_dir", "compile_each", "compile_resources", "iotrace_cache_root", "nvcc_path",
           "package_source", "parse_ptxas_log"]
