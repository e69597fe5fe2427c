"""A real model decoded by iotrace's kernel plugins, and the figures of a model run (``iotrace bench``).

Modules: :mod:`~iotrace.model.walls` (identities 1-3 applied to one model run), :mod:`~iotrace.model.gguf_file`
(a Llama-architecture GGUF read with the ``gguf`` package), :mod:`~iotrace.model.weights` (the decoder's tensors,
from a GGUF or random), :mod:`~iotrace.model.ops` (the decoder's kernels: the plugins' Triton launchers or their
torch references), :mod:`~iotrace.model.decoder`, :mod:`~iotrace.model.measure` (a timed bench run),
:mod:`~iotrace.model.power` (NVML), :mod:`~iotrace.model.imported` (llama-bench and vLLM bench files).
"""
