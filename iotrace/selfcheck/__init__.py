"""``iotrace selfcheck`` (also ``bench/gpu_check.py``): one prepared run that proves the kernels, the tuner and the
profiler path on this machine's GPU, or, with ``--cpu``, runs the same steps end to end at tiny sizes (interpreter
backend, static tuning, no profilers) so the script is tested in CI and cannot rot.

Each step returns a :class:`~iotrace.selfcheck.record.Step`; a step that fails or cannot run records why and the
run goes on. :func:`~iotrace.selfcheck.run.selfcheck` writes ``results.md`` and ``results.json`` under the output
folder.
"""
