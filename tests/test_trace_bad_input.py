"""Bad input: each is one TraceFormatError naming the file, never a half-loaded table; through the CLI, exit 2 and
one line on stderr. Also the text formats the corpus lacks (ncu raw page, preambles, nvprof trace, kern_sum)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from iotrace.errors import IotraceError
from iotrace.trace import TraceFormatError, load
from iotrace.trace.nvtx_join import nest

from .conftest import run_cli

KINETO_OK = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA GeForce RTX 3090", "computeMajor": 8,
                                                       "computeMinor": 6, "numSms": 82}],
             "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,
                              "args": {"device": 0, "stream": 7, "correlation": 1, "registers per thread": 32,
                                       "grid": [1, 2, 3], "block": [64, 1, 1]}}]}


def _write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _kineto(**event_args) -> str:
    doc = json.loads(json.dumps(KINETO_OK))
    doc["traceEvents"][0].update(event_args)
    return json.dumps(doc)


def test_a_small_kineto_trace_loads(tmp_path: Path) -> None:
    tables = load(_write(tmp_path, "trace.bin", _kineto()))
    row = tables.kernels.iloc[0]
    assert (row["start_ns"], row["duration_ns"], row["grid_z"]) == (10500, 2250, 3)
    assert tables.devices.iloc[0]["card"] == "rtx3090"


BAD = {
    "empty": ("x.ncu-rep", b"", "empty"),
    "html renamed": ("x.ncu-rep", b"<!DOCTYPE html><html><body>404</body></html>", "HTML page"),
    "binary noise": ("x.sqlite", bytes(range(7, 250)) * 20, "binary data"),
    "json not a trace": ("x.json", b'{"hello": [1, 2, 3]}', "not a trace"),
    "json list of numbers": ("x.json", b"[1, 2, 3]", "not an event object"),
    "truncated json": ("x.json", _kineto()[:-40].encode(), "not valid JSON"),
    "truncated gzip": ("x.json.gz", gzip.compress(_kineto().encode() * 50)[:-30], "truncated gzip"),
    "NaN in a field": ("x.json", _kineto(dur=float("nan")).encode(), "NaN"),
    "Infinity in a field": ("x.json", _kineto().replace('"dur": 2.25', '"dur": Infinity').encode(), "Infinity"),
    "huge number": ("x.json", _kineto().replace('"dur": 2.25', '"dur": 1e300').encode(), "beyond any real"),
    "overflowing number": ("x.json", _kineto().replace('"dur": 2.25', '"dur": 1e400').encode(), "infinite"),
    "negative duration": ("x.json", _kineto(dur=-5).encode(), "negative"),
    "string timestamp": ("x.json", _kineto(ts="soon").encode(), "not a number"),
    "csv missing columns": ("x.csv", b'"Start (ns)","Name","TID","Lvl","RangeId","ParentId","End (ns)"\n1,a,2\n',
                            "fields"),
    "ncu csv NaN": ("x.csv", b'"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
                             b'"0","k","gpu__time_duration.sum","nsecond","nan"\n', "nan"),
    "ncu report header only": ("x.ncu-rep", b"NVR\x00\x02\x00\x00\x00\x08\x07", "no result blocks"),
    "ncu report cut short": ("x.ncu-rep", b"NVR\x00\x02\x00\x00\x00\x08\x07\xff\x00\x00\x00\x08", "damaged"),
    "sqlite header only": ("x.sqlite", b"SQLite format 3\x00" + b"\x10\x00" + b"\x00" * 200, "SQLite"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_trace_format_error(tmp_path: Path, case: str) -> None:
    name, data, words = BAD[case]
    path = _write(tmp_path, name, data)
    with pytest.raises(TraceFormatError) as caught:
        load(path)
    assert str(path) in str(caught.value)
    assert words.lower() in str(caught.value).lower()
    assert "\n" not in str(caught.value)


def _corpus_copy(corpus: Path, tmp_path: Path, name: str) -> bytes:
    return (corpus / name).read_bytes()


def test_truncated_and_corrupted_sqlite(corpus: Path, tmp_path: Path) -> None:
    data = _corpus_copy(corpus, tmp_path, "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite")
    cut = _write(tmp_path, "cut.sqlite", data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated SQLite"):
        load(cut)
    smashed = bytearray(data)
    smashed[4096:4096 * 40] = b"\xa5" * (4096 * 39)  # overwrite the schema and early table pages
    with pytest.raises(TraceFormatError):
        load(_write(tmp_path, "smashed.sqlite", bytes(smashed)))


def test_an_nsys_export_with_a_repeated_string_id_is_refused(corpus: Path, tmp_path: Path) -> None:
    """A byte flip the fuzz test found can make two StringIds rows share an id (nsys's primary key): refused in one
    line, not a pandas InvalidIndexError."""
    import shutil
    import sqlite3

    path = tmp_path / "repeated.sqlite"
    shutil.copy(corpus / "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite", path)
    with sqlite3.connect(path) as db:
        db.executescript("CREATE TABLE copy AS SELECT * FROM StringIds; INSERT INTO copy SELECT * FROM StringIds "
                         "LIMIT 1; DROP TABLE StringIds; ALTER TABLE copy RENAME TO StringIds;")
    with pytest.raises(TraceFormatError, match="StringIds holds id 0 more than once"):
        load(path)


def test_html_renamed_ncu_rep_and_truncated_report(corpus: Path, tmp_path: Path) -> None:
    data = (corpus / "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep").read_bytes()
    with pytest.raises(TraceFormatError, match="damaged Nsight Compute report"):
        load(_write(tmp_path, "cut.ncu-rep", data[: len(data) - 1000]))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="does not exist"):
        load(tmp_path / "nope.ncu-rep")
    with pytest.raises(TraceFormatError, match=r"is a folder, not a profiler export .*rocprof-compute workload"):
        load(tmp_path)  # a folder is read only when it is a rocprof-compute workload


@pytest.mark.parametrize("case", ["empty", "html renamed", "truncated gzip", "NaN in a field", "binary noise"])
def test_cli_info_bad_input_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    name, data, _ = BAD[case]
    path = _write(tmp_path, name, data)
    done = run_cli("info", str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iotrace: error: ") and str(path) in lines[0]


def test_cli_info_on_real_files(corpus: Path) -> None:
    done = run_cli("info", str(corpus / "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"), "--json", "--top", "2")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["format"] == "nsys-sqlite" and info["version"] == "2023.1.2.43"
    assert info["counts"]["kernel_rows"] == 36 and info["counts"]["ranges"] == 59
    assert {d["card"] for d in info["devices"]} == {"rtx3090"}
    assert len(info["top_kernels"]) == 2
    assert info["top_kernels"][0]["launches"] == 7
    text = run_cli("info", str(corpus / "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"))
    assert text.returncode == 0 and "card t4" in text.stdout and "matrix_addition2D" in text.stdout
    tool = run_cli("info", str(corpus / "nsys/rtx4050laptop_rgb_nsys.nsys-rep"))
    if tool.returncode:
        assert tool.returncode == 2 and "nsys export --type sqlite" in tool.stderr
        assert len(tool.stderr.strip().splitlines()) == 1


# --- text formats the corpus does not hold ------------------------------------------------------------------

NCU_RAW = ('==PROF== Connected to process 4242 (/tmp/a.out)\nresult = 42\n==PROF== Disconnected from process 4242\n'
           '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
           '"Device","CC","dram__bytes.sum","gpu__time_duration.sum","launch__registers_per_thread"\n'
           '"","","","","","","","","","","","Mbyte","usecond","register/thread"\n'
           '"0","4242","a.out","127.0.0.1","k(float *)","1","7","(128, 1, 1)","(4, 2, 1)","0","8.9","1.50",'
           '"1,234.5","32"\n')


def test_ncu_raw_page_with_preamble_and_unit_row(tmp_path: Path) -> None:
    tables = load(_write(tmp_path, "raw.txt", NCU_RAW))
    row = tables.kernels.iloc[0]
    assert (row["name"], row["grid_x"], row["grid_y"], row["block_x"]) == ("k(float *)", 4, 2, 128)
    assert row["duration_ns"] == pytest.approx(1_234_500)
    assert row["registers_per_thread"] == 32
    metrics = tables.metrics.set_index("metric")
    assert metrics.loc["dram__bytes.sum", "unit"] == "Mbyte" and metrics.loc["dram__bytes.sum", "value"] == 1.5
    assert tables.meta["schema"] == "ncu --csv --page raw"


def test_nvprof_gpu_trace_and_nsys_kern_sum(tmp_path: Path) -> None:
    trace = ('==1== NVPROF is profiling process 1\n"Start","Duration","Grid X","Grid Y","Grid Z","Block X","Block Y",'
             '"Block Z","Registers Per Thread","Size","Stream","Name"\nms,us,,,,,,,,KB,,\n'
             '1.5,20.0,2,1,1,256,1,1,40,,7,"k(int, int)"\n2.0,3.0,,,,,,,,4,7,"[CUDA memcpy HtoD]"\n')
    tables = load(_write(tmp_path, "t.csv", trace))
    row = tables.kernels.iloc[0]
    assert (row["start_ns"], row["duration_ns"], row["registers_per_thread"]) == (1_500_000, 20_000, 40)
    assert tables.transfers.iloc[0]["bytes"] == 4096
    kern_sum = ('Processing [r.sqlite] with [cuda_gpu_kern_sum.py]...\n\n'
                '"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)",'
                '"StdDev (ns)","Name"\n"90.0","9,000","3","3000.0","3000.0","2900","3100","100.0","gemm"\n')
    summary = load(_write(tmp_path, "s.csv", kern_sum))
    assert summary.counts()["launches"] == 3 and summary.kernels.iloc[0]["duration_ns"] == 9000


def test_nest_finds_parents_and_depths() -> None:
    import pandas as pd

    ranges = pd.DataFrame({"id": [0, 1, 2, 3], "name": ["a", "b", "c", "d"], "thread": [1, 1, 1, 2],
                           "start_ns": [0, 10, 30, 5], "end_ns": [100, 20, 40, 6], "nests": [True] * 4})
    nested = nest(ranges).set_index("id")
    assert list(nested["depth"]) == [0, 1, 1, 0]
    assert nested.loc[2, "path"] == "a > c" and pd.isna(nested.loc[3, "parent_id"])


def test_errors_are_iotrace_errors() -> None:
    assert issubclass(TraceFormatError, IotraceError)
