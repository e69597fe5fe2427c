"""Tuning on a Ray cluster (``iotrace tune ... --ray [ADDRESS]``, extra ``iotrace[ray]``).

Ray schedules; iotrace only keeps a queue of configs. The pieces:

* the static phase's cross-compiles run as Ray tasks on the cluster's CPUs (:meth:`RayRunner.static_phase`);
* one actor per GPU (``num_gpus=1``) measures the configs it is handed with the same backend and verification as
  one process does (in ``gpu`` mode :class:`~iotrace.autotune.backends.GpuBackend`; the interpreter and replay
  backends stand in for GPUs on CPU actors);
* the driver alone writes the SQLite cache (SQLite over a shared filesystem is unsafe:
  https://www.sqlite.org/faq.html#q5), each result committed as it streams back, so a killed sweep resumes;
* each GPU actor reports its device: results are keyed by that card's fingerprint, one tune per card type present,
  all at once on one progress display (:func:`gpu_workers`, :func:`tune_each_card`);
* a lost worker's config goes back to the queue; a config that kills its worker twice is recorded as failed.

The strategy still decides what is measured. It is run again (a millisecond or so) whenever a worker is free, with the
answers so far and the cost model's prediction standing in for those still out; the configs it then asks for and
no worker holds are handed out. Strategies that do not look at answers (exhaustive, random) get the exact set the
single-process tuner measures; the model-guided one may measure a few extra neighbours (cached, not counted). A
last run over the real answers alone makes the result, so it is the single-process tuner's.

Ray is imported only here and only when a cluster is asked for: ``import iotrace`` never pays for it.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from iotrace.autotune.backends import CudaContextError, Measurement
from iotrace.autotune.fingerprint import Fingerprint, fingerprint
from iotrace.autotune.space import config_key
from iotrace.autotune.static import StaticPhase, static_phase
from iotrace.autotune.strategies import BudgetSpent
from iotrace.autotune.tuner import Evaluator, NoProgress, Search, TuneOptions, run_strategy, tune
from iotrace.compiler import UNITS_PER_WORKER, CompileBatch, CompileError, Resources
from iotrace.errors import IotraceError

if TYPE_CHECKING:
    from iotrace.autotune.backends import Backend
    from iotrace.autotune.result import TuneResult
    from iotrace.autotune.tuner import Progress
    from iotrace.cards import Card
    from iotrace.kernel_call import KernelCall
    from iotrace.plugins.spec import Config

__all__ = ["DEATHS_BEFORE_FAILED", "INSTALL", "ClusterError", "GpuGroup", "RayMissingError", "RayRunner", "connect",
           "gpu_workers", "stop_workers", "tune_each_card"]

INSTALL = "pip install 'iotrace[ray]'"

#: A config whose measurement kills its worker this many times is recorded as failed, not retried for ever (issue 22).
DEATHS_BEFORE_FAILED = 2

#: Restarts Ray grants each measuring actor (``max_restarts``, https://docs.ray.io/en/latest/ray-core/fault-tolerance.html):
#: a worker killed by a config comes back for the next one; one killed for good (``ray.kill``) is dropped.
ACTOR_RESTARTS = 4

#: A restarting worker answers "temporarily unavailable" until it is back: asked again this often, at most this many
#: times (a minute: a worker imports torch and Triton again before it answers).
PING_PAUSE_S, PING_TRIES = 0.2, 300

#: How long a cluster address may take to accept a TCP connection: ``ray.init`` itself retries an address that does
#: not answer for minutes before it gives up.
CONNECT_TIMEOUT_S = 5.0

#: The GCS port ``ray start --head`` listens on when none is given (https://docs.ray.io/en/latest/ray-core/
#: configure.html#ports-configurations); Ray Client's ``ray://`` addresses default to 10001.
GCS_PORT, CLIENT_PORT = 6379, 10001


class RayMissingError(IotraceError):
    """``--ray`` on a machine without Ray installed."""


class ClusterError(IotraceError):
    """A cluster that does not answer, has no GPU for a GPU sweep, or lost every worker."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissingError("--ray needs Ray, which is not installed here", f"install it with {INSTALL}") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port`` or ``ray://host:port``; None for ``auto``/``local`` (Ray finds those itself)."""
    if address in ("auto", "local"):
        return None
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    try:
        return host.strip("[]") or "127.0.0.1", int(port) if port else (CLIENT_PORT if client else GCS_PORT)
    except ValueError:
        raise ClusterError(f"--ray {address}: not a cluster address", "give HOST:PORT of the head node, e.g. "
                           f"10.0.0.5:{GCS_PORT}, or --ray alone for this machine") from None


def connect(address: str | None = None) -> None:
    """Join the cluster at ``address`` (None: ``$RAY_ADDRESS``, a cluster this machine runs, else a new local one);
    a session this process already joined is used as it is."""
    ray = _ray()
    if ray.is_initialized():
        return
    named = address or os.environ.get("RAY_ADDRESS")  # ray.init reads $RAY_ADDRESS itself when given none
    where = _host_port(named) if named else None
    if where is not None:
        try:
            socket.create_connection(where, timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise ClusterError(f"the Ray cluster at {named} does not answer ({exc.strerror or exc})",
                               "start it there with `ray start --head`, or check the address (HOST:PORT of the "
                               "head node)") from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        said = " ".join(str(exc).split())[:200]
        raise ClusterError(f"cannot join the Ray cluster at {address or 'this machine'} ({said})",
                           "check the address and that the cluster runs the same Ray and Python") from None


# --- the workers ---------------------------------------------------------------------------------------------


class _Measurer:
    """One worker: builds the backend from its recipe on first use (and again after a restart) and measures."""

    def __init__(self, interpret: bool) -> None:
        # Triton reads this when a kernel module is imported, which here is when the first recipe arrives: the
        # worker's own process, so setting it now decides (a GPU worker never interprets, whatever its node's env).
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
        self._backends: dict[str, Backend] = {}

    def ping(self) -> bool:
        return True

    def device(self) -> tuple[Card, Fingerprint, str]:
        """This worker's card (the CardBook's, by the device's name), its fingerprint and the node it runs on."""
        import ray

        from iotrace.cards import detect

        card = detect()
        return card, fingerprint(card, True), ray.get_runtime_context().get_node_id()

    def measure(self, recipe_key: str, recipe: Callable[[], Backend], config: Config) -> Measurement:
        if recipe_key not in self._backends:
            self._backends = {recipe_key: recipe()}  # one tune's inputs at a time on the card
        return self._backends[recipe_key].measure(config)


def _compile_chunk(units: list[Any], cc: str) -> tuple[list[Resources | tuple[str, str]], int, int]:
    """Compile on a CPU worker; a CompileError travels as (problem, fix) (its pickle keeps only the joined text)."""
    from iotrace.compiler import compile_each

    batch = compile_each(units, cc, jobs=1)
    answers = [(r.problem, r.fix) if isinstance(r, CompileError) else r for r in batch.results]
    return answers, batch.cached, batch.compiled


_REMOTE: dict[str, Any] = {}


def _remote(name: str) -> Any:
    """The Ray remote form of the measurer and the compile task, made once per process."""
    if not _REMOTE:
        ray = _ray()
        _REMOTE["measurer"] = ray.remote(max_restarts=ACTOR_RESTARTS)(_Measurer)
        _REMOTE["compile"] = ray.remote(num_cpus=1)(_compile_chunk)
    return _REMOTE[name]


@dataclass
class GpuGroup:
    """The GPU workers of one card type: their card, the fingerprint results are filed under, the actors."""

    card: Card
    fingerprint: Fingerprint
    actors: list[Any]


def gpu_workers(address: str | None = None) -> list[GpuGroup]:
    """One measuring actor per GPU of the cluster, grouped by the card each reports (one group per card type)."""
    ray = _ray()
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        raise ClusterError(f"the Ray cluster at {address or 'this machine'} has no GPU ({cpus} CPUs, 0 GPUs) for a "
                           "GPU sweep", "add GPU nodes (`ray start --num-gpus N`), or tune on it with --static or "
                           "--replay")
    actors = [_remote("measurer").options(num_gpus=1, num_cpus=0).remote(False) for _ in range(gpus)]
    try:
        devices = ray.get([a.device.remote() for a in actors])
    except ray.exceptions.RayError as exc:  # e.g. a node whose driver or torch cannot see the GPU Ray gave it
        stop_workers(actors)
        cause = getattr(exc, "cause", exc)
        said = getattr(cause, "problem", None) or " ".join(str(cause).split())[:300]
        raise ClusterError(f"a GPU worker of the Ray cluster cannot report its GPU: {said}",
                           "check that node's driver and torch (nvidia-smi, torch.cuda.is_available())") from None
    groups: dict[str, GpuGroup] = {}
    for actor, (card, finger, _node) in zip(actors, devices, strict=True):
        groups.setdefault(finger.text(), GpuGroup(card, finger, [])).actors.append(actor)
    return list(groups.values())


class _Cancelled(IotraceError):
    """Another card type's tune failed or was interrupted: this one stops where it is (its results are cached)."""


class _SharedProgress:
    """Several card types' tunes, run at once, on one progress display: one bar, the sum of their steps."""

    def __init__(self, progress: Progress) -> None:
        self._progress, self._lock = progress, threading.Lock()
        self._tasks: dict[str, list[Any]] = {}  # label -> [description, total, done, live]

    def view(self, label: str) -> _ProgressView:
        self._tasks[label] = ["", 0, 0, False]
        return _ProgressView(self, label)

    def _update(self, label: str, description: str | None = None, total: int | None = None, steps: int = 0,
                live: bool | None = None) -> None:
        with self._lock:
            task = self._tasks[label]
            if description is not None:
                task[:] = [description, total or 0, 0, True]
            task[2] += steps
            if live is not None:
                task[3] = live
            if description is None and live is None:
                self._progress.advance(steps)
                return
            running = [(name, t) for name, t in self._tasks.items() if t[3]]
            if not running:
                self._progress.stop()
                return
            self._progress.start("; ".join(f"{name}: {t[0]}" for name, t in running), sum(t[1] for _, t in running))
            self._progress.advance(sum(t[2] for _, t in running))


class _ProgressView:
    """One card type's :class:`~iotrace.autotune.tuner.Progress` within the shared display."""

    def __init__(self, shared: _SharedProgress, label: str) -> None:
        self._shared, self._label = shared, label

    def start(self, description: str, total: int) -> None:
        self._shared._update(self._label, description, total)

    def advance(self, steps: int = 1) -> None:
        self._shared._update(self._label, steps=steps)

    def stop(self) -> None:
        self._shared._update(self._label, live=False)


def tune_each_card(groups: list[GpuGroup], make_call: Callable[[Card], KernelCall], options: TuneOptions,
                   progress: Progress | None = None,
                   stand_in: Callable[[Card], Callable[[], Backend]] | None = None) -> list[TuneResult]:
    """One ``gpu`` tune per card type, all at once (each on its own GPUs, the static phases sharing the CPUs), each
    filed under its own fingerprint; the first failure (or Ctrl-C) stops the others where they are.
    ``stand_in(card)``: the backend recipe the workers use instead of the GPU backend (the tests' replays)."""
    calls = [make_call(group.card) for group in groups]  # every card's request checked before anything starts
    runners = [RayRunner(group, backend=stand_in(group.card) if stand_in is not None else None) for group in groups]
    options = replace(options, mode="gpu")
    if len(groups) == 1:
        return [tune(calls[0], options, progress, runners[0])]
    shared = _SharedProgress(progress or NoProgress())
    labels = [group.card.name for group in groups]
    if len(set(labels)) < len(labels):  # one card under two drivers, say: the fingerprints tell them apart
        labels = [group.fingerprint.text() for group in groups]
    with ThreadPoolExecutor(len(groups), thread_name_prefix="iotrace-tune") as pool:
        futures = [pool.submit(tune, call, options, shared.view(label), runner)
                   for call, label, runner in zip(calls, labels, runners, strict=True)]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for runner in runners:
                runner.cancel.set()
            raise


def stop_workers(actors: list[Any]) -> None:
    ray = _ray()
    for actor in actors:
        ray.kill(actor)


# --- the runner ----------------------------------------------------------------------------------------------


def _pending_guess(predicted_us: float | None) -> Measurement:
    """What a strategy is told about a config still out: the model's time, passing its check."""
    return Measurement("ok", predicted_us if predicted_us is not None else math.inf, None, None, True,
                       "pending (the cost model's time stands in)")


class _Full(BudgetSpent):
    """The probe found as many new configs as there are free workers."""


class _Lookup:
    """The backend a probe sees: answers, the cache, else a guess (and the config is wanted)."""

    timed = True

    def __init__(self, runner_state: _State, room: int) -> None:
        self.state, self.room, self.wanted = runner_state, room, []
        self.method = runner_state.search.mode

    def measure(self, config: Config) -> Measurement:
        state = self.state
        i = state.index[config_key(config)]
        if i in state.answers:
            return state.answers[i]
        search = state.search
        if search.cache is not None and i not in state.looked_up:
            state.looked_up.add(i)
            hit = search.cache.get(search.key, config, search.shape)
            if hit is not None:
                state.answers[i] = hit
                state.progress.advance()
                return hit
        if i not in state.pending and i not in self.wanted:
            if len(self.wanted) >= self.room:
                raise _Full
            self.wanted.append(i)
        return _pending_guess(search.entries[i].predicted_us)


class _Answered:
    """The backend of the last run: only real answers; a config never measured ends the search there."""

    timed = True

    def __init__(self, state: _State) -> None:
        self.state, self.method = state, state.search.mode

    def measure(self, config: Config) -> Measurement:
        found = self.state.answers.get(self.state.index[config_key(config)])
        if found is None:
            raise BudgetSpent
        return found


@dataclass
class _State:
    search: Search
    progress: Progress
    index: dict[str, int]
    answers: dict[int, Measurement]
    looked_up: set[int]
    pending: set[int]


class RayRunner:
    """A :class:`~iotrace.autotune.tuner.Runner` on the Ray cluster this process joined (:func:`connect`).

    ``gpus``: the measuring actors of one card type and their fingerprint (:func:`gpu_workers`); None measures on
    ``workers`` CPU actors (default: one per cluster CPU) with the interpreter or replay backend. ``backend``
    replaces the mode's backend recipe on the workers (a stand-in GPU, e.g. one that crashes on a config).
    """

    def __init__(self, gpus: GpuGroup | None = None, workers: int | None = None,
                 backend: Callable[[], Backend] | None = None) -> None:
        self._ray = _ray()
        self.gpus, self.workers, self.backend = gpus, workers, backend
        self.has_gpus = gpus is not None
        #: actor -> the config it is measuring now (a test kills a busy worker from here).
        self.busy: dict[Any, Config] = {}
        #: entry index -> how many workers died measuring it.
        self.deaths: dict[int, int] = {}
        self.workers_lost = 0
        #: Set from another thread to stop this runner's search or compiles at the next result (or within a second).
        self.cancel = threading.Event()

    def _wait(self, refs: list[Any]) -> Any:
        """The next finished of ``refs``, waking every second to see whether the tune was cancelled."""
        while True:
            ready, _ = self._ray.wait(refs, num_returns=1, timeout=1.0)
            if ready:
                return ready[0]
            if self.cancel.is_set():
                raise _Cancelled("stopped: another card type's tune failed or was interrupted",
                                 "results so far are in the tuning cache: run the same command again")

    def fingerprint(self, card: Card, on_gpu: bool) -> Fingerprint:
        if on_gpu:
            assert self.gpus is not None  # tune() asked has_gpus first
            return self.gpus.fingerprint
        return fingerprint(card, False)

    def static_phase(self, call: KernelCall, configs: list[Config], jobs: int | None,
                     progress: Callable[[int], None]) -> StaticPhase:
        return static_phase(call, configs, jobs, progress, compile_units=self._compile)

    def _compile(self, units: list[Any], cc: str, jobs: int | None = None,
                 progress: Callable[[int], None] | None = None) -> CompileBatch:
        """compile_each's answer, the units spread over the cluster's CPUs in chunks of at most UNITS_PER_WORKER."""
        ray = self._ray
        cpus = max(1, jobs or int(ray.cluster_resources().get("CPU", 1)))
        size = max(1, min(UNITS_PER_WORKER, -(-len(units) // cpus)))
        task = _remote("compile")
        chunks = {task.remote(units[s:s + size], cc): s for s in range(0, len(units), size)}
        workers = len(chunks)
        results: list[Resources | CompileError | None] = [None] * len(units)
        cached = compiled = 0
        while chunks:
            ready = self._wait(list(chunks))
            start = chunks.pop(ready)
            try:
                answers, hit, new = ray.get(ready)
            except self._ray.exceptions.RayError as exc:  # a worker lost mid-compile: no half static phase
                cause = getattr(exc, "cause", None)
                if isinstance(cause, IotraceError):  # e.g. nvcc missing on that node: its own one-line message
                    raise cause from None
                raise ClusterError(f"a Ray compile worker failed ({' '.join(str(exc).split())[:200]})",
                                   "compiled configs are in the compile cache: run the same command again") from None
            cached, compiled = cached + hit, compiled + new
            for offset, answer in enumerate(answers):
                results[start + offset] = answer if isinstance(answer, Resources) else CompileError(*answer)
            if progress is not None:
                progress(len(answers))
        return CompileBatch([r for r in results if r is not None], cached, compiled, workers)

    def _count(self) -> int:
        if self.gpus is not None:
            return len(self.gpus.actors)
        return self.workers or max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def _actors(self, mode: str) -> tuple[list[Any], bool]:
        """(the measuring actors, whether they were started here and are stopped after the search)."""
        if self.gpus is not None:
            return list(self.gpus.actors), False
        return [_remote("measurer").options(num_cpus=1).remote(mode == "interpreter") for _ in range(self._count())], \
            True

    def evaluate(self, search: Search, make_backend: Callable[[], Backend], progress: Progress) -> Evaluator:
        ray = self._ray
        from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

        options = search.options
        # Every probe must draw the same random order: one seed for the whole search.
        probe_options = replace(options, seed=options.seed if options.seed is not None else random.randrange(2**31))
        state = _State(search, progress, {config_key(e.config): i for i, e in enumerate(search.entries)}, {}, set(),
                       set())
        recipe_key, recipe = uuid.uuid4().hex, ray.put(self.backend or make_backend)
        queue: deque[int] = deque()
        in_flight: dict[Any, tuple[Any, int]] = {}
        pings: dict[Any, Any] = {}
        tries: dict[Any, int] = {}
        total = options.verify_top if search.mode == "interpreter" else min(len(search.ranking),
                                                                            search.budget or len(search.ranking))
        count = self._count()
        where = f"{count} GPU{'s' if count > 1 else ''}" if self.gpus else f"{count} Ray workers"
        what = (f"check the top {options.verify_top} under the Triton interpreter" if search.mode == "interpreter"
                else f"{search.mode}: {options.strategy} search over {len(search.ranking)} configs")
        progress.start(f"{what} on {where}", total)
        deadline = None if search.time_s is None else _now() + search.time_s
        # A resumed sweep may find everything in the cache: workers start only once something is to be measured.
        queue.extend(self._probe(state, probe_options, count))
        state.pending.update(queue)
        actors, started = self._actors(search.mode) if queue or self.gpus is not None else ([], False)
        idle = list(actors)
        try:
            while True:
                if idle and len(queue) < len(idle) and (deadline is None or _now() < deadline):
                    wanted = self._probe(state, probe_options, len(idle) - len(queue))
                    queue.extend(wanted)
                    state.pending.update(wanted)
                while idle and queue:
                    actor, i = idle.pop(), queue.popleft()
                    config = search.entries[i].config
                    in_flight[actor.measure.remote(recipe_key, recipe, config)] = (actor, i)
                    self.busy[actor] = config
                if not in_flight and not pings:
                    if not idle and (queue or self._probe(state, probe_options, 1)):
                        raise ClusterError(f"every Ray worker was lost ({self.workers_lost}) with {len(queue)} "
                                           "configs still to measure", "results so far are in the tuning cache: "
                                           "run the same command again to resume")
                    break
                ready = self._wait([*in_flight, *pings])
                if ready in pings:
                    actor = pings.pop(ready)
                    try:
                        ray.get(ready)
                        idle.append(actor)
                        tries.pop(actor, None)
                    except ActorUnavailableError:  # still restarting: ask again shortly
                        tries[actor] = tries.get(actor, 0) + 1
                        if tries[actor] > PING_TRIES:
                            self.workers_lost += 1
                            continue
                        time.sleep(PING_PAUSE_S)
                        pings[actor.ping.remote()] = actor
                    except RayActorError:  # dead for good (killed, or out of restarts): the others go on
                        self.workers_lost += 1
                    continue
                actor, i = in_flight.pop(ready)
                self.busy.pop(actor, None)
                state.pending.discard(i)
                try:
                    found = ray.get(ready)
                except (RayActorError, RayTaskError) as exc:
                    cause = getattr(exc, "cause", exc)
                    if isinstance(exc, RayTaskError) and not isinstance(cause, CudaContextError):
                        raise cause if isinstance(cause, IotraceError) else ClusterError(
                            f"a Ray worker failed measuring {search.entries[i].config}: {str(cause)[:300]}",
                            "results so far are in the tuning cache; fix the cause and run again") from None
                    if isinstance(exc, RayTaskError):  # a CUDA error leaves the worker's context unusable: restart it
                        ray.kill(actor, no_restart=False)
                    self.deaths[i] = self.deaths.get(i, 0) + 1
                    pings[actor.ping.remote()] = actor
                    if self.deaths[i] < DEATHS_BEFORE_FAILED:
                        queue.appendleft(i)  # the lost worker's config, first in line for the next free one
                        state.pending.add(i)
                        continue
                    found = Measurement("failed", None, None, None, None, "none",
                                        f"its worker died {self.deaths[i]} times measuring it ({type(exc).__name__})")
                else:
                    idle.append(actor)
                self._record(state, i, found)
        finally:
            progress.stop()
            self.busy.clear()
            if started:
                stop_workers(actors)
        final = Evaluator(_Answered(state), search.ranking, search.entries, search.shape, None, None, search.budget,
                           None, NoProgress())
        # The interpreter's loop does not catch BudgetSpent; a search cut short by --time ends where it stopped.
        with contextlib.suppress(BudgetSpent):
            run_strategy(search.mode, probe_options, final, search.entries, search.ranking, NoProgress())
        final.measured = sum(1 for m in final.found.values() if not m.cached)
        return final

    def _record(self, state: _State, i: int, found: Measurement) -> None:
        """One streamed answer: kept, committed to the cache at once (the driver is its only writer), counted."""
        search = state.search
        state.answers[i] = found
        if search.cache is not None:
            search.cache.put(search.key, search.entries[i].config, search.shape, found)
        state.progress.advance()

    def _probe(self, state: _State, options: Any, room: int) -> list[int]:
        """The strategy run once more on what is known: the configs it asks for that nobody measures yet."""
        lookup = _Lookup(state, room)
        search = state.search
        evaluator = Evaluator(lookup, search.ranking, search.entries, search.shape, None, None, search.budget, None,
                               NoProgress())
        with contextlib.suppress(BudgetSpent):
            run_strategy(search.mode, options, evaluator, search.entries, search.ranking, NoProgress())
        return lookup.wanted


def _now() -> float:
    return time.monotonic()
