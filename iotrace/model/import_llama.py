"""llama.cpp's ``llama-bench`` results, in each of the forms it prints, as rows with the walls beside them.

Read, as printed by ``json_printer``, ``jsonl_printer``, ``csv_printer`` and ``markdown_printer`` in
``tools/llama-bench/llama-bench.cpp`` (ggml-org/llama.cpp): ``-o json`` (an array of test objects, the closing ``]``
written when every test is done), ``-o jsonl`` (one object per line), ``-o csv`` (every field, quoted) and ``-o md``
(the table people paste; several to a file, each followed by its ``build:`` line), also as a Jupyter
notebook's cells print it. A test with ``n_prompt > 0,
n_gen = 0`` is a prefill (``pp512``), one with ``n_gen > 0, n_prompt = 0`` a decode (``tg128``), both > 0 a ``-pg``
run; ``n_depth`` (``-d``, newer builds) is the context already in the KV cache when the timer starts. ``avg_ts`` is
``(n_prompt + n_gen)`` tokens over each repetition's time, averaged; ``stddev_ts`` their sample standard deviation;
``model_size`` is bytes.

The Markdown tables and the notebooks that print them are read in :mod:`iotrace.model.import_markdown`;
every reader keeps the rows it can read and notes the lines it skipped (:mod:`iotrace.model.import_text`).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from iotrace.cards import Card
from iotrace.errors import InvalidValueError
from iotrace.model.import_rows import (
    GGML_KV_BYTES_PER_VALUE,
    ImportedRun,
    Setting,
    card_of_file,
    field_number,
    field_text,
    walls_of,
)
from iotrace.model.import_text import Skipped, is_prompt

__all__ = ["CPU_BACKENDS", "DEFAULT_NGL", "is_llama_csv_header", "is_llama_row", "llama_csv_rows", "llama_run",
           "typed_field", "what_is"]

#: llama-bench's defaults (``cmd_params_defaults`` in llama-bench.cpp): -ngl 99 offloads every layer of any model
#: it was written for, and -ub 512 is the micro-batch a prompt is evaluated in.
DEFAULT_NGL = 99
DEFAULT_UBATCH = 512
#: ``test::get_backend()`` names no GPU backend: the run was on the CPU (BLAS and ZenDNN are CPU libraries).
CPU_BACKENDS = frozenset({"CPU", "BLAS", "CPU,BLAS", "ZenDNN"})


def is_llama_row(obj: Any) -> bool:
    return isinstance(obj, dict) and {"n_prompt", "n_gen", "avg_ts"} <= obj.keys()


def what_is(obj: Any) -> str:
    """What a JSON value is, for a refusal."""
    if isinstance(obj, dict):
        if "traceEvents" in obj:
            return "a Kineto / Chrome trace (traceEvents): a profiler trace, not a bench result"
        keys = ", ".join(list(obj)[:4])
        return f"a JSON object with keys {keys}{' …' if len(obj) > 4 else ''}" if obj else "an empty JSON object"
    if isinstance(obj, list):
        if obj and isinstance(obj[0], dict) and {"benchmark", "metric"} <= obj[0].keys():
            return "PyTorch-benchmark-format records (vLLM's .pytorch.json): import the plain --output-json file"
        return f"a JSON array whose first item is {type(obj[0]).__name__ if obj else 'missing'}"
    return f"a JSON {type(obj).__name__}"

# --- llama-bench ----------------------------------------------------------------------------------------------------


# llama.cpp architectures whose feed-forward layers are mixtures of experts (llama_model_arch names in
# src/llama-arch.cpp); any "…moe" name, an "8x7B" size and a "35B.A3B" (total.active) size say so too.
_MOE_ARCHS = frozenset({"gpt-oss", "deepseek2", "deepseek3", "dbrx", "arctic", "llama4", "grok", "jamba", "mixtral",
                        "minimax-m2", "glm4moe", "bailingmoe", "hunyuan-moe", "ernie4_5-moe"})


def _moe(model_type: str) -> str:
    """Why ``model_type`` is a mixture of experts ("" if it is not, as far as its name tells)."""
    parts = model_type.split(" ")
    arch, size = [*parts, "", ""][:2]
    if arch in _MOE_ARCHS or "moe" in arch:
        return f"{arch} is a mixture of experts"
    if re.match(r"^\d+x\d", size) or ".A" in size:
        return f"{arch} {size} is a mixture of experts"
    return ""


def _quant(model_type: str) -> str | None:
    """The weight format of ``llama_model_desc``'s "<arch> <size> <ftype>" (e.g. "Q5_K - Medium"), or None."""
    parts = model_type.split(" ", 2)
    return parts[2].strip() or None if len(parts) == 3 else None


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


def llama_run(obj: Any, source: str, setting: Setting, cards: dict[str, tuple[Card | None, str]], *,
              machine_note: str = "") -> ImportedRun:
    """One llama-bench test object (as ``-o json`` writes it) as a row with its walls.

    ``machine_note`` is what a Markdown table's device lines said about where the row ran.
    """
    if not is_llama_row(obj):
        raise InvalidValueError(f"{source} is not a llama-bench test object ({what_is(obj)})",
                                "a file holds the rows of one llama-bench run; restore it as llama-bench wrote it")
    n_prompt = field_number(obj, "n_prompt", source, integer=True)
    n_gen = field_number(obj, "n_gen", source, integer=True)
    depth = field_number(obj, "n_depth", source, integer=True, default=0)
    if n_prompt == 0 and n_gen == 0:
        raise InvalidValueError(f"{source}: n_prompt and n_gen are both 0, a test of nothing",
                                "restore the file as llama-bench wrote it")
    tokens_per_s = float(field_number(obj, "avg_ts", source))
    stddev = field_number(obj, "stddev_ts", source, default=None)
    avg_ns = field_number(obj, "avg_ns", source, default=None)
    size = field_number(obj, "model_size", source, integer=True, default=None)
    n_params = field_number(obj, "model_n_params", source, integer=True, default=None)
    n_gpu_layers = field_number(obj, "n_gpu_layers", source, integer=True, default=None)

    if n_prompt and n_gen:
        phase, test = "end-to-end", f"pp{n_prompt}+tg{n_gen}"
    elif n_prompt:
        phase, test = "prefill", f"pp{n_prompt}"
    else:
        phase, test = "decode", f"tg{n_gen}"
    if depth:
        test += f" @ d{depth}"

    commit, number = field_text(obj, "build_commit"), obj.get("build_number")
    version = (f"{commit} ({number})" if commit and number is not None else commit or
               (str(number) if number is not None else None))
    filename = field_text(obj, "model_filename")
    name = Path(filename).name if filename else (field_text(obj, "model_type") or "unknown")

    gpu_info = field_text(obj, "gpu_info")
    if setting.card is not None:
        card, card_note, card_name = setting.card, "", setting.card.name
    else:
        card, card_note = card_of_file(gpu_info, field_text(obj, "split_mode"), cards)
        card_name = gpu_info or None
    notes: list[str] = []
    shape = setting.shape
    n_ubatch = field_number(obj, "n_ubatch", source, integer=True, default=None)
    backends = field_text(obj, "backends")
    machine = "gpu"
    card_for_walls = card  # a partial offload or a mixture of experts keeps its card but has no wall
    if n_gpu_layers == 0 or backends in CPU_BACKENDS:
        card, card_note, machine = None, machine_note or "n_gpu_layers 0: the model ran on the CPU, no GPU wall", "cpu"
        card_name, card_for_walls = "CPU", None
    elif shape is not None and n_gpu_layers is not None and 0 < n_gpu_layers < shape.layers:
        card_note = f"only {n_gpu_layers} of {shape.layers} layers on the GPU, the rest on the CPU: no single wall"
        card_for_walls, machine = None, "partial"
    elif shape is None and n_gpu_layers is not None and 0 < n_gpu_layers < DEFAULT_NGL:
        card_note = (f"n_gpu_layers {n_gpu_layers}, under llama-bench's default {DEFAULT_NGL}: some layers may have "
                     "run on the CPU (pass --model, a models.toml key, to tell): no single wall")
        card_for_walls, machine = None, "partial"
    if machine_note and machine != "cpu":
        notes.append(machine_note)
    moe = _moe(field_text(obj, "model_type"))
    if moe and card_for_walls is not None:
        card_note = (f"{moe}: a token reads and multiplies only its routed experts, not all {n_params or 0:,} "
                     f"parameters in the file's {size or 0:,} B, so walls from the whole file bound nothing: n/a")
        card_for_walls = None
    if obj.get("no_kv_offload") is True:
        notes.append("KV cache in host memory (no_kv_offload)")
    if shape is not None and n_params and abs(n_params / shape.params - 1) > 0.1:
        notes.append(f"model_n_params {n_params:.3g} is not {shape.key}'s {shape.params:.3g}: is --model right?")

    type_k, type_v = field_text(obj, "type_k") or "f16", field_text(obj, "type_v") or "f16"
    kv_k, kv_v = GGML_KV_BYTES_PER_VALUE.get(type_k.lower()), GGML_KV_BYTES_PER_VALUE.get(type_v.lower())
    # K and V may differ: 2·L·n_kv·d_h·S·((q_k + q_v)/2) is the same sum as L·n_kv·d_h·S·(q_k + q_v).
    kv = (kv_k + kv_v) / 2 if kv_k is not None and kv_v is not None else None
    unknown = [t for t, q in ((type_k, kv_k), (type_v, kv_v)) if q is None]
    kv_note = f"KV type {', '.join(dict.fromkeys(unknown))} unknown to iotrace" if unknown else ""
    peaks, peak_note = _llama_peaks(field_text(obj, "model_type"))
    if phase == "prefill" and peak_note:
        notes.append(peak_note)
    if phase == "end-to-end":
        notes.append("a pp+tg test mixes both phases, so no single wall: see its pp and tg rows")

    walls = walls_of("mixed" if phase == "end-to-end" else phase, tokens_per_s, card_for_walls, card_note,
                     weight_bytes=float(size) if size else None,
                     weight_note="model_size missing: weight bytes unknown",
                     params=float(n_params) if n_params else None, batch=1, depth=depth, shape=shape,
                     shape_note=setting.shape_note if shape is None else "", kv_bytes_per_value=kv, kv_note=kv_note,
                     peaks=peaks, notes=notes, ubatch=n_ubatch or DEFAULT_UBATCH, prompt_tokens=n_prompt)
    return ImportedRun(
        engine="llama.cpp", engine_version=version, source=source, model=name, card_name=card_name,
        card_key=card.key if card is not None else None, test=test, phase=phase, batch=1,
        prompt_tokens=n_prompt, gen_tokens=n_gen, depth=depth, tokens_per_s=tokens_per_s,
        tokens_per_s_stddev=float(stddev) if stddev is not None else None,
        latency_avg_s=avg_ns / 1e9 if avg_ns is not None else None, latency_p50_s=None, latency_p90_s=None,
        latency_p99_s=None, requests=None, weight_bytes=float(size) if size else None,
        params=float(n_params) if n_params else None, kv_bytes_per_value=kv, raw=dict(obj), machine=machine,
        quant=_quant(field_text(obj, "model_type")), ubatch=n_ubatch, **walls)


# --- -o csv ---------------------------------------------------------------------------------------------------------

#: Field types of ``test::get_field_type`` in llama-bench.cpp: every CSV cell is a quoted string.
_INT_FIELDS = frozenset({"build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params",
                         "n_gpu_layers", "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns",
                         "no_op_offload", "n_cpu_moe", "fit_target", "fit_min_ctx", "flash_attn"})
_BOOL_FIELDS = frozenset({"f16_kv", "no_kv_offload", "cpu_strict", "embeddings", "no_host"})
_FLOAT_FIELDS = frozenset({"avg_ts", "stddev_ts"})
# csv_printer::print_header: the field names joined by commas, unquoted (test::get_fields).
CSV_HEADER = re.compile(r"^[a-z_]+(?:,[a-z_]+)+$")


def typed_field(key: str, value: str, where: str) -> Any:
    """A llama-bench field printed as text (a CSV or Markdown cell) as the type ``test::get_field_type`` gives it."""
    try:
        if key in _INT_FIELDS:
            return int(value)
        if key in _FLOAT_FIELDS:
            return float(value)
    except ValueError:
        raise InvalidValueError(f"{where}: {key} is {value!r}, not a number",
                                "restore the file as llama-bench wrote it") from None
    if key in _BOOL_FIELDS:
        return value not in ("0", "false")
    return value


def is_llama_csv_header(line: str) -> bool:
    return bool(CSV_HEADER.match(line.strip())) and {"n_prompt", "n_gen", "avg_ts"} <= set(line.strip().split(","))


def llama_csv_rows(path: Path, text: str, setting: Setting, skipped: Skipped) -> list[ImportedRun]:
    """The rows of a ``llama-bench -o csv`` file (its header names every field), as pasted.

    csv_printer quotes every value, so a line that does not open with a quote is not a row: the run's log output or
    a shell prompt, skipped and noted. A last row with fewer cells than the header is a paste cut short.
    """
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if is_llama_csv_header(line))
    for number, line in enumerate(lines[:start], start=1):
        if line.strip():
            skipped.add("shell prompt line(s)" if is_prompt(line) else "log line(s) before the CSV header", number,
                        line)
    header = lines[start].strip().split(",")
    # the last row-like line (a shell prompt may follow it): a row cut there is where the paste stops
    last = max((i for i, line in enumerate(lines) if line.lstrip().startswith('"')), default=-1) + 1
    cards: dict[str, tuple[Card | None, str]] = {}
    out = []
    for number, line in enumerate(lines[start + 1:], start=start + 2):
        if not line.strip():
            continue
        if not line.lstrip().startswith('"'):
            skipped.add("shell prompt line(s)" if is_prompt(line) else "log line(s) between the CSV rows", number,
                        line)
            continue
        cells = next(csv.reader([line]))
        if len(cells) != len(header) or not line.rstrip().endswith('"'):
            kind = "row(s) cut short at the end" if number == last else "row(s) with a different number of cells"
            skipped.add(kind, number, f"{len(cells)} of {len(header)} cells: {line}")
            continue
        where = f"{path}:{number}"
        obj = {key: typed_field(key, value, where) for key, value in zip(header, cells, strict=True)}
        out.append(llama_run(obj, where, setting, cards))
    if not out:
        raise InvalidValueError(f"{path}: a llama-bench CSV header with no rows that can be read"
                                + (f" ({'; '.join(skipped.notes())})" if skipped.kinds else ""),
                                "no test finished: rerun it")
    return out
