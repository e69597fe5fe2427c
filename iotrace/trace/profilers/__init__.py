"""Profiled runs: ``iotrace run KERNEL --nsys | --ncu | --cupti``.

A kernel is launched in a child ``python -m iotrace run ...`` under Nsight Systems or Nsight Compute (or in this
process under the PyTorch profiler's CUPTI/Kineto collection), the export is loaded with :func:`iotrace.trace.load`,
the kernels inside the NVTX range ``iotrace/<kernel>`` are kept, and a run manifest is written beside the capture.

Modules: ``tools`` (finding and versioning nsys/ncu), ``process`` (subprocesses with timeouts), ``child`` (the child
command line), ``nsys``, ``ncu``, ``cupti`` (one capture each), ``selection`` (kernels in the range), ``manifest``
(the record that lets anyone rerun a capture), ``errors``, and ``command`` (the flags and the entry point).
Importing this package imports nothing heavy.
"""
