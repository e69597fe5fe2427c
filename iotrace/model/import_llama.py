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

A Markdown table states less than the JSON: sizes rounded to 0.01 GiB, no GPU name, and no ``ngl`` column when the
backend list names BLAS (``markdown_printer::print_header`` treats such a build as a CPU backend). Where each row ran
is told from its columns first (``ngl``; a ``backend`` of CPU alone) and then from the device lines llama.cpp printed
above the table (``ggml_cuda_init: found 1 CUDA devices`` / ``Device 0: NAME, compute capability``, or ``failed to
initialize CUDA``); a row that still cannot be placed is refused, with how to say it (``--ngl``).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
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

__all__ = ["CPU_BACKENDS", "DEFAULT_NGL", "is_llama_row", "is_notebook", "llama_csv_rows", "llama_markdown_rows",
           "llama_run", "looks_like_llama_markdown", "notebook_rows", "what_is"]

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


def _typed(key: str, value: str, where: str) -> Any:
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


def llama_csv_rows(path: Path, text: str, setting: Setting) -> list[ImportedRun]:
    """The rows of a ``llama-bench -o csv`` file (its header names every field)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    missing = [k for k in ("n_prompt", "n_gen", "avg_ts") if k not in header]
    if missing:
        raise InvalidValueError(f"{path}: the CSV header lacks {', '.join(missing)}",
                                "restore the file as llama-bench -o csv wrote it")
    cards: dict[str, tuple[Card | None, str]] = {}
    out = []
    for number, cells in enumerate(reader, start=2):
        if not cells:
            continue
        where = f"{path}:{number}"
        if len(cells) != len(header):
            raise InvalidValueError(f"{where} has {len(cells)} cells, the header {len(header)}",
                                    "the line is cut short or damaged: rerun the bench, or delete that line")
        obj = {key: _typed(key, value, where) for key, value in zip(header, cells, strict=True)}
        out.append(llama_run(obj, where, setting, cards))
    if not out:
        raise InvalidValueError(f"{path}: a llama-bench CSV header with no rows", "no test finished: rerun it")
    return out


# --- -o md ----------------------------------------------------------------------------------------------------------

# The columns every markdown_printer table has, by their display names.
_MD_NEEDED = ("model", "size", "params", "backend", "test", "t/s")
# A GPU named by the device lines printed above a table: CUDA and ROCm builds ("ggml_cuda_init: found 1 CUDA
# devices:" then "  Device 0: NVIDIA L40S, compute capability 8.9, VMM: yes"), Vulkan ("ggml_vulkan: 0 = NAME (").
_DEVICE = re.compile(r"^\s*Device \d+: ([^,]+),|^ggml_vulkan: \d+ = (.+?) \(")
# A GPU backend that failed to start: llama.cpp then runs every layer on the CPU, whatever the backend column says.
_NO_GPU = re.compile(r"failed to initialize (CUDA|ROCm|HIP)|no (CUDA|ROCm)-capable device")
_BUILD = re.compile(r"^build: (\w+) \((\d+)\)")
# A shell line running llama-bench ("$ llama-bench -m x.gguf -ngl 99"), and its -ngl option (a list: -ngl 0,99).
_COMMAND = re.compile(r"^(?:[$#>!]\s*)?(?:\S*/)?llama-bench(?:\.exe)?\s+(.*)$")  # the program, not "-o llama-bench"
# nvidia-smi's banner: "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |"; it describes
# the machine for the rest of the file.
_DRIVER = re.compile(r"Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+)")
_NGL_OPTION = re.compile(r"(?:^|\s)(?:-ngl|--n-gpu-layers)[\s=]+(\S+)")
_TEST = re.compile(r"^(?:pp ?(\d+))?(?:\+)?(?:tg ?(\d+))?(?: @ d(\d+))?$")
_SIZE_UNITS = {"MiB": 2 ** 20, "GiB": 2 ** 30}
# Terminal colour codes a saved log keeps (ggml's device lines, a notebook's stream output).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PARAM_UNITS = {"M": 1e6, "B": 1e9}


@dataclass
class _Table:
    line: int                       # the header's line number
    columns: list[str]
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    no_gpu: str = ""                # the device line that says the GPU backend failed
    command: str = ""               # the llama-bench command line printed above the table, if any
    command_at: int = 0             # its line
    driver: str = ""                # the NVIDIA driver and CUDA versions nvidia-smi printed earlier in the file
    build: tuple[str, int] | None = None


def looks_like_llama_markdown(text: str) -> bool:
    """Whether ``text`` holds a llama-bench Markdown table header."""
    return any(_is_header(line) for line in text.splitlines())


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _is_header(line: str) -> bool:
    return line.lstrip().startswith("|") and set(_MD_NEEDED) <= set(_cells(line))


def _tables(text: str, at: Callable[[int], str]) -> list[_Table]:
    tables: list[_Table] = []
    devices: list[str] = []
    no_gpu = command = driver = ""
    command_at = 0
    current: _Table | None = None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if current is not None:
            if stripped.startswith("|"):
                if not set(stripped) <= set("|-: "):  # the separator row
                    current.rows.append((number, _cells(stripped)))
                continue
            tables.append(current)
            current = None
        build = _BUILD.match(stripped)
        if build and tables and tables[-1].build is None:
            tables[-1].build = (build.group(1), int(build.group(2)))
            devices, no_gpu, command = [], "", ""  # the next run prints its own device lines
            continue
        if _COMMAND.search(stripped):
            command, command_at = stripped, number
        found = _DRIVER.search(line)
        if found:
            driver = f"driver {found.group(1)}, CUDA {found.group(2)} (nvidia-smi)"
        device = _DEVICE.match(line)
        if device:
            devices.append((device.group(1) or device.group(2)).strip())
        elif _NO_GPU.search(line):
            no_gpu = f"line {number}: {stripped}"
        if _is_header(line):
            current = _Table(number, _cells(line), devices=devices, no_gpu=no_gpu, command=command,
                             command_at=command_at, driver=driver)
            devices, no_gpu, command = [], "", ""
        elif stripped.startswith("|") and {"model", "test", "t/s"} <= set(_cells(line)) \
                and set(_cells(line)) & {"size", "params", "backend"}:  # not llama-benchy's (model, test, t/s, ttfr)
            lacking = [c for c in _MD_NEEDED if c not in _cells(line)]
            raise InvalidValueError(f"{at(number)}: a llama-bench table without the {', '.join(lacking)} column",
                                    "paste the table as llama-bench printed it (every column)")
    if current is not None:
        tables.append(current)
    return tables


def _unit_value(cell: str, units: dict[str, float], what: str, where: str) -> int:
    number, _, unit = cell.partition(" ")
    if unit not in units:
        raise InvalidValueError(f"{where}: {what} {cell!r} is not in {' or '.join(units)} as llama-bench prints it",
                                "paste the table as llama-bench printed it")
    try:
        return round(float(number) * units[unit])
    except ValueError:
        raise InvalidValueError(f"{where}: {what} {cell!r} is not a number", "paste the table unedited") from None


def _md_object(table: _Table, number: int, cells: list[str], where: str) -> dict[str, Any]:
    if len(cells) != len(table.columns):
        raise InvalidValueError(f"{where} has {len(cells)} cells, its table's header {len(table.columns)}",
                                "paste the table as llama-bench printed it")
    row = dict(zip(table.columns, cells, strict=True))
    test = _TEST.match(row["test"])
    if not row["test"] or test is None or not any(test.groups()[:2]):
        raise InvalidValueError(f"{where}: test {row['test']!r} is not ppN, tgN or ppN+tgN [@ dN]",
                                "paste the table as llama-bench printed it")
    rate, _, spread = row["t/s"].partition("±")
    try:
        avg_ts, stddev_ts = float(rate), float(spread) if spread.strip() else None
    except ValueError:
        raise InvalidValueError(f"{where}: t/s {row['t/s']!r} is not 'N ± N'", "paste the table unedited") from None
    obj: dict[str, Any] = {
        "model_type": row["model"], "model_size": _unit_value(row["size"], _SIZE_UNITS, "size", where),
        "model_n_params": _unit_value(row["params"], _PARAM_UNITS, "params", where), "backends": row["backend"],
        "n_prompt": int(test.group(1) or 0), "n_gen": int(test.group(2) or 0), "n_depth": int(test.group(3) or 0),
        "avg_ts": avg_ts, "stddev_ts": stddev_ts, "markdown_row": cells,
    }
    for column, key in (("ngl", "n_gpu_layers"), ("threads", "n_threads"), ("n_ubatch", "n_ubatch"),
                        ("n_batch", "n_batch"), ("fa", "flash_attn")):
        if column in row:
            obj[key] = _typed(key, row[column], where)
    for column in ("type_k", "type_v", "sm"):
        if column in row:
            obj["split_mode" if column == "sm" else column] = row[column]
    if table.build is not None:
        obj["build_commit"], obj["build_number"] = table.build
    if table.driver:
        obj["driver"] = table.driver
    if table.command:  # the command as the file shows it, without its shell prompt
        obj["command"] = "llama-bench " + _COMMAND.search(table.command).group(1)
    return obj


def _place(table: _Table, obj: dict[str, Any], index: int, setting: Setting, where: str) -> str:
    """Set where the row ran (``n_gpu_layers``, ``gpu_info``) from its columns, then its table's device lines."""
    if obj["backends"] in CPU_BACKENDS:
        obj["n_gpu_layers"] = 0
        return f"backend {obj['backends']}: the model ran on the CPU"
    if table.no_gpu:
        obj["n_gpu_layers"] = 0
        return f"ran on the CPU: the GPU backend did not start ({table.no_gpu})"
    names = list(dict.fromkeys(table.devices))
    if len(names) > 1 and setting.card is None:
        raise InvalidValueError(f"{where}: the table's device lines name {len(names)} GPUs ({', '.join(names)}) for "
                                "one row", "pass --card to say which card the row is filed under")
    obj["gpu_info"] = names[0] if names else ""
    if "n_gpu_layers" not in obj:
        if len(setting.ngl) > index:
            obj["n_gpu_layers"] = setting.ngl[index]
            return f"ngl {setting.ngl[index]} as stated with --ngl (the table does not show it)"
        if table.command:
            option = _NGL_OPTION.search(table.command)
            if option is None:
                obj["n_gpu_layers"] = DEFAULT_NGL
                return (f"ngl {DEFAULT_NGL}, llama-bench's default: the command above the table sets none "
                        f"(line {table.command_at}: {table.command})")
            if option.group(1).isdigit():
                obj["n_gpu_layers"] = int(option.group(1))
                return (f"ngl {option.group(1)} from the command above the table (line {table.command_at}: "
                        f"{table.command})")
        raise InvalidValueError(
            f"{where}: the table at line {table.line} has no ngl column (llama-bench hides it when its backends "
            f"include BLAS: {obj['backends']}), so whether the model ran on the GPU cannot be told",
            "pass --ngl with the -ngl of each table in file order (e.g. --ngl 0,10,99)")
    return ""


def llama_markdown_rows(path: Path, text: str, setting: Setting,
                        at: Callable[[int], str] | None = None) -> list[ImportedRun]:
    """The rows of every llama-bench Markdown table in ``text``, each placed on the machine that ran it.

    ``at`` names line n of ``text`` in messages and sources (default ``PATH:n``; a notebook's names its cell).
    """
    at = at or (lambda number: f"{path}:{number}")
    tables = _tables(_ANSI.sub("", text), at)
    if not tables:
        raise InvalidValueError(f"{path} holds no llama-bench Markdown table",
                                "paste the table with its header row (| model | size | params | backend | … |)")
    if setting.ngl and len(setting.ngl) != len(tables):
        raise InvalidValueError(f"--ngl gives {len(setting.ngl)} values for {len(tables)} tables in {path}",
                                "give one -ngl per table, in file order")
    cards: dict[str, tuple[Card | None, str]] = {}
    out = []
    for index, table in enumerate(tables):
        if not table.rows:
            raise InvalidValueError(f"{at(table.line)}: a llama-bench table header with no rows",
                                    "paste the whole table")
        for number, cells in table.rows:
            where = at(number)
            obj = _md_object(table, number, cells, where)
            note = _place(table, obj, index, setting, where)
            out.append(llama_run(obj, where, setting, cards, machine_note=note))
    return out


# --- Jupyter notebooks ----------------------------------------------------------------------------------------------


def is_notebook(obj: Any) -> bool:
    """Whether ``obj`` is a Jupyter notebook (nbformat 4: ``cells``, ``nbformat``)."""
    return isinstance(obj, dict) and isinstance(obj.get("cells"), list) and "nbformat" in obj


def notebook_rows(path: Path, notebook: dict[str, Any], setting: Setting) -> list[ImportedRun]:
    """The llama-bench tables a notebook's cells print (stream and text outputs) or paste (Markdown cells).

    Each row's source is ``PATH (cell C, line L)``: the cell counted from 1 and the line within that cell's text.
    """
    lines: list[str] = []
    places: list[str] = []
    for c, cell in enumerate(notebook["cells"], start=1):
        texts = [cell.get("source", "")] if cell.get("cell_type") == "markdown" else []
        for output in cell.get("outputs", []) if isinstance(cell, dict) else []:
            texts.append(output.get("text") or output.get("data", {}).get("text/plain", ""))
        cell_lines = [_ANSI.sub("", line) for text in texts
                      for line in ("".join(text) if isinstance(text, list) else str(text)).splitlines()]
        lines += cell_lines
        places += [f"{path} (cell {c}, line {n})" for n in range(1, len(cell_lines) + 1)]
    text = "\n".join(lines)
    if not looks_like_llama_markdown(text):
        raise InvalidValueError(f"{path} is a Jupyter notebook whose cells print no llama-bench table",
                                "import the bench's own output file, or the notebook that printed its table")
    return llama_markdown_rows(path, text, setting, at=lambda number: places[number - 1])
