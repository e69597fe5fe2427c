"""Other engines' bench files beside iotrace's walls (``iotrace bench import FILE``).

The format is sniffed from the content (never the extension) and read by :mod:`iotrace.model.import_llama`
(llama-bench's JSON, JSONL, CSV and Markdown) or :mod:`iotrace.model.import_serving` (vLLM's latency, throughput and
serve results; SGLang's bench_serving); :mod:`iotrace.model.import_rows` holds the row and its walls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.cards import Card, lookup
from iotrace.errors import InvalidValueError
from iotrace.model.import_llama import (
    is_llama_row,
    is_notebook,
    llama_csv_rows,
    llama_markdown_rows,
    llama_run,
    looks_like_llama_markdown,
    notebook_rows,
    what_is,
)
from iotrace.model.import_rows import (
    GGML_KV_BYTES_PER_VALUE,
    WEIGHT_BYTES,
    ImportedRun,
    Setting,
    dtype_key,
    not_bench,
    shape_of,
)
from iotrace.model.import_serving import (
    is_one_batch_result,
    is_serving_result,
    one_batch_runs,
    serving_run,
    vllm_latency,
    vllm_throughput,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GGML_KV_BYTES_PER_VALUE", "TABLE_COLUMNS", "WEIGHT_BYTES", "ImportedRun", "imported_table",
           "load_bench_file"]

#: The columns of :func:`imported_table`, in order.
TABLE_COLUMNS = ("engine", "version", "model", "card", "test", "phase", "batch", "depth", "tok/s", "± tok/s",
                 "decode wall tok/s", "prefill wall tok/s", "% of wall", "p50 s", "p99 s", "note")


# --- reading --------------------------------------------------------------------------------------------------------


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
        raise not_bench(path, "it is binary, not text") from None


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
        raise not_bench(path, "it is not JSON, llama-bench CSV or a llama-bench Markdown table")
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
            raise not_bench(path, f"line {start + 1} opens JSON that does not parse, after {start} other lines")
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


# --- the entry points -----------------------------------------------------------------------------------------------


def load_bench_file(path: Path, card: str | None = None, model: str | None = None, batch: int | None = None,
                    input_len: int | None = None, output_len: int | None = None,
                    dtype: str = "bf16", gpus: int = 1, ngl: tuple[int, ...] = ()) -> list[ImportedRun]:
    """The rows of a llama-bench, vLLM or SGLang bench file, each with its walls; the format is found from the content.

    ``card`` (a CardBook name, forgiving spelling) overrides the file's GPU; without it llama-bench's ``gpu_info``
    is looked up, and a name the CardBook lacks leaves the walls n/a with a note. ``model`` (a models.toml key)
    gives the shape for the KV cache at depth and, for vLLM files, the weights (params × the width of ``dtype``).
    ``batch``, ``input_len`` and ``output_len`` are what ``vllm bench latency`` ran with (its JSON does not say).
    ``gpus`` is a serving run's tensor parallelism (its file does not say); ``ngl`` the ``-ngl`` of each llama-bench
    Markdown table in file order, for tables that do not show it.
    Raises :class:`InvalidValueError` naming the file (and the line or row) for anything that is not such a file.
    """
    path = Path(path)
    for label, value in (("batch", batch), ("input_len", input_len), ("output_len", output_len), ("gpus", gpus)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidValueError(f"{label} {value!r} is not a positive whole number", f"pass {label} ≥ 1")
    chosen = lookup(card) if card is not None else None
    shape, shape_note = shape_of(model)
    setting = Setting(path, chosen, shape, shape_note, model, dtype_key(dtype), batch, input_len, output_len,
                      gpus=gpus, ngl=tuple(ngl))
    text = _read_text(path)
    if not text.strip():
        raise InvalidValueError(f"{path} is empty", "point at the file the bench wrote (it writes it at the end)")
    first = text.lstrip().split("\n", 1)[0]
    if not first.startswith(("[", "{")):
        if "avg_ts" in first and "n_prompt" in first and "," in first:
            return llama_csv_rows(path, text, setting)
        if looks_like_llama_markdown(text):
            return llama_markdown_rows(path, text, setting)
    try:
        value, first_line = _documents(path, text)
    except InvalidValueError:
        if looks_like_llama_markdown(text):  # a Markdown report whose first line opens with [ or { (a link)
            return llama_markdown_rows(path, text, setting)
        raise
    cards: dict[str, tuple[Card | None, str]] = {}
    if first_line is not None:  # JSONL: (line number, object) pairs
        head = value[0][1]
        if is_serving_result(head):
            return [serving_run(obj, f"{path}:{number}", setting) for number, obj in value]
        if is_one_batch_result(head):
            return [run for number, obj in value for run in one_batch_runs(obj, f"{path}:{number}", setting)]
        if not is_llama_row(head):
            raise not_bench(path, f"line {value[0][0]} is {what_is(head)}")
        return [llama_run(obj, f"{path}:{number}", setting, cards) for number, obj in value]
    if isinstance(value, list):
        if not value:
            raise InvalidValueError(f"{path} is an empty JSON array: no test rows",
                                    "llama-bench writes [ ] with nothing inside when no test finished; check its "
                                    "stderr and rerun it")
        if not is_llama_row(value[0]):
            raise not_bench(path, what_is(value))
        return [llama_run(obj, f"{path}#{i}", setting, cards) for i, obj in enumerate(value)]
    if is_llama_row(value):  # a one-line JSONL file
        return [llama_run(value, f"{path}:1", setting, cards)]
    if is_serving_result(value):
        return [serving_run(value, f"{path}:1", setting)]
    if is_one_batch_result(value):
        return one_batch_runs(value, f"{path}:1", setting)
    if is_notebook(value):
        return notebook_rows(path, value, setting)
    if isinstance(value, dict) and {"avg_latency", "latencies"} <= value.keys():
        return [vllm_latency(value, setting)]
    if isinstance(value, dict) and {"elapsed_time", "num_requests", "tokens_per_second"} <= value.keys():
        return [vllm_throughput(value, setting)]
    raise not_bench(path, what_is(value))


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
