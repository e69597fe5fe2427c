"""The static phase: compile every config for the card's target, read its resources, prune, predict.

No GPU is needed: Triton cross-compiles on the CPU (``iotrace.compiler``, in parallel worker processes, cached
on disk), occupancy comes from ``iotrace.occupancy``, the predicted time from :mod:`iotrace.autotune.cost_model`.
A config is pruned when it cannot launch on the card (a resource over the SM's limit) or does not compile; spills
are flagged, not pruned, since a spilling config may still be fastest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iotrace.autotune.cost_model import Prediction, dot_tile, operand_traffic, pipeline_step, predict, tile_efficiency
from iotrace.compiler import CompileBatch, CompileError, Resources, compile_each
from iotrace.errors import InvalidValueError, IotraceError
from iotrace.kernel_call import KernelCall
from iotrace.occupancy import OccupancyResult, occupancy
from iotrace.plugins.spec import DTYPE_BYTES

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import Config, Cost, KernelSpec, Shape

__all__ = ["StaticEntry", "StaticPhase", "entry_from_resources", "rank", "static_phase", "tie_key"]


@dataclass(frozen=True)
class StaticEntry:
    """One config after the static phase. ``pruned`` says why it cannot run on the card (None: it can)."""

    config: Config
    resources: tuple[Resources, ...]
    occupancy: OccupancyResult | None
    prediction: Prediction | None
    pruned: str | None

    @property
    def main(self) -> Resources | None:
        return self.resources[0] if self.resources else None

    @property
    def spills(self) -> int:
        """Spill bytes per thread over every launch (stores + loads, as ptxas counts them)."""
        return sum(r.spills for r in self.resources)

    @property
    def predicted_us(self) -> float | None:
        return self.prediction.time_us if self.prediction else None

    def resources_dict(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.resources]


@dataclass(frozen=True)
class StaticPhase:
    """Every config's static entry, in the space's order, and what the compile step cost."""

    entries: list[StaticEntry]
    cached_units: int
    compiled_units: int
    workers_started: int
    seconds: float

    @property
    def launchable(self) -> list[int]:
        return [i for i, e in enumerate(self.entries) if e.pruned is None]


def entry_from_resources(spec: KernelSpec, shape: Shape, dtype: str, config: Config, resources: list[Resources],
                         cost: Cost, card: Card) -> StaticEntry:
    """Occupancy of every launch on the card, pruned if any cannot launch, else the predicted time."""
    limits = card.sm_limits
    main_occ: OccupancyResult | None = None
    for res in resources:
        try:
            occ = occupancy(limits, res.threads_per_block, res.registers, res.static_smem, res.dynamic_smem,
                            barriers=res.barriers)
        except InvalidValueError as exc:  # e.g. more threads per block than the CC allows
            return StaticEntry(config, tuple(resources), None, None, f"{res.kernel}: {exc.problem}")
        main_occ = main_occ or occ
        if not occ.launchable:
            return StaticEntry(config, tuple(resources), occ if res is resources[0] else main_occ, None,
                               f"{res.kernel}: {occ.reason}")
    assert main_occ is not None  # a spec gives at least one launch (checked in static_phase)
    element = DTYPE_BYTES.get(dtype, 2)
    prediction = predict(cost, card, resources, main_occ, tile_efficiency(spec, shape, config), dot_tile(spec, config),
                         element, operand_traffic(spec, shape, config, element), pipeline_step(spec, shape, config))
    return StaticEntry(config, tuple(resources), main_occ, prediction, None)


def static_phase(call: KernelCall, configs: list[Config], jobs: int | None = None,
                 progress: Callable[[int], None] | None = None, *,
                 compile_units: Callable[..., CompileBatch] = compile_each) -> StaticPhase:
    """Compile ``configs`` for ``card`` (cached, ``jobs`` workers) and judge each one; ``progress(n)`` per unit.
    ``compile_units`` is :func:`~iotrace.compiler.compile_each`'s stand-in where the compiles run elsewhere (a Ray
    cluster's CPU workers: :mod:`iotrace.autotune.ray_runner`)."""
    start = time.perf_counter()
    spec, shape, dtype, card = call.spec, call.shape, call.dtype, call.card
    cost = spec.cost(shape, dtype)
    units_per_config = [list(spec.compile_units(shape, dtype, c, call.backend)) for c in configs]
    if any(not units for units in units_per_config):
        raise IotraceError(f"{spec.name}.compile_units returned no launch for some config",
                           "a kernel spec must list at least one launch per config")
    flat = [u for units in units_per_config for u in units]
    batch = compile_units(flat, card.sm_limits.cc, jobs=jobs, progress=progress)
    entries: list[StaticEntry] = []
    position = 0
    for config, units in zip(configs, units_per_config, strict=True):
        answers = batch.results[position:position + len(units)]
        position += len(units)
        failed = next((a for a in answers if isinstance(a, CompileError)), None)
        if failed is not None:
            entries.append(StaticEntry(config, (), None, None, f"does not compile: {failed.problem}"))
            continue
        compiled = [a for a in answers if isinstance(a, Resources)]
        entries.append(entry_from_resources(spec, shape, dtype, config, compiled, cost, card))
    return StaticPhase(entries, batch.cached, batch.compiled, batch.workers_started, time.perf_counter() - start)


def tie_key(entry: StaticEntry) -> float | None:
    """The predicted time to three significant figures: entries with the same key are a tie the model cannot
    split (None: not ranked)."""
    return None if entry.prediction is None else float(f"{entry.prediction.time_us:.3g}")


def tie_break(first: StaticEntry, second: StaticEntry) -> str:
    """What :func:`rank`'s tie-break put ``first`` ahead of ``second`` by (two entries of one tie), in words; or that
    nothing did, where only the space's order separates them."""
    if (first.spills > 0) != (second.spills > 0):
        return f"no spills (the next one spills {second.spills} B per thread)"
    reuse = [(e.prediction.operand_intensity or 0.0) if e.prediction else 0.0 for e in (first, second)]
    if reuse[0] != reuse[1]:
        return (f"more operand reuse per warp ({reuse[0]:.3g} against {reuse[1]:.3g} FLOP per shared-memory byte), "
                "which the model does not count beyond its roof")
    occupancy = [e.occupancy.occupancy_pct if e.occupancy else 0.0 for e in (first, second)]
    if occupancy[0] != occupancy[1]:
        return f"higher occupancy ({occupancy[0]:.3g}% against {occupancy[1]:.3g}%)"
    return ("nothing the model sees: the same spills, operand reuse per warp and occupancy, so only the space's order "
            "puts it first")


def rank(entries: list[StaticEntry]) -> list[int]:
    """Indices of the launchable entries, fastest predicted first.

    Predictions equal to three significant figures are a tie the model cannot split (a compute-bound plateau), so
    a config without spills goes first, then the one with more operand reuse per warp (bigger warp tiles: Volkov,
    "Better Performance at Lower Occupancy", GTC 2010), then the higher occupancy (more latency hiding for what
    the model does not see), then the space's order.
    """
    ready = [i for i, e in enumerate(entries) if e.prediction is not None and e.occupancy is not None]

    def key(i: int) -> tuple[float, bool, float, float, int]:
        entry = entries[i]
        assert entry.prediction is not None and entry.occupancy is not None
        reuse = entry.prediction.operand_intensity or 0.0
        return (tie_key(entry) or 0.0, entry.spills > 0, -reuse, -entry.occupancy.occupancy_pct,
                i)

    return sorted(ready, key=key)
