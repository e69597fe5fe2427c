"""The tuner: space -> static phase (compile, occupancy, prune, predict) -> strategy -> measure + verify -> best.

:func:`tune` is the whole job as a Python call on one :class:`~iotrace.kernel_call.KernelCall`; :func:`tune_from_sweep`
replays a recorded sweep, which says the shape, dtype and card. ``iotrace tune`` (:mod:`iotrace.cli.tune`) only
parses flags into :class:`TuneOptions` and renders the :class:`TuneResult`.

Modes, chosen from the options and the machine:

* ``gpu``: on an NVIDIA GPU (Triton not interpreting, the card is the local one): the strategy picks configs,
  each is checked against the reference and timed (:class:`~iotrace.autotune.backends.GpuBackend`), cached.
* ``interpreter`` (CPU, the default there): the static ranking, and the top configs checked for correctness under
  the Triton interpreter; no time is measured, the best is the model's choice among the configs that passed.
* ``static`` (``--static``): the static phase only; nothing is launched.
* ``replay`` (``--replay SWEEP``): measurements come from a recorded sweep, to compare strategies offline.

A :class:`Runner` moves the compiles and the measurements elsewhere (a Ray cluster,
:mod:`iotrace.autotune.ray_runner`); without one everything runs in this process, as it always has.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from iotrace.autotune.backends import Backend, GpuBackend, InterpreterBackend, Measurement, ReplayBackend
from iotrace.autotune.cache import CacheKey, TuneCache, kernel_source_hash
from iotrace.autotune.fingerprint import Fingerprint, fingerprint, triton_version
from iotrace.autotune.render import compact
from iotrace.autotune.result import ConfigResult, TuneResult, tied_with
from iotrace.autotune.space import kernel_space, shape_bucket, shape_text
from iotrace.autotune.static import StaticEntry, StaticPhase, entry_from_resources, rank, static_phase, tie_break
from iotrace.autotune.strategies import BudgetSpent, SearchSpace, strategy
from iotrace.autotune.sweep import Sweep, load_sweep, resources_from_dict
from iotrace.ceilings import LAUNCH_FLOOR_US, achievable
from iotrace.errors import InvalidValueError, IotraceError
from iotrace.kernel_call import KernelCall
from iotrace.kernels.backend import interpreting

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.plugins.spec import Config, KernelSpec, Shape

__all__ = ["DEFAULT_VERIFY_TOP", "ConfigResult", "Progress", "Runner", "Search", "TuneOptions", "TuneResult", "tune",
           "tune_from_sweep"]

#: Configs the interpreter checks on a CPU: the model's top three (each check is a second or more interpreted).
DEFAULT_VERIFY_TOP = 3

MODES = ("gpu", "interpreter", "static", "replay")


class UnsupportedDtypeError(IotraceError):
    """A card with no hardware peak for the kernel's dtype (bf16 before Ampere, fp8 before Ada)."""


@dataclass(frozen=True)
class TuneOptions:
    """How to tune; every field has the CLI flag of the same name."""

    strategy: str = "model"
    #: At most this many evaluations (None: the strategy's own end).
    budget: int | None = None
    #: At most this many seconds of evaluation (None: no limit).
    time_s: float | None = None
    #: ``gpu``, ``interpreter``, ``static`` or ``replay``; None: ``replay`` with a sweep, else ``gpu`` on a GPU,
    #: else ``interpreter``.
    mode: str | None = None
    #: Interpreter mode: how many of the best-ranked configs to check (more are checked if all of these fail).
    verify_top: int = DEFAULT_VERIFY_TOP
    #: A recorded sweep (its path, or one already loaded) to answer measurements from.
    replay: Path | Sweep | None = None
    record: Path | None = None
    #: The SQLite cache file (None: ``$XDG_CACHE_HOME/iotrace/tune.sqlite3``); ``use_cache=False`` skips it.
    cache: Path | None = None
    use_cache: bool = True
    #: Narrow the space: only configs with these values (``{"BLOCK_K": 64}``).
    fix: dict[str, Any] = field(default_factory=dict)
    jobs: int | None = None
    seed: int | None = None


class Progress(Protocol):
    """Where the tuner reports progress (a rich bar in the CLI; nothing by default)."""

    def start(self, description: str, total: int) -> None: ...

    def advance(self, steps: int = 1) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Search:
    """One tune's measuring job as a :class:`Runner` gets it: what the strategy searches and what bounds it."""

    mode: str
    options: TuneOptions
    ranking: list[int]
    entries: list[StaticEntry]
    shape: Shape
    cache: TuneCache | None
    key: CacheKey
    budget: int | None
    time_s: float | None


class Runner(Protocol):
    """Where a tune compiles and measures when that is not this process (a Ray cluster:
    :class:`iotrace.autotune.ray_runner.RayRunner`)."""

    #: True when its workers have the GPU the card names (``gpu`` mode needs no GPU in this process then).
    has_gpus: bool

    def static_phase(self, call: KernelCall, configs: list[Config], jobs: int | None,
                     progress: Callable[[int], None]) -> StaticPhase: ...

    def fingerprint(self, card: Card, on_gpu: bool) -> Fingerprint: ...

    def evaluate(self, search: Search, make_backend: Callable[[], Backend], progress: Progress) -> Evaluator:
        """Measure what the strategy asks for on the workers; the evaluator it returns holds every answer."""
        ...


class NoProgress:
    def start(self, description: str, total: int) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass

    def stop(self) -> None:
        pass


# --- checks --------------------------------------------------------------------------------------------------


def check_request(call: KernelCall, options: TuneOptions) -> None:
    """Refuse what cannot be tuned, each with the value and the fix, before any compile starts (the call itself was
    validated when it was made)."""
    spec, shape, dtype, card = call.spec, call.shape, call.dtype, call.card
    strategy(options.strategy)  # an unknown name lists the known ones
    if options.budget is not None and options.budget < 1:
        raise InvalidValueError(f"a budget of {options.budget} evaluations tunes nothing",
                                "give --budget 1 or more, or leave it out to let the strategy finish")
    if options.time_s is not None and not options.time_s > 0:
        raise InvalidValueError(f"a time budget of {options.time_s} s tunes nothing", "give --time above 0")
    if options.verify_top < 0:
        raise InvalidValueError(f"--verify {options.verify_top} is negative", "give 0 (no checks) or more")
    if options.record is not None and (options.strategy != "exhaustive" or options.budget is not None
                                       or options.time_s is not None):
        # Replays measure strategies against the sweep's best: a sweep with holes would move that best.
        raise InvalidValueError(f"--record {options.record} needs every config measured",
                                "record with --strategy exhaustive and no --budget or --time")
    if options.mode is not None and options.mode not in MODES:
        raise InvalidValueError(f"unknown mode {options.mode!r}", f"use one of {', '.join(MODES)}")
    if card.cc is None:
        raise InvalidValueError(f"{card.name} has no CUDA compute capability: iotrace tunes Triton kernels for "
                                "NVIDIA targets", "pick an NVIDIA card, e.g. --card h100 (see `iotrace cards`)")
    peak = spec.cost(shape, dtype).peak
    if card.origin == "detected" and not card.peak_tflops:
        raise UnsupportedDtypeError(f"{card.name} is not in the CardBook, so iotrace has no peak or bandwidth to model "
                                    "it with", "add it to iotrace/data/cards.toml, or set IOTRACE_CARD to the "
                                    "CardBook card closest to it")
    if peak not in card.peak_tflops:
        raise UnsupportedDtypeError(f"{card.name} (CC {card.cc}) has no {peak} peak: it does not support {dtype} "
                                    f"for {spec.name}", f"use one of the dtypes it has peaks for, or a newer card "
                                    f"(it states {', '.join(card.peak_tflops) or 'no peaks'})")


def _mode(options: TuneOptions, card: Card, runner: Runner | None = None) -> str:
    if options.replay is not None:
        return "replay"
    if runner is not None:  # the cluster's workers measure, not this process: a cluster is for its GPUs
        mode = options.mode or "gpu"
        if mode == "gpu" and not runner.has_gpus:
            raise InvalidValueError("GPU timing needs a GPU, and the Ray cluster has none",
                                    "add GPU nodes to the cluster, or tune with --static or --replay on it")
        return mode
    if options.mode is not None:
        if options.mode == "gpu" and interpreting():
            raise InvalidValueError("GPU timing needs an NVIDIA GPU, and Triton is interpreting here",
                                    "run on a GPU machine, or use --static / the interpreter check")
        if options.mode == "replay":
            raise InvalidValueError("replay mode needs a sweep", "pass --replay SWEEP.json")
        return options.mode
    return "interpreter" if interpreting() else "gpu"


def _local_card_matches(card: Card) -> None:
    """The device itself, not $IOTRACE_CARD, must be the card measurements are filed under (CC and SM count: a
    cut-down part of the same chip has fewer SMs)."""
    from iotrace.cards import local_device

    local = local_device()
    if local is None or (local["cc"], local["sm_count"]) != (card.cc, card.sm_count):
        here = f"{local['name']} (CC {local['cc']}, {local['sm_count']} SMs)" if local else "no GPU"
        raise InvalidValueError(f"--card {card.key} (CC {card.cc}, {card.sm_count} SMs) is not the GPU here, {here}: "
                                "measurements would be filed under the wrong card",
                                "leave --card and $IOTRACE_CARD out on a GPU, or add --static")


# --- the job -------------------------------------------------------------------------------------------------


def _static_from_sweep(spec: KernelSpec, sweep: Sweep, card: Card, shape: Shape) -> StaticPhase:
    """The static phase rebuilt from the resources a sweep recorded (no compile), with today's model."""
    start = time.perf_counter()
    cost = spec.cost(shape, sweep.dtype)
    entries = []
    for row in sweep.rows:
        if not row.resources:
            entries.append(StaticEntry(row.config, (), None, None, row.note or "did not compile when recorded"))
            continue
        resources = [resources_from_dict(r) for r in row.resources]
        entries.append(entry_from_resources(spec, shape, sweep.dtype, row.config, resources, cost, card))
    return StaticPhase(entries, 0, 0, 0, time.perf_counter() - start)


class Evaluator:
    """The strategies' ``evaluate(i)``: the cache first, else the backend; the budget charged per new config."""

    def __init__(self, backend: Backend, space: list[int], entries: list[StaticEntry], shape: Shape,
                 cache: TuneCache | None, key: CacheKey | None, budget: int | None, time_s: float | None,
                 progress: Progress) -> None:
        self.backend, self.space, self.entries, self.shape = backend, space, entries, shape
        self.cache, self.key, self.budget, self.progress = cache, key, budget, progress
        self.deadline = None if time_s is None else time.monotonic() + time_s
        self.found: dict[int, Measurement] = {}
        self.measured = 0

    def __call__(self, index: int) -> float | None:
        entry_index = self.space[index]
        if entry_index in self.found:
            return self.found[entry_index].usable_us
        if self.budget is not None and len(self.found) >= self.budget:
            raise BudgetSpent
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise BudgetSpent
        config = self.entries[entry_index].config
        result = (self.cache.get(self.key, config, self.shape) if self.cache is not None and self.key is not None
                  else None)
        if result is None:
            result = self.backend.measure(config)
            self.measured += 1
            if self.cache is not None and self.key is not None:
                self.cache.put(self.key, config, self.shape, result)
        self.found[entry_index] = result
        self.progress.advance()
        return result.usable_us


def tune_from_sweep(spec: KernelSpec, options: TuneOptions, progress: Progress | None = None, *,
                    shape: Shape | None = None, dtype: str | None = None, card: Card | None = None,
                    runner: Runner | None = None) -> TuneResult:
    """Replay ``options.replay``: the call is the one the sweep recorded; a ``shape``, ``dtype`` or ``card`` given
    beside it must agree with it."""
    if options.replay is None:
        raise InvalidValueError("tune_from_sweep needs TuneOptions(replay=SWEEP)", "give the recorded sweep")
    sweep = _sweep(options)
    call = _replay_request(spec, sweep, shape, dtype, card, options)
    return tune(call, replace(options, replay=sweep), progress, runner)  # the sweep read once, not again in tune


def _sweep(options: TuneOptions) -> Sweep | None:
    return options.replay if isinstance(options.replay, Sweep) or options.replay is None else \
        load_sweep(options.replay)


def tune(call: KernelCall, options: TuneOptions | None = None, progress: Progress | None = None,
         runner: Runner | None = None) -> TuneResult:
    """Tune ``call`` (a kernel at a shape and dtype on a card, through a backend); see the module docstring for the
    modes. With ``options.replay`` the call must be the one the sweep recorded (:func:`tune_from_sweep` makes it).
    ``runner``: compile and measure there (its workers hold the card's GPU in ``gpu`` mode), not here."""
    options = options or TuneOptions()
    progress = progress or NoProgress()
    start = time.perf_counter()
    sweep = _sweep(options)
    if sweep is not None:
        _replay_request(call.spec, sweep, call.shape, call.dtype, call.card, options)
    spec, shape, dtype, card = call.spec, call.shape, call.dtype, call.card
    check_request(call, options)
    mode = _mode(options, card, runner)
    on_gpu = mode == "gpu"
    if on_gpu and runner is None:  # a runner's workers report their own device (it chose the card from them)
        _local_card_matches(card)
    if options.record is not None and mode != "gpu":
        raise InvalidValueError(f"--record {options.record}: only GPU measurements are recorded ({mode} mode here)",
                                "run the recording on a GPU (bench/gpu_validate.sh does)")
    cost = spec.cost(shape, dtype)
    notes: list[str] = []
    if sweep is not None:
        static = _static_from_sweep(spec, sweep, card, shape)
        notes.append(f"replayed: {sweep.provenance.get('how', 'a recorded sweep')}")
    else:
        configs = kernel_space(spec, shape, dtype, card, call.backend, options.fix)
        units = sum(len(spec.compile_units(shape, dtype, c, call.backend)) for c in configs)
        progress.start(f"compile {len(configs)} configs for sm_{card.cc.replace('.', '')}", units)
        try:
            static = (runner.static_phase if runner is not None else static_phase)(call, configs, options.jobs,
                                                                                   progress.advance)
        finally:
            progress.stop()
    entries = static.entries
    ranking = rank(entries)
    rank_of = {i: r + 1 for r, i in enumerate(ranking)}
    if not ranking:
        reasons = sorted({e.pruned or "" for e in entries})
        raise IotraceError(f"no {spec.name} config can launch on {card.name} for {shape_text(shape)}: "
                           f"{'; '.join(reasons)[:400]}", "try a smaller shape, another card, or other --fix values")
    finger = runner.fingerprint(card, on_gpu) if runner is not None else fingerprint(card, on_gpu)
    key = CacheKey(finger.text(), triton_version(), kernel_source_hash(spec), spec.name, call.backend, mode,
                   shape_text(shape_bucket(spec, shape)), dtype)
    # A recipe, not a backend: a runner builds it on each worker (CUDA inputs cannot travel between processes).
    make_backend: Callable[[], Backend] | None = None
    if mode == "gpu":
        make_backend = functools.partial(GpuBackend, call, options.seed)
    elif mode == "interpreter" and options.verify_top > 0:
        make_backend = functools.partial(InterpreterBackend, call, options.seed)
    elif mode == "replay":
        assert sweep is not None
        make_backend = functools.partial(ReplayBackend, sweep)
    # Replayed answers are not measurements of this machine: they never enter the cache.
    cache = TuneCache(options.cache) if options.use_cache and make_backend is not None and mode != "replay" else None
    evaluator = None
    try:
        if make_backend is not None:
            measuring = mode in ("gpu", "replay")  # --budget/--time bound measurements; --verify bounds checks
            budget, time_s = (options.budget, options.time_s) if measuring else (None, None)
            if runner is not None:
                evaluator = runner.evaluate(Search(mode, options, ranking, entries, shape, cache, key, budget, time_s),
                                            make_backend, progress)
            else:
                evaluator = Evaluator(make_backend(), ranking, entries, shape, cache, key, budget, time_s, progress)
                run_strategy(mode, options, evaluator, entries, ranking, progress)
    finally:
        if cache is not None:
            cache.close()
    found = evaluator.found if evaluator is not None else {}
    results = [ConfigResult(e, rank_of.get(i), found.get(i)) for i, e in enumerate(entries)]
    best, why = _choose(mode, options, results, ranking, evaluator, sweep is not None and sweep.synthesised)
    if sweep is None and not any(r.entry.prediction.pipelining is not None for r in results
                                 if r.entry.prediction is not None):
        stages = {r.config.get("num_stages") for r in results if r.entry.prediction is not None}
        if len(stages - {None}) > 1:
            notes.append(f"The cost model does not model software pipelining for {spec.name}: num_stages changes "
                         "its prediction only through shared memory (occupancy and bytes in flight).")
    if mode != "gpu":  # the predicted times are the model's: say what they were divided by
        notes.append(f"Predicted times rest on the {achievable(call.card).words()}, and no launch under "
                     f"{LAUNCH_FLOOR_US} µs (iotrace/ceilings.py).")
    if mode == "interpreter":
        notes.append("No GPU: the best is the cost model's choice among configs the Triton interpreter checked; "
                     "interpreted speed says nothing about a GPU, so nothing here is a measured time.")
    if mode in ("interpreter", "static") and (options.budget is not None or options.time_s is not None
                                             or options.strategy != TuneOptions.strategy):
        notes.append(f"--strategy, --budget and --time steer measurements, and {mode} mode measures nothing: they "
                     "were not used (--verify sets how many configs the interpreter checks).")
    result = TuneResult(call, finger, mode, options.strategy, cost, results,
                        best, why, static, len(found), evaluator.measured if evaluator else 0,
                        time.perf_counter() - start, cache.path if cache is not None else None,
                        shape_bucket(spec, shape), notes, sweep.how if sweep is not None else None)
    if options.record is not None:
        import shlex
        import sys

        result.to_sweep(" ".join(shlex.quote(a) for a in ["iotrace", *sys.argv[1:]])).save(options.record)
    return result


def _replay_request(spec: KernelSpec, sweep: Sweep, shape: Shape | None, dtype: str | None, card: Card | None,
                    options: TuneOptions) -> KernelCall:
    """A replay tunes what the sweep recorded; a shape, dtype or card given beside it must agree."""
    from iotrace.cards import lookup

    if sweep.kernel != spec.name:
        raise InvalidValueError(f"the sweep {options.replay} is of {sweep.kernel}, not {spec.name}",
                                f"run `iotrace tune {sweep.kernel} --replay {options.replay}`")
    recorded = lookup(str(sweep.card.get("key", sweep.card.get("name", ""))))
    for what, given, held in (("shape", shape or None, sweep.shape), ("dtype", dtype or None, sweep.dtype),
                              ("card", card.key if card else None, recorded.key)):
        if given and given != held:
            raise InvalidValueError(f"--{what} {given} differs from the sweep's {held}",
                                    f"leave --{what} out with --replay")
    return KernelCall(spec, dict(sweep.shape), sweep.dtype, recorded, sweep.backend)


def run_strategy(mode: str, options: TuneOptions, evaluator: Evaluator, entries: list[StaticEntry],
                 ranking: list[int], progress: Progress) -> None:
    """Run the search ``mode`` asks for over ``evaluator``; the single-process tuner and the Ray runner share it."""
    if mode == "interpreter":
        # The model's top configs, checked; if none passes, further down the ranking until one does.
        progress.start(f"check the top {options.verify_top} under the Triton interpreter", options.verify_top)
        try:
            for position in range(len(ranking)):
                evaluator(position)
                passed = sum(1 for m in evaluator.found.values() if m.verified)
                if position + 1 >= options.verify_top and passed:
                    break
        finally:
            progress.stop()
        return
    space = SearchSpace([entries[i].config for i in ranking],
                        [entries[i].predicted_us or math.inf for i in ranking], options.budget)
    total = min(len(space), options.budget or len(space))
    progress.start(f"{mode}: {options.strategy} search over {len(space)} configs", total)
    try:
        strategy(options.strategy).search(space, evaluator, random.Random(options.seed))
    except BudgetSpent:
        pass
    finally:
        progress.stop()


def _place(best: ConfigResult, results: list[ConfigResult]) -> tuple[str, str]:
    """(``ranked #3``, "") or, when the model predicts the same time (to three significant figures) for others,
    (``tied #1 with 2 others at 143.2 µs predicted``, ``; the model cannot tell them apart ...``)."""
    tied = tied_with(best, results)
    if len(tied) < 2:
        return f"ranked #{best.rank}", ""
    others = len(tied) - 1
    ordered = sorted(tied, key=lambda r: r.rank or 0)
    runner_up = ordered[1] if ordered[0] is best else ordered[0]
    return (f"tied #{min(r.rank or 0 for r in tied)} with {others} other{'s' if others > 1 else ''} at "
            f"{best.entry.predicted_us:.4g} µs predicted",
            "; the model cannot tell them apart (its tie-break orders them: no spills first, then more operand reuse "
            f"per warp, then higher occupancy); ahead of {compact(runner_up.config)} by "
            f"{tie_break(best.entry, runner_up.entry)}")


def _choose(mode: str, options: TuneOptions, results: list[ConfigResult], ranking: list[int],
            evaluator: Evaluator | None, synthesised: bool = False) -> tuple[ConfigResult | None, str]:
    """The best config and why it won, in words that say whether that rests on measurement, a replayed sweep or
    the model (a replayed time is never called measured)."""
    wrong = sum(1 for r in results if r.verified is False)
    rejected = f"; {wrong} config(s) rejected for wrong output" if wrong else ""
    pruned = sum(1 for r in results if r.entry.pruned)
    if mode in ("gpu", "replay"):
        timed = [r for r in results if r.measurement is not None and r.measurement.usable_us is not None]
        if not timed:
            return None, f"no config gave a verified time in {len(evaluator.found) if evaluator else 0} evaluations"
        best = min(timed, key=lambda r: r.measured_us or math.inf)
        kind = "measured" if mode == "gpu" else ("replayed (synthesised, not measured)" if synthesised
                                                 else "replayed (from the recorded sweep)")
        place, tie = _place(best, results)
        return best, (f"fastest verified {kind} time ({best.measured_us:.4g} µs) of {len(timed)} timed in "
                      f"{len(evaluator.found) if evaluator else 0} evaluations ({options.strategy} strategy); "
                      f"the model {place.replace('ranked ', 'ranked it ', 1).replace('tied ', 'had it tied ', 1)} "
                      f"of {len(ranking)} launchable ({pruned} pruned){tie}{rejected}")
    by_rank = sorted((r for r in results if r.rank is not None), key=lambda r: r.rank or 0)
    if mode == "interpreter":
        passed = [r for r in by_rank if r.verified]
        if passed:
            best = passed[0]
            place, tie = _place(best, results)
            return best, (f"{place} of {len(ranking)} launchable by the cost model (predicted "
                          f"{best.entry.predicted_us:.4g} µs, modelled) and checked correct under the Triton "
                          f"interpreter{tie}; {pruned} pruned statically{rejected}")
        if by_rank and options.verify_top > 0:
            return None, f"no checked config gave the reference's answer{rejected}"
    best = by_rank[0]
    place, tie = _place(best, results)
    return best, (f"{place} of {len(ranking)} launchable by the cost model (predicted {best.entry.predicted_us:.4g} "
                  f"µs, modelled; not launched){tie}; {pruned} pruned statically")
