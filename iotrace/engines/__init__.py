"""Engines side by side (``iotrace bench --engine``): iotrace's own decoder, transformers, vLLM and llama.cpp on the
same prompt token ids, each in its own interpreter (:mod:`iotrace.engines.launch`, the standalone runner in
``runner/``), compared in one table with each engine's decode wall (:mod:`iotrace.engines.compare`)."""
