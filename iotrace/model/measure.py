"""One model bench run: load, prefill, decode at each depth, and every figure beside its wall.

A run (``iotrace bench``) is: load the weights (a GGUF, or random in a ``models.toml`` shape), tokenise the prompt,
one untimed warm-up repetition (Triton compiles, the allocator settles, the decode step is captured as a CUDA graph
on a GPU), then ``reps`` timed repetitions of prefill + ``gen_tokens`` decode steps at each depth. Depth is
llama-bench's ``-d``: that many tokens are already in the KV cache (filled by an untimed prefill of the prompt's
tokens repeated) when the timed prompt and decode start; prefill is timed at depth 0 only.

Timing: on a GPU each decode step ends with a CUDA event, so the per-token latencies need no host synchronisation
inside the loop; on a CPU, ``time.perf_counter`` per step. Every figure of a CPU run is labelled as a CPU figure of
the path that ran; none is presented as a GPU result.

Walls: the run's own decode wall comes from its device's memory bandwidth, measured in the same run with a copy loop
(:func:`copy_bandwidth_bytes_per_s`, on a GPU and on a CPU); a named card's walls are for the dtype that card would
run (:func:`iotrace.model.walls.card_dtype`), and a CPU run is never shown as a fraction of a GPU's wall.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from iotrace.errors import InvalidValueError
from iotrace.model.copy_bandwidth import copy_bandwidth_bytes_per_s
from iotrace.model.walls import (
    CPU_NOT_A_FRACTION,
    ELEMENT_BYTES,
    DecodeWall,
    card_dtype,
    decode_step_bytes,
    decode_wall,
    prefill_wall,
    weight_bytes_at,
)

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.model.decoder import Decoder
    from iotrace.model.weights import LlamaWeights

__all__ = ["BenchRequest", "BenchResult", "DepthFigures", "Spread", "bench_manifest", "copy_bandwidth_bytes_per_s",
           "device_label", "latency_percentiles", "prompt_ids", "run_bench"]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}
#: The prefill peak of each dtype on a card (CardBook peak_tflops keys): fp32 matmuls run as TF32 on tensor cores.
_PRECISION = {"bf16": "bf16_tensor", "fp16": "fp16_tensor", "fp32": "tf32_tensor"}


@dataclass(frozen=True)
class BenchRequest:
    """What ``iotrace bench`` was asked for (the CLI's options, checked)."""

    model: str | None = None            # the pinned model's key
    gguf: Path | None = None            # any local Llama GGUF
    random_weights: str | None = None   # a models.toml key
    prompt: str | None = None
    prompt_tokens: int | None = None
    gen_tokens: int = 32
    batch: int = 1
    depths: tuple[int, ...] = (0,)
    reps: int = 3
    dtype: str | None = None            # None: bf16 on a GPU, fp32 on a CPU
    kv: str | None = None               # None: the model's dtype
    kernels: str | None = None          # None: triton on a GPU, torch on a CPU
    card: str | None = None
    graph: bool = True
    power: bool = True
    seed: int = 0
    #: 0: greedy; above 0: sampled from softmax(logits / temperature), seeded by ``seed``
    temperature: float = 0.0


@dataclass(frozen=True)
class Spread:
    """A figure over repetitions: mean, sample standard deviation and the values."""

    mean: float
    stddev: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, tuple(values))


def latency_percentiles(ms: list[float]) -> dict[str, float]:
    """p50, p90 and p99 of per-token latencies (the bench's ITL figures, and each engine's)."""
    return {"p50": _percentile(ms, 0.5), "p90": _percentile(ms, 0.9), "p99": _percentile(ms, 0.99)}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    # Linear interpolation between closest ranks (numpy's default "linear" method).
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class DepthFigures:
    depth: int
    #: tokens in the cache when the first timed decode step runs (depth + prompt)
    context_start: int
    decode_tok_s: Spread
    itl_ms: dict[str, float]
    #: bytes one decode step of this run reads (its dtype), at the timed steps' mean context
    step_bytes: float
    #: identity 1 at this depth: from the copy bandwidth measured in the run first, then the CardBook's at the
    #: card's dtype
    walls: list[DecodeWall]
    energy: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        walls = [w.to_dict(self.decode_tok_s.mean) for w in self.walls]
        return {"depth": self.depth, "context_start": self.context_start, "decode_tok_s": asdict(self.decode_tok_s),
                "itl_ms": self.itl_ms, "bytes_per_step": self.step_bytes, "decode_wall": walls[0] if walls else None,
                "walls": walls, "energy": self.energy}


@dataclass
class BenchResult:
    model: dict[str, Any]
    device: str
    kernels: str
    dtype: str
    card: dict[str, Any] | None
    batch: int
    prompt_ids: list[int]
    generated_ids: list[list[int]]
    generated_text: list[str] | None
    prefill_tok_s: Spread
    ttft_ms: Spread
    prefill_wall: dict[str, Any] | None
    depths: list[DepthFigures]
    memory: dict[str, Any]
    labels: list[str] = field(default_factory=list)
    breakdown: dict[str, Any] | None = None
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "iotrace.bench/1", "model": self.model, "device": self.device, "kernels": self.kernels,
                "dtype": self.dtype, "card": self.card, "batch": self.batch,
                "prompt": {"tokens": len(self.prompt_ids), "ids": self.prompt_ids},
                "generated": {"ids": self.generated_ids, "text": self.generated_text},
                "prefill": {"tok_s": asdict(self.prefill_tok_s), "ttft_ms": asdict(self.ttft_ms),
                            "prefill_wall": self.prefill_wall},
                "decode": [d.to_dict() for d in self.depths], "memory": self.memory, "labels": self.labels,
                "breakdown": self.breakdown, "manifest": self.manifest}


# --- the run ---------------------------------------------------------------------------------------------------


class _Clock:
    """Marks on the device's timeline: CUDA events on a GPU (no synchronisation until read), perf_counter on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def intervals_s(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


def _next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """Greedy (temperature 0) or sampled from softmax(logits / temperature), on the logits' device."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _generate(decoder: Decoder, first: torch.Tensor, steps: int, clock: _Clock | None, temperature: float = 0.0,
              generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Decode ``steps`` tokens from ``first`` (B,), greedy or sampled; marks the clock after every step."""
    tokens, current = [], first
    if clock is not None:
        clock.mark()
    for _ in range(steps):
        logits = decoder.decode(current)
        current = _next_token(logits, temperature, generator)
        tokens.append(current)
        if clock is not None:
            clock.mark()
    return tokens


def prompt_ids(request: BenchRequest, tokenizer: Any, vocab: int) -> list[int]:
    """The prompt's token ids: ``prompt_tokens`` random ids (seeded), else the prompt text by ``tokenizer``."""
    if request.prompt_tokens is not None:
        gen = torch.Generator().manual_seed(request.seed)
        return torch.randint(0, vocab, (request.prompt_tokens,), generator=gen).tolist()
    ids = tokenizer.encode(request.prompt, add_special_tokens=False)
    if not ids:
        raise InvalidValueError("the prompt encodes to no tokens", "give a non-empty --prompt or --prompt-tokens N")
    return list(ids)


def _load(request: BenchRequest, dtype: torch.dtype, device: str, kv_bytes_of: Callable[[Any], float],
          progress: Callable[[str], None]) -> tuple[LlamaWeights, Any]:
    from iotrace.model.gguf_file import open_gguf, pinned_gguf
    from iotrace.model.weights import (
        check_fits,
        from_gguf,
        prefill_activation_bytes,
        random_config,
        random_weights,
    )

    element = torch.tensor([], dtype=dtype).element_size()
    # The longest prefill fills the deepest cache at once: its activations are part of the peak.
    rows = request.batch * (max(request.depths) + max(request.prompt_tokens or 0, 64))
    if request.random_weights is not None:
        config = random_config(request.random_weights)
        check_fits(config, element, kv_bytes_of(config), device, prefill_activation_bytes(config, rows, element))
        progress(f"loading: random weights in the {request.random_weights} shape")
        return random_weights(config, dtype, device, request.seed), None
    path = request.gguf if request.gguf is not None else pinned_gguf()
    progress(f"loading: reading {Path(path).name} (metadata and tensor index)")
    gguf = open_gguf(path)
    check_fits(gguf.config, element + 4 if device == "cpu" else element, kv_bytes_of(gguf.config), device,
               prefill_activation_bytes(gguf.config, rows, element))
    tokenizer = None
    if request.prompt_tokens is None:
        from iotrace.model.tokenizer import gguf_tokenizer

        progress("loading: the tokenizer")
        tokenizer = gguf_tokenizer(gguf.path)
    progress(f"loading: dequantising {gguf.file_type} to {_DTYPE_NAMES[dtype]}")
    return from_gguf(gguf, dtype, device), tokenizer


def run_bench(request: BenchRequest, card: Card | None, progress: Callable[[str], None] = lambda _: None
              ) -> BenchResult:
    """Run the bench ``request`` describes; ``card`` (the named or detected one) gives the walls, None for none."""
    from iotrace.identities import kv_cache_bytes
    from iotrace.model.decoder import Decoder
    from iotrace.model.ops import make_ops

    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    dtype_name = request.dtype or ("bf16" if on_gpu else "fp32")
    dtype = _DTYPES[dtype_name]
    kv = request.kv or dtype_name
    if kv == "int8":
        raise InvalidValueError("--kv int8 is not wired into the timed model bench yet; its quality on this model is "
                                "`iotrace quant --kv`, its kernel runs as `iotrace run attention-decode-int8`",
                                "use --kv fp16 or bf16 (the model's dtype)")
    if kv != dtype_name:
        raise InvalidValueError(f"--kv {kv} with --dtype {dtype_name}: the decode kernel reads the cache in the "
                                "model's dtype", f"pass --dtype {kv} to run both in {kv}")
    wall_dtype = card_dtype(dtype_name, on_gpu, request.dtype)
    kernels = request.kernels or ("triton" if on_gpu else "torch")
    if kernels == "triton" and dtype == torch.float32 and on_gpu:
        raise InvalidValueError("the Triton kernels run fp16 or bf16 on a GPU", "pass --dtype bf16 or fp16")

    prompt_guess = request.prompt_tokens or 0
    longest = max(request.depths)

    def kv_bytes_of(config: Any) -> float:
        tokens = longest + max(prompt_guess, 1) + request.gen_tokens + 1
        return kv_cache_bytes(config.layers, config.kv_heads, config.head_dim, tokens,
                              torch.tensor([], dtype=dtype).element_size(), request.batch)

    weights, tokenizer = _load(request, dtype, device, kv_bytes_of, progress)
    c = weights.config
    prompt = prompt_ids(request, tokenizer, c.vocab)
    if longest + len(prompt) + request.gen_tokens + 1 > c.context_length:
        raise InvalidValueError(f"depth {longest} + prompt {len(prompt)} + {request.gen_tokens} generated tokens "
                                f"exceed {c.name}'s context of {c.context_length}",
                                "shorten the prompt, --gen-tokens or --depth")
    ops = make_ops(kernels, card)
    progress(f"measuring the {'GPU' if on_gpu else 'CPU'} memory bandwidth with a copy loop")
    copy_bandwidth = copy_bandwidth_bytes_per_s(device)
    labels = [] if on_gpu else [
        f"CPU figures of the {kernels} path (no GPU here): not GPU results; the decode wall is this CPU's memory "
        "bandwidth, measured in this run" + (f"; {card.name}'s walls are at {wall_dtype}, for reference: "
                                             f"{CPU_NOT_A_FRACTION}" if card is not None else "")]
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()

    meter = None
    if on_gpu and request.power:
        from iotrace.model.power import PowerMeter

        meter = PowerMeter(torch.cuda.current_device())

    ids = torch.tensor([prompt] * request.batch, dtype=torch.int64)
    prefill_s: list[float] = []
    ttft_s: list[float] = []
    generated: list[list[int]] = []
    depth_figures: list[DepthFigures] = []
    breakdown = None
    for depth in request.depths:
        filler = (prompt * (depth // len(prompt) + 1))[:depth]
        full = torch.tensor([filler + prompt] * request.batch, dtype=torch.int64)
        decoder = Decoder(weights, ops, request.batch, depth + len(prompt) + request.gen_tokens + 1)
        per_token: list[float] = []
        rates: list[float] = []
        energy = None
        for rep in range(request.reps + 1):  # rep 0 is the warm-up
            progress(f"depth {depth}: {'warm-up' if rep == 0 else f'repetition {rep} of {request.reps}'}")
            decoder.reset()
            timed_prefill = depth == 0 and rep > 0
            _sync(on_gpu)
            t0 = time.perf_counter()
            logits = decoder.prefill(full if depth else ids)
            first = logits.argmax(-1)
            if timed_prefill:
                _sync(on_gpu)
                elapsed = time.perf_counter() - t0
                prefill_s.append(elapsed)
                ttft_s.append(elapsed)
            if rep == 0:
                # One untimed decode step: it compiles every decode kernel (before a graph captures them), and on a
                # CPU it takes the first step's page faults and allocations out of the first timed step.
                decoder.decode(first)
                decoder.lens -= 1
                if on_gpu and request.graph:
                    decoder.graphed()
                continue
            clock = _Clock(weights.device)
            started = meter.start() if meter is not None else None
            generator = torch.Generator(device=weights.device).manual_seed(request.seed + rep)
            first = _next_token(logits, request.temperature, generator)
            tokens = _generate(decoder, first, request.gen_tokens, clock, request.temperature, generator)
            steps = clock.intervals_s()
            if meter is not None:
                reading = meter.stop(started, request.batch * request.gen_tokens)
                energy = reading.to_dict()
            per_token.extend(steps)
            rates.append(request.batch * len(steps) / sum(steps))
            if depth == request.depths[0] and rep == 1:
                generated = [[int(first[b])] + [int(t[b]) for t in tokens] for b in range(request.batch)]
        if breakdown is None:
            from iotrace.model.breakdown import decode_step_breakdown

            progress(f"depth {depth}: one decode step taken apart (the breakdown)")
            breakdown = decode_step_breakdown(decoder, ops, card, statistics.median(per_token),
                                              first_token=generated[0][-1] if generated else 0,
                                              floor_dtype=wall_dtype)
        # The KV read grows through the timed steps: a step is costed at their mean context.
        mean_context = depth + len(prompt) + request.gen_tokens // 2
        step_bytes, walls = _decode_walls(weights.weight_bytes, dtype_name, request.batch, mean_context, c,
                                          copy_bandwidth, on_gpu, card, wall_dtype)
        ms = [s * 1e3 for s in per_token]
        depth_figures.append(DepthFigures(
            depth, depth + len(prompt), Spread.of(rates),
            latency_percentiles(ms),
            step_bytes, walls, energy))
        del decoder

    prefill_rates = [request.batch * len(prompt) / s for s in prefill_s]
    pw = None
    if card is not None and _PRECISION[wall_dtype] in card.peak_tflops:
        precision = _PRECISION[wall_dtype]
        rate = prefill_wall(card.peak_flop_per_s(precision), c.params)
        pw = {"tok_s": rate, "precision": precision, "dtype": wall_dtype, "card": card.key,
              "fraction": statistics.fmean(prefill_rates) / rate if on_gpu else None,
              "no_fraction": None if on_gpu else CPU_NOT_A_FRACTION}
    memory = _memory(on_gpu)
    progress("the manifest (versions, git, clocks)")
    manifest = _manifest(request, card)
    text = None
    if tokenizer is not None and generated:
        text = [tokenizer.decode(g) for g in generated]
    return BenchResult(
        model={"name": c.name, "source": weights.source, "params": c.params, "weight_bytes": weights.weight_bytes,
               "layers": c.layers, "hidden": c.hidden, "heads": c.heads, "kv_heads": c.kv_heads,
               "quality": "measured" if weights.real else "n/a (random weights)"},
        device=_device_label(on_gpu), kernels=kernels, dtype=dtype_name,
        card=None if card is None else {"key": card.key, "name": card.name, "origin": card.origin},
        batch=request.batch, prompt_ids=prompt, generated_ids=generated, generated_text=text,
        prefill_tok_s=Spread.of(prefill_rates), ttft_ms=Spread.of([s * 1e3 for s in ttft_s]), prefill_wall=pw,
        depths=depth_figures, memory=memory, labels=labels, breakdown=breakdown, manifest=manifest)


def _decode_walls(weight_bytes: float, dtype: str, batch: int, context: int, c: Any, copy_bandwidth: float,
                  on_gpu: bool, card: Card | None, wall_dtype: str) -> tuple[float, list[DecodeWall]]:
    """This run's bytes per decode step at ``context`` and its walls: its own device's (the copy bandwidth measured
    in the run, at the run's dtype) first, then ``card``'s at ``wall_dtype`` (weights and KV at that element size),
    with no fraction from a CPU run."""
    def step_at(at: str) -> tuple[float, float]:
        weights = weight_bytes_at(weight_bytes, dtype, at)
        return weights, decode_step_bytes(weights, batch, context, c.layers, c.kv_heads, c.head_dim,
                                          ELEMENT_BYTES[at])

    own_weights, own_step = step_at(dtype)
    walls = [decode_wall(own_step, batch, copy_bandwidth, f"measured copy (this run, {'GPU' if on_gpu else 'CPU'})",
                         dtype=dtype, weight_bytes=own_weights)]
    if card is not None and card.memory_bandwidth_gbs:
        card_weights, card_step = step_at(wall_dtype)
        walls.append(decode_wall(card_step, batch, card.bandwidth_bytes_per_s, f"CardBook {card.key}",
                                 dtype=wall_dtype, weight_bytes=card_weights,
                                 no_fraction=None if on_gpu else CPU_NOT_A_FRACTION))
    return own_step, walls


def _sync(on_gpu: bool) -> None:
    if on_gpu:
        torch.cuda.synchronize()


def _device_label(on_gpu: bool) -> str:
    if on_gpu:
        return f"cuda: {torch.cuda.get_device_name()}"
    import platform

    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def _memory(on_gpu: bool) -> dict[str, Any]:
    if not on_gpu:
        return {"peak_allocated_bytes": None, "device_used_bytes": None, "note": "no GPU: device memory is n/a"}
    from iotrace.model.power import nvml_memory_used

    used = nvml_memory_used(torch.cuda.current_device())
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(), "device_used_bytes": used,
            "note": "" if used is not None else "NVML absent: device memory used is n/a"}


def device_label(on_gpu: bool) -> str:
    """The device a run ran on, as the bench's JSON names it."""
    return _device_label(on_gpu)


def bench_manifest(request: Any, card: Card | None) -> dict[str, Any]:
    """The run's manifest (argv, the request dataclass, card, device, clocks, versions, git), as the bench's."""
    return _manifest(request, card)


def _manifest(request: Any, card: Card | None) -> dict[str, Any]:
    import shlex

    from iotrace.trace.profilers.manifest import device_info, git_info, versions

    return {"schema": "iotrace.bench-manifest/1", "argv": list(sys.argv),
            "rerun": shlex.join(["iotrace", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("iotrace") else None,
            # Any request dataclass, its nested ones and paths included, as JSON holds it.
            "request": json.loads(json.dumps(asdict(request), default=str)),
            "card": None if card is None else {"key": card.key, "name": card.name, "cc": card.cc,
                                                "origin": card.origin},
            "device": device_info(), "clocks": _clocks(), "versions": versions(), "git": git_info()}


def _clocks() -> dict[str, Any]:
    """SM and memory clocks now and at most, from nvidia-smi (None off a GPU)."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"note": "nvidia-smi not found"}
    query = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem"
    try:
        done = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"note": f"nvidia-smi failed: {exc}"}
    values = done.stdout.splitlines()[0].split(", ") if done.stdout.strip() else []
    return dict(zip(query.split(","), values, strict=False)) if values else {"note": done.stderr.strip()[:200]}
