"""The occupancy-aware autotuner: space, static pruning, strategies, measurement with verification, cache.

Public surface (imported on first use, so ``import iotrace.autotune`` costs nothing)::

    from iotrace.autotune import TuneOptions, tune
    result = tune(KernelCall(kernel("gemm"), shape, "fp16", lookup("h100")), TuneOptions(mode="static"))

Modules: ``space`` (the configs), ``static`` (compile, occupancy, prune), ``cost_model`` (predicted time),
``strategies`` (exhaustive, random, model), ``backends`` (GPU, interpreter, replay), ``cache`` (SQLite), ``sweep``
and ``replay`` (recorded sweeps), ``export`` (writes the tuned configs :mod:`iotrace.tuned` loads at run time),
``tuner`` (the job), ``result`` (its records), ``render``. The flags are in :mod:`iotrace.cli.tune`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ConfigResult", "TuneOptions", "TuneResult", "curve", "export_best", "load_sweep", "tune", "tuned_config",
           "use_tuned"]

_WHERE = {"ConfigResult": "result", "TuneOptions": "tuner", "TuneResult": "result", "tune": "tuner",
          "curve": "replay", "export_best": "export", "tuned_config": "export", "use_tuned": "export",
          "load_sweep": "sweep"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"iotrace.autotune.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'iotrace.autotune' has no attribute {name!r}")
