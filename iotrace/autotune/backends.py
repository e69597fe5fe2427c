"""Where a config is evaluated: timed and checked on a GPU, checked under the Triton interpreter, or replayed.

Every backend answers with a :class:`Measurement`. Only the GPU backend times anything: the interpreter's speed
says nothing about a GPU, so its measurements carry a check and no time; the replay backend returns what a
recorded sweep holds (:mod:`iotrace.autotune.sweep`).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from iotrace.autotune.space import config_key
from iotrace.errors import IotraceError

if TYPE_CHECKING:
    from iotrace.autotune.sweep import Sweep
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins.spec import Config, KernelSpec, Shape

__all__ = ["CUDA_GRAPH_BELOW_MS", "Backend", "GpuBackend", "InterpreterBackend", "Measurement", "ReplayBackend"]

#: Below this median a launch's CPU overhead is a visible part of the time, so the kernel is replayed as a CUDA
#: graph instead (Triton's ``do_bench_cudagraph``; CUDA C++ Programming Guide, "CUDA Graphs"). The same 50 µs the
#: runner uses (iotrace/runner.py).
CUDA_GRAPH_BELOW_MS = 0.05

#: do_bench's own defaults (triton/testing.py): 25 ms of warm-up, 100 ms of timed repetitions.
WARMUP_MS, REP_MS = 25, 100


@dataclass(frozen=True)
class Measurement:
    """One evaluation. ``status``: ``ok``, ``wrong`` (output differs from the reference) or ``failed``."""

    status: str
    time_us: float | None
    p20_us: float | None
    p80_us: float | None
    verified: bool | None
    timing: str
    note: str = ""
    cached: bool = False

    @property
    def usable_us(self) -> float | None:
        """The time a strategy may compare: only a timed, verified (or unverifiable replay) result."""
        return self.time_us if self.status == "ok" and self.verified is not False else None


class Backend(Protocol):
    #: ``gpu``, ``interpreter`` or ``replay``: part of the cache key, so a check never answers for a timing.
    method: str
    #: True when measurements carry times.
    timed: bool

    def measure(self, config: Config) -> Measurement: ...


def _poison(outputs: dict[str, Any]) -> None:
    for out in outputs.values():
        out.fill_(math.nan) if out.is_floating_point() else out.fill_(-1)  # unwritten elements show up


class _Checker:
    """Inputs and the reference, made once per tune (not per config), and the comparison of one launch."""

    def __init__(self, spec: KernelSpec, shape: Shape, dtype: str, backend: str, device: str, seed: int) -> None:
        self.spec, self.shape, self.dtype, self.backend, self.seed = spec, shape, dtype, backend, seed
        self.inputs = spec.make_inputs(shape, dtype, device, seed)
        self.expected = spec.reference(self.inputs)

    def check(self, config: Config) -> tuple[bool, str, dict[str, Any]]:
        from iotrace.runner import check_outputs

        outputs = self.spec.make_outputs(self.inputs)
        _poison(outputs)
        self.spec.launch(self.inputs, outputs, config, self.backend)
        found = check_outputs(self.spec, self.dtype, outputs, self.expected)
        note = "" if found.ok else f"wrong result (seed {self.seed}): {found.where}"
        return found.ok, note, outputs


class InterpreterBackend:
    """Correctness only, under the Triton interpreter on a shape reduced to the spec's interpreter budget."""

    method = "interpreter"
    timed = False

    def __init__(self, call: KernelCall, seed: int | None = None) -> None:
        spec = call.spec
        self.shape = spec.reduce_shape(call.shape, spec.interpreter_budget)
        self._checker = _Checker(spec, self.shape, call.dtype, call.backend, "cpu", secrets.randbits(31) if seed is None
                                 else seed)

    def measure(self, config: Config) -> Measurement:
        try:
            ok, note, _ = self._checker.check(config)
        except IotraceError as exc:
            return Measurement("failed", None, None, None, None, "none", exc.problem)
        except Exception as exc:  # numpy or Triton raising under the interpreter for this config alone
            return Measurement("failed", None, None, None, None, "none", _one_line(exc))
        shape = ",".join(f"{k}={v}" for k, v in self.shape.items())
        timing = f"none: Triton interpreter check on {shape} (interpreted speed says nothing about a GPU)"
        return Measurement("ok" if ok else "wrong", None, None, None, ok, timing, note)


class CudaContextError(IotraceError):
    """A CUDA error (an illegal address, a launch failure) leaves the context unusable for every later launch."""


def _stop_on_cuda_error(exc: Exception, config: Config) -> None:
    """Raise when ``exc`` is a CUDA error: every later config would fail the same way and be cached as failed for
    good. A config's own failures (Triton's OutOfResources, a compile error) are results and pass through."""
    if "CUDA error" in str(exc) or type(exc).__name__ in ("AcceleratorError", "CudaError"):
        raise CudaContextError(f"config {config} hit a CUDA error ({_one_line(exc)}); the GPU context is unusable",
                               "rerun the tune: configs measured so far are cached, this one is not") from exc


class GpuBackend:
    """Check against the reference, then time with ``triton.testing.do_bench`` (L2 flushed, median; warm-up first);
    short kernels are replayed as a CUDA graph. A wrong config is never timed."""

    method = "gpu"
    timed = True

    def __init__(self, call: KernelCall, seed: int | None = None) -> None:
        self._checker = _Checker(call.spec, call.shape, call.dtype, call.backend, "cuda",
                                 secrets.randbits(31) if seed is None else seed)

    def measure(self, config: Config) -> Measurement:
        import torch
        import triton.testing

        checker = self._checker
        try:
            ok, note, outputs = checker.check(config)
            torch.cuda.synchronize()
        except Exception as exc:  # Triton's OutOfResources, a compile error: this config failed, not the tune
            _stop_on_cuda_error(exc, config)
            return Measurement("failed", None, None, None, None, "none", _one_line(exc))
        if not ok:
            return Measurement("wrong", None, None, None, False, "none: not timed, the output is wrong", note)

        def call() -> None:
            checker.spec.launch(checker.inputs, outputs, config, checker.backend)

        quantiles = [0.5, 0.2, 0.8]
        try:
            median, p20, p80 = triton.testing.do_bench(call, warmup=WARMUP_MS, rep=REP_MS, quantiles=quantiles)
            timing = "triton.testing.do_bench (L2 flushed before each run, median)"
            if median < CUDA_GRAPH_BELOW_MS:
                median, p20, p80 = triton.testing.do_bench_cudagraph(call, rep=REP_MS, quantiles=quantiles)
                timing = "triton.testing.do_bench_cudagraph (median; L2 warm between replays)"
        except Exception as exc:  # as above
            _stop_on_cuda_error(exc, config)
            return Measurement("failed", None, None, None, True, "none", f"timing failed: {_one_line(exc)}")
        return Measurement("ok", median * 1e3, p20 * 1e3, p80 * 1e3, True, timing)


def _one_line(exc: BaseException) -> str:
    return getattr(exc, "problem", None) or f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


class ReplayBackend:
    """Answers from a recorded sweep: what the GPU measured for each config when the sweep was recorded."""

    method = "replay"
    timed = True

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self._rows = {config_key(row.config): row for row in sweep.rows}

    def measure(self, config: Config) -> Measurement:
        row = self._rows.get(config_key(config))
        if row is None:
            return Measurement("failed", None, None, None, None, "none", "not in the recorded sweep")
        status = "wrong" if row.verified is False else ("ok" if row.measured_us is not None else "failed")
        return Measurement(status, row.measured_us, None, None, row.verified,
                           f"replayed from {self.sweep.provenance.get('how', 'a recorded sweep')}")
