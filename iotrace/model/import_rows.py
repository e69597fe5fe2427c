"""The rows of imported bench files and the walls beside them: what every reader of :mod:`iotrace.model.imported`
shares.

Each row gets the walls of :mod:`iotrace.model.walls` on the card it ran on: the decode wall (identity 1, with
identity 3's KV cache at the row's depth) beside decode figures, the prefill wall (identity 2) beside prefill ones.
A wall is ``None`` with the reason in ``wall_note`` when the card, the weight bytes or the parameter count is unknown.
Two approximations are stated rather than hidden: the decode wall reads the KV cache at the depth the run starts from
(it grows by one token per step, so the wall is that of the first step, an upper bound for the rest), and
llama-bench's ``model_size`` counts the whole token-embedding table, of which a decode step reads one row per token.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from iotrace.cards import Card, lookup
from iotrace.errors import InvalidValueError, UnknownCardError
from iotrace.model.walls import decode_step_bytes, decode_wall, prefill_wall
from iotrace.model_shapes import ModelShape
from iotrace.model_shapes import model as model_shape

__all__ = ["DTYPE_PEAKS", "FORMATS", "GGML_KV_BYTES_PER_VALUE", "WEIGHT_BYTES", "ImportedRun", "Setting",
           "card_of_file", "dtype_key", "field_number", "field_text", "not_bench", "shape_of", "walls_of"]

#: Bytes per cached value of llama.cpp's ``-ctk`` / ``-ctv`` types: a block's size over the values it holds, from
#: ggml's ``ggml/src/ggml-common.h`` (block_q8_0 = fp16 scale + 32 int8 = 34 B; block_q4_0 = fp16 scale + 16 B of
#: nibbles = 18 B; block_q4_1 = two fp16 + 16 B = 20 B; block_q5_0 = fp16 + 4 B high bits + 16 B = 22 B;
#: block_q5_1 = two fp16 + 4 B + 16 B = 24 B; block_iq4_nl = fp16 + 16 B = 18 B; 32 values each).
GGML_KV_BYTES_PER_VALUE: dict[str, float] = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0,
    "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
}

#: Bytes per weight of a ``dtype`` name, for files that do not record their weights' size (vLLM).
WEIGHT_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8e4m3": 1.0, "fp8": 1.0, "int8": 1.0}

_DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                  "fp8_e4m3": "fp8e4m3", "float8_e4m3fn": "fp8e4m3"}
#: The CardBook peak that bounds a prefill in each weight dtype (the first one the card states).
DTYPE_PEAKS: dict[str, tuple[str, ...]] = {"fp32": ("fp32",), "bf16": ("bf16_tensor",), "fp16": ("fp16_tensor",),
                "fp8e4m3": ("fp8_tensor",), "fp8": ("fp8_tensor",), "int8": ("int8_tensor",)}

FORMATS = ("llama-bench -o json, -o jsonl, -o csv or -o md (its Markdown tables, several to a file); vllm bench "
           "latency / throughput --output-json, vllm bench serve --save-result (benchmark_serving.py); SGLang "
           "bench_serving --output-file or bench_one_batch --result-filename")


@dataclass(frozen=True)
class ImportedRun:
    """One row of an imported bench file with the walls beside it.

    ``source`` is ``FILE#i`` (the i-th object of a JSON array, from 0) or ``FILE:n`` (line n of a JSONL file, or the
    one object of a JSON file). ``phase`` is "prefill", "decode" or "end-to-end" (a vLLM run, or llama-bench's
    ``-pg``). ``prompt_tokens`` / ``gen_tokens`` are per sequence; ``tokens_per_s`` is the file's rate (all
    sequences). ``fraction_of_wall`` is ``tokens_per_s`` over the wall of the row's phase: the decode wall for decode
    and vLLM latency rows, the prefill wall for prefill rows. ``raw`` is the row as the file has it.
    """

    engine: str
    engine_version: str | None
    source: str
    model: str
    card_name: str | None
    card_key: str | None
    test: str
    phase: str
    batch: int | None
    prompt_tokens: int | None
    gen_tokens: int | None
    depth: int
    tokens_per_s: float
    tokens_per_s_stddev: float | None
    latency_avg_s: float | None
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    requests: int | None
    weight_bytes: float | None
    params: float | None
    kv_bytes_per_value: float | None
    step_bytes: float | None
    decode_wall_tok_s: float | None
    prefill_wall_tok_s: float | None
    fraction_of_wall: float | None
    wall_note: str | None
    raw: dict[str, Any] = field(repr=False)
    #: what the file adds beyond a llama-bench row: the cards the run used (tensor parallel), the weight format as
    #: the file names it, where it ran ("gpu", "cpu" or "partial": some layers on each), llama.cpp's n_ubatch, and a
    #: serving run's request rate, concurrency cap, median TTFT / TPOT / ITL and output tokens per second
    gpus: int = 1
    quant: str | None = None
    machine: str | None = None
    ubatch: int | None = None
    request_rate: float | None = None
    max_concurrency: int | None = None
    ttft_median_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_median_s: float | None = None
    itl_median_s: float | None = None
    output_tokens_per_s: float | None = None
    #: the lines of the file its reader skipped, one note per kind with its count and first line (log lines pasted
    #: between the rows, a shell prompt, a row cut at the end, a table that cannot be read); the same on every row
    read_notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (``raw`` included)."""
        return asdict(self)


def not_bench(path: Path, what: str) -> InvalidValueError:
    return InvalidValueError(f"{path} is not a bench result iotrace reads ({what})", f"the formats read: {FORMATS}")


# --- field access ---------------------------------------------------------------------------------------------------

_MISSING = object()


def field_number(obj: dict[str, Any], key: str, where: str, *, integer: bool = False, default: Any = _MISSING) -> Any:
    if key not in obj or obj[key] is None:
        if default is not _MISSING:
            return default
        raise InvalidValueError(f"{where}: no {key!r} field", f"is this an unedited bench file? ({FORMATS})")
    value = obj[key]
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        kind = "an integer" if integer else "a finite number"
        raise InvalidValueError(f"{where}: {key} is {value!r}, not {kind}", "restore the file as the bench wrote it")
    if value < 0 and key not in ("n_gpu_layers", "main_gpu", "flash_attn"):
        raise InvalidValueError(f"{where}: {key} is {value!r}, a negative figure",
                                "restore the file as the bench wrote it")
    return value


def field_text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    return value.strip() if isinstance(value, str) else ""


# --- what the walls need --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    path: Path
    card: Card | None
    shape: ModelShape | None
    shape_note: str
    model_arg: str | None
    dtype: str
    batch: int | None
    input_len: int | None
    output_len: int | None
    #: cards the run used, as the caller states it (a serving file does not record its tensor parallelism)
    gpus: int = 1
    #: llama-bench Markdown: the -ngl of each table in file order, as the caller states it, for tables that do not
    #: show an ngl column (llama-bench hides it when the backend list names BLAS)
    ngl: tuple[int, ...] = ()


def dtype_key(dtype: str) -> str:
    name = str(dtype).strip().lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in WEIGHT_BYTES:
        raise InvalidValueError(f"dtype {dtype!r} is not one iotrace knows the width of",
                                f"pass one of {', '.join(WEIGHT_BYTES)}")
    return name


def shape_of(name: str | None) -> tuple[ModelShape | None, str]:
    if name is None:
        return None, "no model shape (pass --model, a models.toml key)"
    try:
        return model_shape(name), ""
    except InvalidValueError as exc:
        return None, f"{exc.problem} in models.toml"


def card_of_file(gpu_info: str, split_mode: str, cache: dict[str, tuple[Card | None, str]]) -> tuple[Card | None, str]:
    """The CardBook card llama-bench's gpu_info names, or None and why; "" as the note when found and plain."""
    if gpu_info in cache:
        return cache[gpu_info]
    names = [n.strip() for n in gpu_info.split(",") if n.strip()]
    if not names:
        found: tuple[Card | None, str] = (None, "the file names no GPU (gpu_info empty); pass --card")
    elif len(set(names)) > 1:
        found = (None, f"several different GPUs ({gpu_info}); pass --card")
    else:
        try:
            card: Card | None = lookup(names[0])
        except UnknownCardError:  # a name the CardBook lacks is not an error here: the walls are n/a
            card = None
        if card is None:
            found = (None, f"card {names[0]!r} not in the CardBook; pass --card")
        elif len(names) > 1 and split_mode not in ("", "layer"):
            found = (None, f"{len(names)}× {card.key} with split mode {split_mode}: pass --card for one card's wall")
        elif len(names) > 1:
            found = (card, f"{len(names)}× {card.key}, layer split: layers run one card after another, so the "
                           "wall is one card's")
        else:
            found = (card, "")
    cache[gpu_info] = found
    return found


def _ubatch_wall(out: dict[str, Any], card: Card, gpus: int, weight_bytes: float, ubatch: int, prompt_tokens: int,
                 tokens_per_s: float, notes: list[str]) -> None:
    """Lower ``out``'s prefill wall to the bandwidth wall of its micro-batches where that is lower."""
    tokens = min(ubatch, prompt_tokens)
    try:
        bandwidth_wall = tokens * card.bandwidth_bytes_per_s * gpus / weight_bytes
    except InvalidValueError:
        return
    if bandwidth_wall < out["prefill_wall_tok_s"]:
        out["prefill_wall_tok_s"] = bandwidth_wall
        out["fraction_of_wall"] = tokens_per_s / bandwidth_wall
        notes.append(f"n_ubatch {ubatch}: each micro-batch of {tokens} token{'s' if tokens != 1 else ''} reads "
                     "every weight once, so bandwidth (identity 1), not compute, bounds this prefill")


def walls_of(phase: str, tokens_per_s: float, card: Card | None, card_note: str, *, weight_bytes: float | None,
           weight_note: str, params: float | None, batch: int, depth: int, shape: ModelShape | None, shape_note: str,
           kv_bytes_per_value: float | None, kv_note: str, peaks: tuple[str, ...], notes: list[str],
             gpus: int = 1, ubatch: int | None = None, prompt_tokens: int | None = None) -> dict[str, Any]:
    """The walls of one row (keys of :class:`ImportedRun`), every missing input named in ``wall_note``.

    ``gpus`` > 1 is tensor parallelism: each card reads its share of every weight each step, so the walls are those
    of the cards' summed bandwidth and peak (an upper bound: the all-reduces between them are left out). A "serving"
    row is one stream's decode: whatever the batch, a step reads every weight once and a stream gains one token.
    ``ubatch`` is llama.cpp's micro-batch: a prompt of ``prompt_tokens`` is evaluated in passes of at most that
    many tokens, each reading every weight once, so the prefill wall is also at most tokens per pass · bandwidth /
    weight bytes (identity 1 per pass; at n_ubatch 1 a prefill is a run of decode steps), whichever is lower.
    """
    out: dict[str, Any] = {"step_bytes": None, "decode_wall_tok_s": None, "prefill_wall_tok_s": None,
                           "fraction_of_wall": None}
    notes = list(notes)
    if card_note:
        notes.insert(0, card_note)
    if card is not None and phase in ("decode", "end-to-end", "serving"):
        if weight_bytes is None:
            notes.append(weight_note)
        else:
            try:
                bandwidth = card.bandwidth_bytes_per_s * gpus
            except InvalidValueError as exc:
                bandwidth = None
                notes.append(exc.problem)
            if depth > 0 and shape is not None and kv_bytes_per_value is not None:
                step = decode_step_bytes(weight_bytes, batch, depth, shape.layers, shape.kv_heads, shape.head_dim,
                                         kv_bytes_per_value)
            else:
                if depth > 0:
                    notes.append(f"KV cache at depth {depth} left out: {shape_note or kv_note}")
                step = decode_step_bytes(weight_bytes, batch, 0, 0, 0, 0, 0.0)  # depth 0: the weights alone
            out["step_bytes"] = step
            if bandwidth is not None:
                wall = decode_wall(step, batch, bandwidth, f"cardbook {card.key}" + (f" ×{gpus}" if gpus > 1 else ""))
                out["decode_wall_tok_s"] = wall.tokens_per_s
                out["fraction_of_wall"] = wall.fraction(tokens_per_s)
    elif card is not None and phase == "prefill":
        precision = next((p for p in peaks if p in card.peak_tflops), None)
        if params is None:
            notes.append("parameter count unknown: pass --model, a models.toml key")
        elif precision is None:
            notes.append(f"{card.key} states no {' / '.join(peaks)} peak")
        else:
            out["prefill_wall_tok_s"] = prefill_wall(card.peak_flop_per_s(precision) * gpus, params)
            out["fraction_of_wall"] = tokens_per_s / out["prefill_wall_tok_s"]
            if precision == "int8_tensor":
                notes.append("prefill wall at int8_tensor (llama.cpp's MMQ: quantized weights as int8)")
            elif precision != peaks[0]:
                notes.append(f"prefill wall at the {precision} peak ({card.key} states no {peaks[0]})")
            if ubatch and weight_bytes:
                _ubatch_wall(out, card, gpus, weight_bytes, ubatch, prompt_tokens or ubatch, tokens_per_s, notes)
    fraction = out["fraction_of_wall"]
    if fraction is not None and fraction > 1:
        # A measurement above its wall means the wall's inputs (bytes, card, placement) do not describe the run:
        # showing ">100% of the wall" would be noise as a result.
        notes.append(f"measured {tokens_per_s:.4g} tok/s is above the computed wall: the weight bytes, card or "
                     "placement do not describe this run, so no fraction is given")
        out["fraction_of_wall"] = None
    out["wall_note"] = "; ".join(n for n in notes if n) or None
    return out


