"""llama-bench's Markdown tables (``-o md``, the default), as people paste them, and the notebooks that print them.

``markdown_printer`` in ``tools/llama-bench/llama-bench.cpp`` (ggml-org/llama.cpp) prints the header and its
separator first (``print_header``), then one row per test as it finishes (``print_test``), then a blank line and
``build: COMMIT (NUMBER)`` (``print_footer``). The columns are ``model``, ``size`` (``%.2f MiB`` below 1 GiB, else
``%.2f GiB``), ``params`` (``%.2f M`` / ``%.2f B``), ``backend``, the parameters that differ from the defaults under
their display names (``get_field_display_name``: ``ngl``, ``threads``, ``n_ubatch``, ``fa``, ``sm``, ``nkvo``,
``dev``, …; newer builds add more), then ``test`` (``ppN``, ``tgN`` or ``ppN+tgN``, `` @ dN`` for a depth) and ``t/s``
(``%.2f ± %.2f``). Columns are read by their header names, so a build's extra columns are kept, not misread.

A table states less than the JSON: sizes rounded to 0.01 GiB, no GPU name, and no ``ngl`` column when the backend
list names BLAS (``print_header`` treats such a build as a CPU backend). Where each row ran is told from its columns
first (``ngl``; a ``backend`` of CPU alone) and then from the device lines llama.cpp printed above the table
(``ggml_cuda_init: found 1 CUDA devices`` / ``Device 0: NAME, compute capability``, or ``failed to initialize CUDA``);
a row that still cannot be placed is refused, with how to say it (``--ngl``).

A terminal paste interleaves the run's stderr with the table: the model's loading log (``get_memory_info: [warning]
…``) lands between the header and the rows and between rows. Those lines are skipped and noted, and so are a row cut
where the copy stopped, a row or a table that cannot be read, and the shell prompt after the output; every table
that can be read is kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iotrace.cards import Card
from iotrace.errors import InvalidValueError
from iotrace.model.import_llama import CPU_BACKENDS, DEFAULT_NGL, llama_run, typed_field
from iotrace.model.import_rows import ImportedRun, Setting
from iotrace.model.import_text import Skipped, is_prompt

__all__ = ["is_notebook", "llama_markdown_rows", "looks_like_llama_markdown", "notebook_rows"]

# The columns every markdown_printer table has, by their display names.
_MD_NEEDED = ("model", "size", "params", "backend", "test", "t/s")
# The other columns read, display name -> the test field (get_field_display_name); the rest stay in the raw row.
_MD_FIELDS = {"ngl": "n_gpu_layers", "threads": "n_threads", "n_ubatch": "n_ubatch", "n_batch": "n_batch",
              "fa": "flash_attn", "nkvo": "no_kv_offload", "n_cpu_moe": "n_cpu_moe", "main_gpu": "main_gpu",
              "sm": "split_mode", "type_k": "type_k", "type_v": "type_v", "dev": "devices", "embd": "embeddings",
              "nopo": "no_op_offload", "noh": "no_host"}
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

# The kinds of skipped lines, as the notes name them.
_LOG = "log line(s) inside a table (the run's stderr, pasted between its rows)"
_CUT = "row(s) cut short at the end of a table (the paste stops mid-row)"
_CELLS = "row(s) with a different number of cells than their header"
_UNREAD = "row(s) that cannot be read"
_LACKING = "table(s) without a column every llama-bench table has"
_EMPTY = "table header(s) with no rows"
_PROMPT = "shell prompt line(s) after the output"


@dataclass
class _Context:
    """What the lines above a table say about the run that printed it."""

    devices: list[str] = field(default_factory=list)
    no_gpu: str = ""                # the device line that says the GPU backend failed
    command: str = ""               # the llama-bench command line printed above the table, if any
    command_at: int = 0             # its line
    driver: str = ""                # the NVIDIA driver and CUDA versions nvidia-smi printed earlier in the file

    def scan(self, number: int, line: str) -> None:
        stripped = line.strip()
        if _COMMAND.search(stripped):
            self.command, self.command_at = stripped, number
        found = _DRIVER.search(line)
        if found:
            self.driver = f"driver {found.group(1)}, CUDA {found.group(2)} (nvidia-smi)"
        device = _DEVICE.match(line)
        if device:
            self.devices.append((device.group(1) or device.group(2)).strip())
        elif _NO_GPU.search(line):
            self.no_gpu = f"line {number}: {stripped}"

    def next_run(self) -> None:
        """A table took these lines: the next run prints its own (the driver describes the machine: it stays)."""
        self.devices, self.no_gpu, self.command, self.command_at = [], "", "", 0


@dataclass
class _Table:
    line: int                       # the header's line number
    columns: list[str]
    closed: bool                    # the header ends with "|" (as markdown_printer prints it): so does each row
    lacking: list[str]              # needed columns the header does not have
    context: _Context
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    broken: list[tuple[int, list[str], str]] = field(default_factory=list)  # | lines that are not whole rows
    pending: list[tuple[int, str]] = field(default_factory=list)  # text since the last row: inside or after?
    build: tuple[str, int] | None = None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _header(line: str) -> tuple[list[str], list[str]] | None:
    """A llama-bench header's cells and the needed columns it lacks, or None for any other line.

    A header that lost a column still names model, test and t/s and one of size, params, backend (not
    llama-benchy's model, test, t/s, ttfr).
    """
    if not line.lstrip().startswith("|"):
        return None
    cells = _cells(line)
    names = set(cells)
    if {"model", "test", "t/s"} <= names and names & {"size", "params", "backend"}:
        return cells, [c for c in _MD_NEEDED if c not in names]
    return None


def looks_like_llama_markdown(text: str) -> bool:
    """Whether ``text`` holds a llama-bench Markdown table header."""
    return any(_header(line) is not None for line in text.splitlines())


def _looks_like_row(table: _Table, cells: list[str]) -> bool:
    """Whether a | line after text is a row of ``table`` (its test and t/s cells read), not another table's."""
    row = dict(zip(table.columns, cells, strict=True))
    test, rate = _TEST.match(row.get("test", "")), row.get("t/s", "").partition("±")[0].strip()
    return bool(test and any(test.groups()[:2]) and re.fullmatch(r"\d+(?:\.\d+)?", rate))


def _take(table: _Table, number: int, stripped: str, skipped: Skipped) -> bool:
    """Whether line ``number`` belongs to ``table`` (a row, its separator, text between its rows)."""
    if stripped.startswith("|"):
        cells = _cells(stripped)
        if _header(stripped) is not None:
            return False  # the next table
        if set(stripped) <= set("|-: "):
            if table.rows:
                return False  # another table's separator
            for line_number, text in table.pending:  # the header's separator, after log lines
                skipped.add(_LOG, line_number, text)
            table.pending = []
            return True
        whole = len(cells) == len(table.columns) and (stripped.endswith("|") or not table.closed)
        if table.pending:
            if not (whole and _looks_like_row(table, cells)):
                return False  # text, then another table
            for line_number, text in table.pending:
                skipped.add(_LOG, line_number, text)
            table.pending = []
        if whole:
            table.rows.append((number, cells))
        else:
            table.broken.append((number, cells, stripped))
        return True
    if not stripped:
        return True
    if _BUILD.match(stripped) or stripped.startswith(("```", "~~~")):
        return False  # print_footer's build line, or the end of the code block the table was pasted in
    table.pending.append((number, stripped))
    return True


def _close(table: _Table, context: _Context, skipped: Skipped) -> None:
    """Note the table's broken rows; the text after its last row was outside it: the next run's context."""
    last = table.rows[-1][0] if table.rows else table.line
    for number, cells, text in table.broken:
        if number > last:
            lost = (f"{len(cells)} of {len(table.columns)} cells" if len(cells) != len(table.columns)
                    else "its last cell cut, no closing |")
            skipped.add(_CUT, number, f"{lost}; the table at line {table.line} read up to line {last}: {text}")
        else:
            skipped.add(_CELLS, number, f"{len(cells)} cells, its header {len(table.columns)}: {text}")
    for number, text in table.pending:
        context.scan(number, text)
    table.pending = []


def _tables(lines: list[str], skipped: Skipped) -> list[_Table]:
    tables: list[_Table] = []
    context = _Context()
    current: _Table | None = None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if current is not None:
            if _take(current, number, stripped, skipped):
                continue
            _close(current, context, skipped)
            tables.append(current)
            current = None
        build = _BUILD.match(stripped)
        if build and tables and tables[-1].build is None:
            tables[-1].build = (build.group(1), int(build.group(2)))
            context.next_run()
            continue
        context.scan(number, line)
        header = _header(line)
        if header is not None:
            current = _Table(number, header[0], stripped.endswith("|"), header[1], _Context(
                list(context.devices), context.no_gpu, context.command, context.command_at, context.driver))
            context.next_run()
    if current is not None:
        _close(current, context, skipped)
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


def _md_object(table: _Table, cells: list[str], where: str) -> dict[str, Any]:
    """The test object of one row, as ``-o json`` would have written the fields the table shows."""
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
    for column, key in _MD_FIELDS.items():
        if column in row:
            obj[key] = typed_field(key, row[column], where)
    extra = {c: v for c, v in row.items() if c not in _MD_NEEDED and c not in _MD_FIELDS}
    if extra:  # a newer build's columns, kept under their display names
        obj["markdown_extra"] = extra
    if table.build is not None:
        obj["build_commit"], obj["build_number"] = table.build
    if table.context.driver:
        obj["driver"] = table.context.driver
    if table.context.command:  # the command as the file shows it, without its shell prompt
        obj["command"] = "llama-bench " + _COMMAND.search(table.context.command).group(1)
    return obj


def _place(table: _Table, obj: dict[str, Any], index: int, setting: Setting, where: str) -> str:
    """Set where the row ran (``n_gpu_layers``, ``gpu_info``) from its columns, then its table's device lines."""
    context = table.context
    if obj["backends"] in CPU_BACKENDS:
        obj["n_gpu_layers"] = 0
        return f"backend {obj['backends']}: the model ran on the CPU"
    if context.no_gpu:
        obj["n_gpu_layers"] = 0
        return f"ran on the CPU: the GPU backend did not start ({context.no_gpu})"
    names = list(dict.fromkeys(context.devices))
    if len(names) > 1 and setting.card is None:
        raise InvalidValueError(f"{where}: the table's device lines name {len(names)} GPUs ({', '.join(names)}) for "
                                "one row", "pass --card to say which card the row is filed under")
    obj["gpu_info"] = names[0] if names else ""
    if "n_gpu_layers" not in obj:
        if len(setting.ngl) > index:
            obj["n_gpu_layers"] = setting.ngl[index]
            return f"ngl {setting.ngl[index]} as stated with --ngl (the table does not show it)"
        if context.command:
            option = _NGL_OPTION.search(context.command)
            if option is None:
                obj["n_gpu_layers"] = DEFAULT_NGL
                return (f"ngl {DEFAULT_NGL}, llama-bench's default: the command above the table sets none "
                        f"(line {context.command_at}: {context.command})")
            if option.group(1).isdigit():
                obj["n_gpu_layers"] = int(option.group(1))
                return (f"ngl {option.group(1)} from the command above the table (line {context.command_at}: "
                        f"{context.command})")
        raise InvalidValueError(
            f"{where}: the table at line {table.line} has no ngl column (llama-bench hides it when its backends "
            f"include BLAS: {obj['backends']}), so whether the model ran on the GPU cannot be told",
            "pass --ngl with the -ngl of each table in file order (e.g. --ngl 0,10,99)")
    return ""


def llama_markdown_rows(path: Path, text: str, setting: Setting, skipped: Skipped,
                        at: Callable[[int], str] | None = None) -> list[ImportedRun]:
    """The rows of every llama-bench Markdown table in ``text`` that can be read, each placed on the machine that
    ran it; the lines skipped are noted in ``skipped``.

    ``at`` names line n of ``text`` in messages and sources (default ``PATH:n``; a notebook's names its cell).
    Refused in one line: a text with no table that can be read, and a row that cannot be placed (``--ngl``,
    ``--card``): that is missing from the command, not from the file.
    """
    at = at or (lambda number: f"{path}:{number}")
    lines = _ANSI.sub("", text).split("\n")
    tables = _tables(lines, skipped)
    if not tables:
        raise InvalidValueError(f"{path} holds no llama-bench Markdown table",
                                "paste the table with its header row (| model | size | params | backend | … |)")
    if setting.ngl and len(setting.ngl) != len(tables):
        raise InvalidValueError(f"--ngl gives {len(setting.ngl)} values for {len(tables)} tables in {path}",
                                "give one -ngl per table, in file order")
    cards: dict[str, tuple[Card | None, str]] = {}
    out = []
    for index, table in enumerate(tables):
        if table.lacking:
            skipped.add(_LACKING, table.line, f"no {', '.join(table.lacking)} column, so its {len(table.rows)} "
                                              "row(s) not read")
            continue
        if not table.rows:
            skipped.add(_EMPTY, table.line, "paste the whole table")
            continue
        for number, cells in table.rows:
            where = at(number)
            try:
                obj = _md_object(table, cells, where)
            except InvalidValueError as exc:
                skipped.add(_UNREAD, number, exc.problem.removeprefix(f"{where}: "))
                continue
            note = _place(table, obj, index, setting, where)
            out.append(llama_run(obj, where, setting, cards, machine_note=note))
    last = next((n for n in range(len(lines), 0, -1) if lines[n - 1].strip()), 0)
    if last and is_prompt(lines[last - 1]):
        skipped.add(_PROMPT, last, lines[last - 1])
    if not out:
        raise InvalidValueError(f"{path} holds {len(tables)} llama-bench table header(s) and no row that can be read "
                                f"({'; '.join(skipped.notes())})", "paste the whole table as llama-bench printed it")
    return out


# --- Jupyter notebooks ----------------------------------------------------------------------------------------------


def is_notebook(obj: Any) -> bool:
    """Whether ``obj`` is a Jupyter notebook (nbformat 4: ``cells``, ``nbformat``)."""
    return isinstance(obj, dict) and isinstance(obj.get("cells"), list) and "nbformat" in obj


def notebook_rows(path: Path, notebook: dict[str, Any], setting: Setting, skipped: Skipped) -> list[ImportedRun]:
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
        places += [f"cell {c}, line {n}" for n in range(1, len(cell_lines) + 1)]
    text = "\n".join(lines)
    if not looks_like_llama_markdown(text):
        raise InvalidValueError(f"{path} is a Jupyter notebook whose cells print no llama-bench table",
                                "import the bench's own output file, or the notebook that printed its table")
    skipped.where = lambda number: places[number - 1]
    return llama_markdown_rows(path, text, setting, skipped, at=lambda number: f"{path} ({places[number - 1]})")
