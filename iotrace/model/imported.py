"""Other engines' bench files beside iotrace's walls (``iotrace bench import FILE``).

The format is sniffed from the content (never the extension) and read by :mod:`iotrace.model.import_llama`
(llama-bench's JSON, JSONL and CSV), :mod:`iotrace.model.import_markdown` (its Markdown tables) or
:mod:`iotrace.model.import_serving` (vLLM's latency, throughput and serve results; SGLang's bench_serving);
:mod:`iotrace.model.import_rows` holds the row and its walls. Pasted output (log lines between the rows, a shell
prompt, CRLF, a paste cut mid-row) is read as the bench wrote it, every line not read noted
(:mod:`iotrace.model.import_text`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotrace.cards import Card, lookup
from iotrace.errors import InvalidValueError
from iotrace.model.import_llama import is_llama_csv_header, is_llama_row, llama_csv_rows, llama_run, what_is
from iotrace.model.import_markdown import is_notebook, llama_markdown_rows, looks_like_llama_markdown, notebook_rows
from iotrace.model.import_own_serve import is_own_serve, own_serve_runs
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
from iotrace.model.import_text import Skipped, json_values, normalise_newlines

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
        return normalise_newlines(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise not_bench(path, "it is binary, not text") from None


def _json_values(path: Path, text: str, skipped: Skipped) -> list[tuple[int, Any]] | None:
    """The file's JSON values as (first line, value): the whole text, or the values among its other lines (a log
    before the JSON, ggml-org/llama.cpp issue #15554; a pasted terminal); None when it holds none but a llama-bench
    Markdown table (a report whose first line opens with [ or {, a link)."""
    try:
        return [(1, json.loads(text))]
    except json.JSONDecodeError:
        pass
    scan = Skipped()
    values, failure = json_values(text, scan)
    if not values:
        if looks_like_llama_markdown(text):
            return None
        if failure is not None:
            raise InvalidValueError(
                f"{path}: invalid JSON at line {failure.lineno} column {failure.colno} ({failure.msg})",
                "the file is cut short or damaged: llama-bench writes the closing ] only after its last test (its "
                "-o jsonl keeps every finished row), vLLM writes the whole file at the end; rerun the bench")
        raise not_bench(path, "it is not JSON, llama-bench CSV or a llama-bench Markdown table")
    skipped.kinds.update(scan.kinds)
    return values


def _kind(obj: Any) -> str:
    """Which reader a JSON line's object is for ("" for none)."""
    if is_serving_result(obj):
        return "a serving result"
    if is_one_batch_result(obj):
        return "an SGLang bench_one_batch result"
    return "a llama-bench test" if is_llama_row(obj) else ""


def _lines_rows(path: Path, values: list[tuple[int, Any]], setting: Setting, skipped: Skipped) -> list[ImportedRun]:
    """The rows of several JSON values (JSON lines; vLLM's --append-result): each of the first one's kind, the
    values of any other kind (a server's JSON log line) skipped and noted."""
    entries = [(f"{path}:{number}#{i}" if isinstance(value, list) else f"{path}:{number}", number, obj)
               for number, value in values
               for i, obj in (enumerate(value) if isinstance(value, list) else [(0, value)])]
    kind = next((_kind(obj) for _, _, obj in entries if _kind(obj)), "")
    if not kind:
        raise not_bench(path, f"line {entries[0][1]} is {what_is(entries[0][2])}")
    cards: dict[str, tuple[Card | None, str]] = {}
    out: list[ImportedRun] = []
    for source, number, obj in entries:
        if _kind(obj) != kind:
            skipped.add(f"JSON value(s) that are not {kind} (other output)", number, what_is(obj))
        elif kind == "a serving result":
            out.append(serving_run(obj, source, setting))
        elif kind == "a llama-bench test":
            out.append(llama_run(obj, source, setting, cards))
        else:
            out += one_batch_runs(obj, source, setting)
    return out


def _runs(path: Path, text: str, setting: Setting, skipped: Skipped) -> list[ImportedRun]:
    lines = text.split("\n")
    first = next(line for line in lines if line.strip()).lstrip()
    if not first.startswith(("[", "{")):
        if any(is_llama_csv_header(line) for line in lines[:200]):
            return llama_csv_rows(path, text, setting, skipped)
        if looks_like_llama_markdown(text):
            return llama_markdown_rows(path, text, setting, skipped)
    values = _json_values(path, text, skipped)
    if values is None:
        return llama_markdown_rows(path, text, setting, skipped)
    if len(values) > 1:
        return _lines_rows(path, values, setting, skipped)
    number, value = values[0]
    cards: dict[str, tuple[Card | None, str]] = {}
    if isinstance(value, list):
        if not value:
            raise InvalidValueError(f"{path} is an empty JSON array: no test rows",
                                    "llama-bench writes [ ] with nothing inside when no test finished; check its "
                                    "stderr and rerun it")
        if not is_llama_row(value[0]):
            raise not_bench(path, what_is(value))
        return [llama_run(obj, f"{path}#{i}", setting, cards) for i, obj in enumerate(value)]
    if is_llama_row(value):  # a one-line JSONL file
        return [llama_run(value, f"{path}:{number}", setting, cards)]
    if is_own_serve(value):
        return own_serve_runs(path, value, skipped)
    if is_serving_result(value):
        return [serving_run(value, f"{path}:{number}", setting)]
    if is_one_batch_result(value):
        return one_batch_runs(value, f"{path}:{number}", setting)
    if is_notebook(value):
        return notebook_rows(path, value, setting, skipped)
    if isinstance(value, dict) and {"avg_latency", "latencies"} <= value.keys():
        return [vllm_latency(value, setting)]
    if isinstance(value, dict) and {"elapsed_time", "num_requests", "tokens_per_second"} <= value.keys():
        return [vllm_throughput(value, setting)]
    raise not_bench(path, what_is(value))


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

    Pasted output is read as the bench wrote it: CRLF as LF, and the lines that are not the bench's (log lines
    between a table's rows or around the JSON, a shell prompt, a row cut at the end, a table that cannot be read)
    skipped, one note per kind in every row's ``read_notes``.
    Raises :class:`InvalidValueError` naming the file (and the line or row) for anything that is not such a file,
    or one where no row can be read.
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
    skipped = Skipped()
    runs = _runs(path, text, setting, skipped)
    if not runs:
        raise not_bench(path, f"no row could be read: {'; '.join(skipped.notes())}")
    notes = skipped.notes()
    return [replace(run, read_notes=notes) for run in runs] if notes else runs


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def imported_table(runs: list[ImportedRun]) -> pd.DataFrame:
    """The rows as a table for a terminal, columns :data:`TABLE_COLUMNS`.

    Numbers stay numbers (floats, NaN where absent; batch and depth are whole numbers or None); "% of wall" is
    ``fraction_of_wall`` × 100; "card" is the CardBook key where the card was found, else the file's name for it.
    "note" is the wall's note; the first row also says which lines of the file were skipped (``read_notes``, the same
    on every row of a file: said once, not on every line of the terminal).
    """
    import pandas as pd

    def note(i: int, r: ImportedRun) -> str:
        said = r.read_notes if r.read_notes and (i == 0 or runs[i - 1].read_notes != r.read_notes) else ()
        return "; ".join(n for n in (r.wall_note, *said) if n)

    rows = [{
        "engine": r.engine, "version": r.engine_version or "", "model": r.model,
        "card": r.card_key or r.card_name or "", "test": r.test, "phase": r.phase, "batch": r.batch,
        "depth": r.depth, "tok/s": round(r.tokens_per_s, 2), "± tok/s": _rounded(r.tokens_per_s_stddev, 2),
        "decode wall tok/s": _rounded(r.decode_wall_tok_s, 1), "prefill wall tok/s": _rounded(r.prefill_wall_tok_s, 1),
        "% of wall": _rounded(None if r.fraction_of_wall is None else 100 * r.fraction_of_wall, 1),
        "p50 s": _rounded(r.latency_p50_s, 4), "p99 s": _rounded(r.latency_p99_s, 4), "note": note(i, r),
    } for i, r in enumerate(runs)]
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for name in ("tok/s", "± tok/s", "decode wall tok/s", "prefill wall tok/s", "% of wall", "p50 s", "p99 s"):
        table[name] = table[name].astype("float64")
    for name in ("batch", "depth"):
        table[name] = table[name].astype(object)
    return table
