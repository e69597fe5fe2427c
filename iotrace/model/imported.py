"""Other engines' bench files beside iotrace's walls (``iotrace bench import FILE``).

Read here, sniffed from the content (never the extension):

* llama.cpp's ``llama-bench -o json`` (an array of test objects, the closing ``]`` written when every test is done)
  and ``-o jsonl`` (one object per line), as printed by ``json_printer`` / ``jsonl_printer`` in
  ``tools/llama-bench/llama-bench.cpp``. A test with ``n_prompt > 0, n_gen = 0`` is a prefill (``pp512``), one with
  ``n_gen > 0, n_prompt = 0`` a decode (``tg128``), both > 0 a ``-pg`` run; ``n_depth`` (``-d``, newer builds) is
  the context already in the KV cache when the timer starts. ``avg_ts`` is ``(n_prompt + n_gen)`` tokens over each
  repetition's time, averaged; ``stddev_ts`` their sample standard deviation; ``model_size`` is bytes.
* vLLM's ``vllm bench latency --output-json`` (``avg_latency``, ``latencies``, ``percentiles`` keyed "10" … "99",
  ``std_latency`` on newer versions): ``batch_size`` requests of ``input_len`` prompt tokens, each generating
  ``output_len`` tokens, timed end to end. The file does not record those three, so the caller passes them.
* vLLM's ``vllm bench throughput --output-json`` (``elapsed_time``, ``num_requests``, ``total_num_tokens``,
  ``requests_per_second``, ``tokens_per_second``; ``tokens_per_second`` counts prompt and output tokens).

Each row gets the walls of :mod:`iotrace.model.walls` on the card it ran on: the decode wall (identity 1, with
identity 3's KV cache at the row's depth) beside decode figures, the prefill wall (identity 2) beside prefill ones.
A wall is ``None`` with the reason in ``wall_note`` when the card, the weight bytes or the parameter count is unknown.
Two approximations are stated rather than hidden: the decode wall reads the KV cache at the depth the run starts from
(it grows by one token per step, so the wall is that of the first step, an upper bound for the rest), and
llama-bench's ``model_size`` counts the whole token-embedding table, of which a decode step reads one row per token.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.cards import Card, lookup
from iotrace.errors import InvalidValueError, UnknownCardError
from iotrace.model.walls import decode_step_bytes, decode_wall, prefill_wall
from iotrace.model_shapes import ModelShape
from iotrace.model_shapes import model as model_shape

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GGML_KV_BYTES_PER_VALUE", "TABLE_COLUMNS", "WEIGHT_BYTES", "ImportedRun", "imported_table",
           "load_bench_file"]

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
# The CardBook peak that bounds a prefill in each weight dtype (first one the card states).
_DTYPE_PEAKS = {"fp32": ("fp32",), "bf16": ("bf16_tensor",), "fp16": ("fp16_tensor",),
                "fp8e4m3": ("fp8_tensor",), "fp8": ("fp8_tensor",), "int8": ("int8_tensor",)}

#: The columns of :func:`imported_table`, in order.
TABLE_COLUMNS = ("engine", "version", "model", "card", "test", "phase", "batch", "depth", "tok/s", "± tok/s",
                 "decode wall tok/s", "prefill wall tok/s", "% of wall", "p50 s", "p99 s", "note")

_FORMATS = ("llama-bench -o json / -o jsonl, vllm bench latency --output-json or vllm bench throughput --output-json")


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (``raw`` included)."""
        return asdict(self)


# --- reading --------------------------------------------------------------------------------------------------------


def _not_bench(path: Path, what: str) -> InvalidValueError:
    return InvalidValueError(f"{path} is not a bench result iotrace reads ({what})", f"the formats read: {_FORMATS}")


def _read_text(path: Path) -> str:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidValueError(f"{path}: no such file", "check the path") from None
    except IsADirectoryError:
        raise InvalidValueError(f"{path} is a directory", "name the bench file inside it") from None
    except OSError as exc:
        raise InvalidValueError(f"{path} cannot be read ({exc.strerror or exc})",
                                "check the path and its permissions") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _not_bench(path, "it is binary, not JSON text") from None


def _documents(path: Path, text: str) -> tuple[Any, int | None]:
    """The file's JSON value and None, or its JSONL rows as a list of (line number, object) and the first line."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        whole = exc
    lines = text.splitlines()
    # Lines before the first that opens JSON: a backend's start-up log printed to stdout ahead of the JSON
    # (ggml-org/llama.cpp issue #15554). They are skipped only if what follows them is a bench file.
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith(("[", "{"))), None)
    if start is None:
        head = lines[0] if lines else ""
        if "," in head and "avg_ts" in head and "n_prompt" in head:
            raise InvalidValueError(f"{path} is llama-bench CSV (-o csv), which iotrace does not read",
                                    "rerun llama-bench with -o json or -o jsonl")
        raise _not_bench(path, "it is not JSON")
    if start > 0:
        try:
            return json.loads("\n".join(lines[start:])), None
        except json.JSONDecodeError:
            pass
    try:
        first_object = isinstance(json.loads(lines[start]), dict)
    except json.JSONDecodeError:
        first_object = False
    if not first_object:
        if start > 0:
            raise _not_bench(path, f"line {start + 1} opens JSON that does not parse, after {start} other lines")
        raise InvalidValueError(
            f"{path}: invalid JSON at line {whole.lineno} column {whole.colno} ({whole.msg})",
            "the file is cut short or damaged: llama-bench writes the closing ] only after its last test (its "
            "-o jsonl keeps every finished row), vLLM writes the whole file at the end; rerun the bench")
    rows = []
    for number, line in enumerate(lines[start:], start=start + 1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InvalidValueError(f"{path}: line {number} is not valid JSON ({exc.msg}, column {exc.colno})",
                                    "the line is cut short or damaged (a run stopped mid-write?): rerun the "
                                    "bench, or delete that line to import the others") from None
    return rows, start + 1


def _is_llama_row(obj: Any) -> bool:
    return isinstance(obj, dict) and {"n_prompt", "n_gen", "avg_ts"} <= obj.keys()


def _what_is(obj: Any) -> str:
    if isinstance(obj, dict):
        if "traceEvents" in obj:
            return "a Kineto / Chrome trace (traceEvents): a profiler trace, not a bench result"
        if "mean_ttft_ms" in obj or "output_throughput" in obj:
            return "a vllm bench serve result, which is not read yet"
        keys = ", ".join(list(obj)[:4])
        return f"a JSON object with keys {keys}{' …' if len(obj) > 4 else ''}" if obj else "an empty JSON object"
    if isinstance(obj, list):
        if obj and isinstance(obj[0], dict) and {"benchmark", "metric"} <= obj[0].keys():
            return "PyTorch-benchmark-format records (vLLM's .pytorch.json): import the plain --output-json file"
        return f"a JSON array whose first item is {type(obj[0]).__name__ if obj else 'missing'}"
    return f"a JSON {type(obj).__name__}"


# --- field access ---------------------------------------------------------------------------------------------------

_MISSING = object()


def _number(obj: dict[str, Any], key: str, where: str, *, integer: bool = False, default: Any = _MISSING) -> Any:
    if key not in obj or obj[key] is None:
        if default is not _MISSING:
            return default
        raise InvalidValueError(f"{where}: no {key!r} field", f"is this an unedited bench file? ({_FORMATS})")
    value = obj[key]
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        kind = "an integer" if integer else "a finite number"
        raise InvalidValueError(f"{where}: {key} is {value!r}, not {kind}", "restore the file as the bench wrote it")
    if value < 0 and key not in ("n_gpu_layers", "main_gpu", "flash_attn"):
        raise InvalidValueError(f"{where}: {key} is {value!r}, a negative figure",
                                "restore the file as the bench wrote it")
    return value


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    return value.strip() if isinstance(value, str) else ""


# --- what the walls need --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    path: Path
    card: Card | None
    shape: ModelShape | None
    shape_note: str
    model_arg: str | None
    dtype: str
    batch: int | None
    input_len: int | None
    output_len: int | None


def _dtype(dtype: str) -> str:
    name = str(dtype).strip().lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in WEIGHT_BYTES:
        raise InvalidValueError(f"dtype {dtype!r} is not one iotrace knows the width of",
                                f"pass one of {', '.join(WEIGHT_BYTES)}")
    return name


def _shape(name: str | None) -> tuple[ModelShape | None, str]:
    if name is None:
        return None, "no model shape (pass --model, a models.toml key)"
    try:
        return model_shape(name), ""
    except InvalidValueError as exc:
        return None, f"{exc.problem} in models.toml"


def _card_of_file(gpu_info: str, split_mode: str, cache: dict[str, tuple[Card | None, str]]) -> tuple[Card | None, str]:
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


def _walls(phase: str, tokens_per_s: float, card: Card | None, card_note: str, *, weight_bytes: float | None,
           weight_note: str, params: float | None, batch: int, depth: int, shape: ModelShape | None, shape_note: str,
           kv_bytes_per_value: float | None, kv_note: str, peaks: tuple[str, ...], notes: list[str]) -> dict[str, Any]:
    """The walls of one row (keys of :class:`ImportedRun`), every missing input named in ``wall_note``."""
    out: dict[str, Any] = {"step_bytes": None, "decode_wall_tok_s": None, "prefill_wall_tok_s": None,
                           "fraction_of_wall": None}
    notes = list(notes)
    if card_note:
        notes.insert(0, card_note)
    if card is not None and phase in ("decode", "end-to-end"):
        if weight_bytes is None:
            notes.append(weight_note)
        else:
            try:
                bandwidth = card.bandwidth_bytes_per_s
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
                wall = decode_wall(step, batch, bandwidth, f"cardbook {card.key}")
                out["decode_wall_tok_s"] = wall.tokens_per_s
                out["fraction_of_wall"] = wall.fraction(tokens_per_s)
    elif card is not None and phase == "prefill":
        precision = next((p for p in peaks if p in card.peak_tflops), None)
        if params is None:
            notes.append("parameter count unknown: pass --model, a models.toml key")
        elif precision is None:
            notes.append(f"{card.key} states no {' / '.join(peaks)} peak")
        else:
            out["prefill_wall_tok_s"] = prefill_wall(card.peak_flop_per_s(precision), params)
            out["fraction_of_wall"] = tokens_per_s / out["prefill_wall_tok_s"]
            if precision == "int8_tensor":
                notes.append("prefill wall at int8_tensor (llama.cpp's MMQ: quantized weights as int8)")
            elif precision != peaks[0]:
                notes.append(f"prefill wall at the {precision} peak ({card.key} states no {peaks[0]})")
    out["wall_note"] = "; ".join(n for n in notes if n) or None
    return out


# --- llama-bench ----------------------------------------------------------------------------------------------------


def _llama_peaks(model_type: str) -> tuple[tuple[str, ...], str]:
    """The peaks that bound a llama.cpp prefill of these weights, and a note on the choice."""
    words = set(re.split(r"[\s\-]+", model_type.upper()))
    if "BF16" in words:
        return ("bf16_tensor",), ""
    if "F16" in words:
        return ("fp16_tensor",), ("F16 weights: fp16_tensor is the FP32-accumulate peak; cuBLAS with FP16 "
                                  "accumulate runs twice as fast on GeForce cards")
    if "F32" in words:
        return ("tf32_tensor", "fp32"), ""
    # Quantized weights: llama.cpp's CUDA MMQ kernels multiply them as int8 on the tensor cores.
    return ("int8_tensor", "fp16_tensor", "fp32"), ""


def _llama_run(obj: Any, source: str, setting: _Setting, cards: dict[str, tuple[Card | None, str]]) -> ImportedRun:
    if not _is_llama_row(obj):
        raise InvalidValueError(f"{source} is not a llama-bench test object ({_what_is(obj)})",
                                "a file holds the rows of one llama-bench run; restore it as llama-bench wrote it")
    n_prompt = _number(obj, "n_prompt", source, integer=True)
    n_gen = _number(obj, "n_gen", source, integer=True)
    depth = _number(obj, "n_depth", source, integer=True, default=0)
    if n_prompt == 0 and n_gen == 0:
        raise InvalidValueError(f"{source}: n_prompt and n_gen are both 0, a test of nothing",
                                "restore the file as llama-bench wrote it")
    tokens_per_s = float(_number(obj, "avg_ts", source))
    stddev = _number(obj, "stddev_ts", source, default=None)
    avg_ns = _number(obj, "avg_ns", source, default=None)
    size = _number(obj, "model_size", source, integer=True, default=None)
    n_params = _number(obj, "model_n_params", source, integer=True, default=None)
    n_gpu_layers = _number(obj, "n_gpu_layers", source, integer=True, default=None)

    if n_prompt and n_gen:
        phase, test = "end-to-end", f"pp{n_prompt}+tg{n_gen}"
    elif n_prompt:
        phase, test = "prefill", f"pp{n_prompt}"
    else:
        phase, test = "decode", f"tg{n_gen}"
    if depth:
        test += f" @ d{depth}"

    commit, number = _text(obj, "build_commit"), obj.get("build_number")
    version = (f"{commit} ({number})" if commit and number is not None else commit or
               (str(number) if number is not None else None))
    filename = _text(obj, "model_filename")
    name = Path(filename).name if filename else (_text(obj, "model_type") or "unknown")

    gpu_info = _text(obj, "gpu_info")
    if setting.card is not None:
        card, card_note, card_name = setting.card, "", setting.card.name
    else:
        card, card_note = _card_of_file(gpu_info, _text(obj, "split_mode"), cards)
        card_name = gpu_info or None
    notes: list[str] = []
    shape = setting.shape
    if n_gpu_layers == 0:
        card, card_note = None, "n_gpu_layers 0: the model ran on the CPU, no GPU wall"
    elif shape is not None and n_gpu_layers is not None and 0 < n_gpu_layers < shape.layers:
        card, card_note = None, f"only {n_gpu_layers} of {shape.layers} layers on the GPU: no GPU wall"
    if obj.get("no_kv_offload") is True:
        notes.append("KV cache in host memory (no_kv_offload)")
    if shape is not None and n_params and abs(n_params / shape.params - 1) > 0.1:
        notes.append(f"model_n_params {n_params:.3g} is not {shape.key}'s {shape.params:.3g}: is --model right?")

    type_k, type_v = _text(obj, "type_k") or "f16", _text(obj, "type_v") or "f16"
    kv_k, kv_v = GGML_KV_BYTES_PER_VALUE.get(type_k.lower()), GGML_KV_BYTES_PER_VALUE.get(type_v.lower())
    # K and V may differ: 2·L·n_kv·d_h·S·((q_k + q_v)/2) is the same sum as L·n_kv·d_h·S·(q_k + q_v).
    kv = (kv_k + kv_v) / 2 if kv_k is not None and kv_v is not None else None
    unknown = [t for t, q in ((type_k, kv_k), (type_v, kv_v)) if q is None]
    kv_note = f"KV type {', '.join(dict.fromkeys(unknown))} unknown to iotrace" if unknown else ""
    peaks, peak_note = _llama_peaks(_text(obj, "model_type"))
    if phase == "prefill" and peak_note:
        notes.append(peak_note)
    if phase == "end-to-end":
        notes.append("a pp+tg test mixes both phases, so no single wall: see its pp and tg rows")

    walls = _walls("mixed" if phase == "end-to-end" else phase, tokens_per_s, card, card_note,
                   weight_bytes=float(size) if size else None,
                   weight_note="model_size missing: weight bytes unknown", params=float(n_params) if n_params else None,
                   batch=1, depth=depth, shape=shape, shape_note=setting.shape_note if shape is None else "",
                   kv_bytes_per_value=kv, kv_note=kv_note, peaks=peaks, notes=notes)
    return ImportedRun(
        engine="llama.cpp", engine_version=version, source=source, model=name, card_name=card_name,
        card_key=card.key if card is not None else None, test=test, phase=phase, batch=1,
        prompt_tokens=n_prompt, gen_tokens=n_gen, depth=depth, tokens_per_s=tokens_per_s,
        tokens_per_s_stddev=float(stddev) if stddev is not None else None,
        latency_avg_s=avg_ns / 1e9 if avg_ns is not None else None, latency_p50_s=None, latency_p90_s=None,
        latency_p99_s=None, requests=None, weight_bytes=float(size) if size else None,
        params=float(n_params) if n_params else None, kv_bytes_per_value=kv, raw=dict(obj), **walls)


# --- vLLM -----------------------------------------------------------------------------------------------------------


def _percentile(obj: dict[str, Any], which: int, where: str) -> float | None:
    table = obj.get("percentiles")
    if not isinstance(table, dict):
        return None
    for key in (str(which), f"{which}.0", which):
        if key in table:
            return float(_number(table, key, f"{where} percentiles"))
    return None


def _vllm_common(setting: _Setting) -> dict[str, Any]:
    shape = setting.shape
    if shape is not None:
        weight_bytes, weight_note = shape.params * WEIGHT_BYTES[setting.dtype], ""
        name = shape.name
    else:
        weight_bytes = None
        weight_note = f"weight bytes unknown: {setting.shape_note}"
        name = setting.model_arg or "unknown"
    return {"shape": shape, "weight_bytes": weight_bytes, "weight_note": weight_note, "name": name,
            "params": shape.params if shape is not None else None}


def _vllm_latency(obj: dict[str, Any], setting: _Setting) -> ImportedRun:
    source = f"{setting.path}:1"
    missing = [flag for flag, value in (("--batch", setting.batch), ("--input-len", setting.input_len),
                                        ("--output-len", setting.output_len)) if value is None]
    if missing:
        raise InvalidValueError(
            f"{setting.path}: a vllm bench latency JSON does not record its batch size, input and output lengths",
            f"pass {', '.join(missing)} as given to `vllm bench latency` (its defaults: --batch-size 8, --input-len "
            "32, --output-len 128)")
    batch, input_len, output_len = int(setting.batch), int(setting.input_len), int(setting.output_len)
    avg = float(_number(obj, "avg_latency", source))
    if avg <= 0:
        raise InvalidValueError(f"{source}: avg_latency is {avg}, not a positive time",
                                "restore the file as vLLM wrote it")
    latencies = obj.get("latencies")
    if not isinstance(latencies, list):
        raise InvalidValueError(f"{source}: latencies is not a list", "restore the file as vLLM wrote it")
    per_iteration = []
    for i, latency in enumerate(latencies):
        seconds = float(_number({"latency": latency}, "latency", f"{source} latencies[{i}]"))
        if seconds <= 0:
            raise InvalidValueError(f"{source}: latencies[{i}] is {seconds}, not a positive time",
                                    "restore the file as vLLM wrote it")
        per_iteration.append(batch * output_len / seconds)
    stddev = statistics.stdev(per_iteration) if len(per_iteration) > 1 else None
    tokens_per_s = batch * output_len / avg
    common = _vllm_common(setting)
    card = setting.card
    kv = 4.0 if setting.dtype == "fp32" else 2.0  # kv_cache_dtype "auto" follows the activations (bf16 for fp8)
    card_note = "" if card is not None else "the vLLM JSON names no card: pass --card"
    walls = _walls("end-to-end", tokens_per_s, card, card_note,
                   weight_bytes=common["weight_bytes"], weight_note=common["weight_note"], params=common["params"],
                   batch=batch, depth=input_len, shape=common["shape"], shape_note=setting.shape_note,
                   kv_bytes_per_value=kv, kv_note="",
                   peaks=(), notes=["end to end: includes the prefill, so the share of the decode wall is a floor"])
    return ImportedRun(
        engine="vllm", engine_version=None, source=source, model=common["name"],
        card_name=card.name if card is not None else None, card_key=card.key if card is not None else None,
        test=f"latency in{input_len} out{output_len}", phase="end-to-end", batch=batch, prompt_tokens=input_len,
        gen_tokens=output_len, depth=input_len, tokens_per_s=tokens_per_s, tokens_per_s_stddev=stddev,
        latency_avg_s=avg, latency_p50_s=_percentile(obj, 50, source), latency_p90_s=_percentile(obj, 90, source),
        latency_p99_s=_percentile(obj, 99, source), requests=batch, weight_bytes=common["weight_bytes"],
        params=common["params"], kv_bytes_per_value=kv, raw=dict(obj), **walls)


def _vllm_throughput(obj: dict[str, Any], setting: _Setting) -> ImportedRun:
    source = f"{setting.path}:1"
    tokens_per_s = float(_number(obj, "tokens_per_second", source))
    requests = _number(obj, "num_requests", source, integer=True)
    _number(obj, "elapsed_time", source)
    common = _vllm_common(setting)
    card = setting.card
    note = "prefills and decodes of many requests interleave: no single wall; tok/s counts prompt + output tokens"
    return ImportedRun(
        engine="vllm", engine_version=None, source=source, model=common["name"],
        card_name=card.name if card is not None else None, card_key=card.key if card is not None else None,
        test=f"throughput {requests} req", phase="end-to-end", batch=None, prompt_tokens=setting.input_len,
        gen_tokens=setting.output_len, depth=0, tokens_per_s=tokens_per_s, tokens_per_s_stddev=None,
        latency_avg_s=None, latency_p50_s=None, latency_p90_s=None, latency_p99_s=None, requests=requests,
        weight_bytes=common["weight_bytes"], params=common["params"], kv_bytes_per_value=None, step_bytes=None,
        decode_wall_tok_s=None, prefill_wall_tok_s=None, fraction_of_wall=None, wall_note=note, raw=dict(obj))


# --- the entry points -----------------------------------------------------------------------------------------------


def load_bench_file(path: Path, card: str | None = None, model: str | None = None, batch: int | None = None,
                    input_len: int | None = None, output_len: int | None = None,
                    dtype: str = "bf16") -> list[ImportedRun]:
    """The rows of a llama-bench or vLLM bench file, each with its walls; the format is found from the content.

    ``card`` (a CardBook name, forgiving spelling) overrides the file's GPU; without it llama-bench's ``gpu_info``
    is looked up, and a name the CardBook lacks leaves the walls n/a with a note. ``model`` (a models.toml key)
    gives the shape for the KV cache at depth and, for vLLM files, the weights (params × the width of ``dtype``).
    ``batch``, ``input_len`` and ``output_len`` are what ``vllm bench latency`` ran with (its JSON does not say).
    Raises :class:`InvalidValueError` naming the file (and the line or row) for anything that is not such a file.
    """
    path = Path(path)
    for label, value in (("batch", batch), ("input_len", input_len), ("output_len", output_len)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidValueError(f"{label} {value!r} is not a positive whole number", f"pass {label} ≥ 1")
    chosen = lookup(card) if card is not None else None
    shape, shape_note = _shape(model)
    setting = _Setting(path, chosen, shape, shape_note, model, _dtype(dtype), batch, input_len, output_len)
    text = _read_text(path)
    if not text.strip():
        raise InvalidValueError(f"{path} is empty", "point at the file the bench wrote (it writes it at the end)")
    value, first_line = _documents(path, text)
    cards: dict[str, tuple[Card | None, str]] = {}
    if first_line is not None:  # JSONL: (line number, object) pairs
        if not _is_llama_row(value[0][1]):
            raise _not_bench(path, f"line {value[0][0]} is {_what_is(value[0][1])}")
        return [_llama_run(obj, f"{path}:{number}", setting, cards) for number, obj in value]
    if isinstance(value, list):
        if not value:
            raise InvalidValueError(f"{path} is an empty JSON array: no test rows",
                                    "llama-bench writes [ ] with nothing inside when no test finished; check its "
                                    "stderr and rerun it")
        if not _is_llama_row(value[0]):
            raise _not_bench(path, _what_is(value))
        return [_llama_run(obj, f"{path}#{i}", setting, cards) for i, obj in enumerate(value)]
    if _is_llama_row(value):  # a one-line JSONL file
        return [_llama_run(value, f"{path}:1", setting, cards)]
    if isinstance(value, dict) and {"avg_latency", "latencies"} <= value.keys():
        return [_vllm_latency(value, setting)]
    if isinstance(value, dict) and {"elapsed_time", "num_requests", "tokens_per_second"} <= value.keys():
        return [_vllm_throughput(value, setting)]
    raise _not_bench(path, _what_is(value))


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def imported_table(runs: list[ImportedRun]) -> pd.DataFrame:
    """The rows as a table for a terminal, columns :data:`TABLE_COLUMNS`.

    Numbers stay numbers (floats, NaN where absent; batch and depth are whole numbers or None); "% of wall" is
    ``fraction_of_wall`` × 100; "card" is the CardBook key where the card was found, else the file's name for it.
    """
    import pandas as pd

    rows = [{
        "engine": r.engine, "version": r.engine_version or "", "model": r.model,
        "card": r.card_key or r.card_name or "", "test": r.test, "phase": r.phase, "batch": r.batch,
        "depth": r.depth, "tok/s": round(r.tokens_per_s, 2), "± tok/s": _rounded(r.tokens_per_s_stddev, 2),
        "decode wall tok/s": _rounded(r.decode_wall_tok_s, 1), "prefill wall tok/s": _rounded(r.prefill_wall_tok_s, 1),
        "% of wall": _rounded(None if r.fraction_of_wall is None else 100 * r.fraction_of_wall, 1),
        "p50 s": _rounded(r.latency_p50_s, 4), "p99 s": _rounded(r.latency_p99_s, 4), "note": r.wall_note or "",
    } for r in runs]
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for name in ("tok/s", "± tok/s", "decode wall tok/s", "prefill wall tok/s", "% of wall", "p50 s", "p99 s"):
        table[name] = table[name].astype("float64")
    for name in ("batch", "depth"):
        table[name] = table[name].astype(object)
    return table
