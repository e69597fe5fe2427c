"""Run one kernel config: static analysis on a named card, a correctness check, and timing on a GPU.

Everything a run reports is labelled: ``cost`` and ``roofline`` are *modelled* from the shape, ``resources``
and ``occupancy`` are *static* (compiled for the card's target, no GPU needed), ``check`` is the comparison
with the reference on fresh random inputs, and ``timing`` is *measured* — only on a GPU. Under the Triton
interpreter there is no timing at all: interpreted speed says nothing about a GPU.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from iotrace.cards import Card
from iotrace.compiler import Resources, compile_resources
from iotrace.errors import IotraceError
from iotrace.kernel_call import CallFields, KernelCall
from iotrace.kernels.backend import device, interpreting
from iotrace.occupancy import OccupancyResult, occupancy
from iotrace.plugins.spec import Config, Cost, KernelSpec, Shape
from iotrace.tuned import tuned_config

if TYPE_CHECKING:
    import torch

__all__ = [
    "Check",
    "Comparison",
    "ConfigError",
    "Roofline",
    "RunResult",
    "Timing",
    "check_outputs",
    "resolve_config",
    "run",
    "static_analysis",
]

class ConfigError(IotraceError):
    """A config that cannot launch on the card (shared memory, registers or threads over the limit)."""


@dataclass(frozen=True)
class Check:
    """The comparison with the reference. ``ran`` is False when no check could run here (``note`` says why)."""

    ran: bool
    correct: bool | None
    shape: Shape
    seed: int | None
    max_abs_err: float | None = None
    max_err_over_tolerance: float | None = None
    where: str = ""
    note: str = ""
    unwritten: int = 0
    quality: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """Measured on a GPU: the median of repeated launches (L2 flushed between them), and what it implies."""

    median_us: float
    p20_us: float
    p80_us: float
    tflops: float
    gbps: float
    pct_of_roofline: float
    method: str


@dataclass(frozen=True)
class Roofline:
    """Identity 4 for this call on the card: the floor time and which roof sets it (modelled)."""

    peak: str
    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    intensity: float
    ridge: float
    bound: str
    floor_us: float


@dataclass
class RunResult(CallFields):
    call: KernelCall
    config: Config
    mode: str
    cost: Cost
    roofline: Roofline
    resources: list[Resources]
    occupancy: OccupancyResult
    waves: float
    check: Check
    timing: Timing | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def card(self) -> str:
        return self.call.card.key

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the headline numbers at the top level, the records below them."""
        main = self.resources[0]
        out: dict[str, Any] = {
            "kernel": self.kernel, "backend": self.backend, "dtype": self.dtype, "shape": self.shape,
            "config": self.config, "card": self.card, "mode": self.mode,
            "flops": self.cost.flops, "bytes": self.cost.bytes, "intensity": self.cost.intensity,
            "roofline_floor_us": self.roofline.floor_us, "bound": self.roofline.bound,
            "registers": main.registers, "shared_mem_bytes": main.shared_mem_bytes, "spills": main.spills,
            "occupancy_pct": self.occupancy.occupancy_pct, "limiters": list(self.occupancy.limiters),
            "waves": self.waves, "correct": self.check.correct, "max_abs_err": self.check.max_abs_err,
            "time_us": self.timing.median_us if self.timing else None,
            "cost": {**asdict(self.cost), "intensity": self.cost.intensity, "kind": "modelled"},
            "roofline": {**asdict(self.roofline), "kind": "modelled"},
            "resources": [{**r.to_dict(), "kind": "static"} for r in self.resources],
            "occupancy": {**self.occupancy.to_dict(), "kind": "static"},
            "check": asdict(self.check),
            "timing": {**asdict(self.timing), "kind": "measured"} if self.timing else None,
            "notes": self.notes,
        }
        return out


def resolve_config(call: KernelCall, overrides: dict[str, Any] | None = None) -> Config:
    """The card's default config for ``call`` with ``overrides`` applied; unknown keys are refused.

    A tuned config shipped through ``$IOTRACE_TUNED`` (``iotrace tune --export``) replaces the kernel's default.
    """
    spec, shape, dtype, card, backend = call.spec, call.shape, call.dtype, call.card, call.backend
    base = tuned_config(spec, shape, dtype, card, backend) or spec.default_config(shape, dtype, card, backend)
    if overrides:
        base = {**base, **spec.check_config(overrides, shape, dtype, card, backend)}
    return base


def roofline_of(cost: Cost, card: Card) -> Roofline:
    """Identity 4 for one kernel call on ``card``: its intensity against the ridge, the bound and the floor time."""
    peak = card.peak_flop_per_s(cost.peak)
    bandwidth = card.bandwidth_bytes_per_s
    floor_s = max(cost.flops / peak, cost.bytes / bandwidth)
    ridge = peak / bandwidth
    return Roofline(cost.peak, peak, bandwidth, cost.intensity, ridge,
                    "memory" if cost.intensity < ridge else "compute", floor_s * 1e6)


def static_analysis(call: KernelCall, config: Config) -> tuple[list[Resources], OccupancyResult, float]:
    """Compile for the card's target: resources of every launch, occupancy and waves of the first (the main one)."""
    spec, card = call.spec, call.card
    units = list(spec.compile_units(call.shape, call.dtype, config, call.backend))
    call.check_launch(config, units)  # a grid or block no GPU can launch: refused in milliseconds, before the compile
    resources = compile_resources(units, card.sm_limits.cc)
    main = resources[0]
    occ = occupancy(card.sm_limits, main.threads_per_block, main.registers, main.static_smem, main.dynamic_smem,
                    barriers=main.barriers)
    if not occ.launchable:
        raise ConfigError(f"{spec.name} config {config} cannot launch on {card.name}: {occ.reason}",
                          "pick smaller tiles or fewer stages (see the kernel's space)")
    blocks = math.prod(main.grid)
    waves = blocks / (occ.active_blocks_per_sm * card.sm_count)
    return resources, occ, waves


@dataclass(frozen=True)
class Comparison:
    """Outputs against the reference: the worst finite error, and elements left unwritten (still NaN)."""

    ok: bool
    max_abs_err: float | None
    max_err_over_tolerance: float | None
    unwritten: int
    where: str


def check_outputs(spec: KernelSpec, dtype: str, outputs: Mapping[str, torch.Tensor],
                  expected: Mapping[str, torch.Tensor]) -> Comparison:
    """Compare element-wise within the spec's tolerance; a NaN (a poisoned element never written) always fails."""
    worst_abs = worst_ratio = None
    unwritten, where, ok = 0, "", True
    for name, ref in expected.items():
        tol = spec.output_tolerance(name, dtype)
        got = outputs[name].float().cpu()
        ref = ref.float().cpu()
        err = (got - ref).abs()
        allowed = tol.atol + tol.rtol * ref.abs()
        bad = ~(err <= allowed)  # NaN compares False, so unwritten elements count as bad
        if bad.any():
            ok = False
            index = tuple(int(i) for i in bad.nonzero()[0])
            where = where or f"{name}{list(index)}: got {got[index].item():.6g}, expected {ref[index].item():.6g}"
        missing = err.isnan()
        unwritten += int(missing.sum())
        if (~missing).any():
            worst_abs = max(worst_abs or 0.0, err[~missing].max().item())
            worst_ratio = max(worst_ratio or 0.0, (err[~missing] / allowed[~missing]).max().item())
    if unwritten:
        where = f"{unwritten} output elements never written (still NaN); first bad: {where}"
    return Comparison(ok, worst_abs, worst_ratio, unwritten, where)


def _check(spec: KernelSpec, shape: Shape, dtype: str, config: Config, backend: str,
           seed: int) -> tuple[Check, dict, dict]:
    import torch

    checked = spec.reduce_shape(shape, spec.interpreter_budget) if interpreting() else shape
    inputs = spec.make_inputs(checked, dtype, device(), seed)
    outputs = spec.make_outputs(inputs)
    for out in outputs.values():
        out.fill_(math.nan) if out.is_floating_point() else out.fill_(-1)  # poison: unwritten elements show up
    spec.launch(inputs, outputs, config, backend)
    if not interpreting():
        torch.cuda.synchronize()
    found = check_outputs(spec, dtype, outputs, spec.reference(inputs))
    note = "" if checked == shape else (f"interpreted on a reduced shape {checked}: the full shape would take too "
                                        "long under the Triton interpreter")
    return (Check(True, found.ok, checked, seed, found.max_abs_err, found.max_err_over_tolerance, found.where, note,
                  found.unwritten, spec.quality(inputs, outputs)), inputs, outputs)


def _time(spec: KernelSpec, inputs: dict, outputs: dict, config: Config, backend: str, cost: Cost,
          roofline: Roofline) -> Timing:
    """Median time on the GPU with triton.testing (L2 flushed between runs); CUDA graphs for short kernels."""
    import triton.testing

    def call() -> None:
        spec.launch(inputs, outputs, config, backend)

    quantiles = [0.5, 0.2, 0.8]
    median, p20, p80 = triton.testing.do_bench(call, quantiles=quantiles)
    method = "triton.testing.do_bench (L2 flushed, median)"
    if median < 0.05:  # under 50 µs launch overhead matters: replay a CUDA graph instead
        median, p20, p80 = triton.testing.do_bench_cudagraph(call, quantiles=quantiles)
        # The graph replays back to back: the data may sit in L2, so a small kernel can beat the DRAM floor.
        method = "triton.testing.do_bench_cudagraph (median; L2 warm between replays)"
    seconds = median * 1e-3
    return Timing(median * 1e3, p20 * 1e3, p80 * 1e3, cost.flops / seconds / 1e12, cost.bytes / seconds / 1e9,
                  100.0 * roofline.floor_us / (median * 1e3), method)


def _spill_finding(res: Resources) -> str:
    """A launch that spills is named, with what ptxas reported: spilled registers go to local memory (the L1/L2/DRAM
    path), so the config pays memory traffic its cost model does not count (CUDA C++ Best Practices Guide,
    "Registers" and "Local Memory")."""
    return (f"{res.kernel} spills: {res.spill_stores} B spill stores + {res.spill_loads} B spill loads per thread at "
            f"{res.registers} registers (ptxas). This config is over the register budget: try smaller tiles "
            f"(BLOCK_*), fewer stages or more warps; `iotrace tune` flags every spilling config.")


def run(call: KernelCall, *, config: Config | None = None, check: bool = True, seed: int | None = None) -> RunResult:
    """Analyse, check and (on a GPU) time one config of ``call`` on its card (the kernel's default config, or a
    tuned one, when ``config`` is None)."""
    spec, shape, dtype, card, backend = call.spec, call.shape, call.dtype, call.card, call.backend
    config = config if config is not None else resolve_config(call)
    cost = spec.cost(shape, dtype)
    roofline = roofline_of(cost, card)
    resources, occ, waves = static_analysis(call, config)
    seed = secrets.randbits(31) if seed is None else seed
    notes: list[str] = [_spill_finding(r) for r in resources if r.spills]
    timing = None
    if interpreting() and backend != "triton":
        mode = "static"
        result = Check(False, None, shape, None, note=f"the {backend} backend needs a GPU; no check ran here")
        notes.append("No GPU: cost, roofline, resources and occupancy only.")
    elif interpreting():
        mode = "interpreter"
        result = (_check(spec, shape, dtype, config, backend, seed)[0] if check else
                  Check(False, None, shape, None, note="check skipped (--no-check)"))
        notes.append("Triton interpreter on the CPU: correctness only, no timing (interpreted speed says nothing "
                     "about a GPU).")
    else:
        mode = "gpu"
        if check:
            result, inputs, outputs = _check(spec, shape, dtype, config, backend, seed)
        else:
            result = Check(False, None, shape, None, note="check skipped (--no-check)")
            inputs = spec.make_inputs(shape, dtype, device(), seed)
            outputs = spec.make_outputs(inputs)
        timing = _time(spec, inputs, outputs, config, backend, cost, roofline)
    return RunResult(call, config, mode, cost, roofline, resources, occ, waves, result, timing, notes)
