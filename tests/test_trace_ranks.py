"""``load_ranks``: one distributed job's rank traces, loaded in parallel, from the real files in the corpus.

``kineto-ranks/`` holds ranks 0 and 1 of a 128-rank job (``distributedInfo``); the v100 trace-diff file is rank 1 of
another job (world size 2). Damaged, duplicated and stray files are made in ``tmp_path`` from copies of those.
"""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path

import pandas as pd
import pytest

from iotrace.errors import InvalidValueError
from iotrace.trace import TraceFormatError, TraceTables, TraceToolError, load, load_ranks

OTHER_JOB = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"
# Two single-process traces with no distributedInfo at all.
NO_RANK = ["kineto/a100_pg509_triton_kernel_kineto.json.gz", "kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz"]


@pytest.fixture(scope="module")
def rank_files(corpus: Path) -> list[Path]:
    files = [corpus / "kineto-ranks" / f"rank-{rank}.json.gz" for rank in (0, 1)]
    if not all(f.is_file() for f in files):
        pytest.skip(f"the two-rank corpus is not at {corpus / 'kineto-ranks'} (rank-0.json.gz, rank-1.json.gz)")
    return files


@pytest.fixture(scope="module")
def singly(rank_files: list[Path]) -> list[TraceTables]:
    """Each rank file read on its own by ``load``: what ``load_ranks`` must return for it."""
    return [load(f) for f in rank_files]


def assert_same(got: TraceTables, expected: TraceTables) -> None:
    assert got.counts() == expected.counts()
    assert got.kernels["duration_ns"].sum() == expected.kernels["duration_ns"].sum()
    assert got.kernels["name"].tolist() == expected.kernels["name"].tolist()
    for table in ("kernels", "metrics", "ranges", "devices", "transfers"):
        pd.testing.assert_frame_equal(getattr(got, table), getattr(expected, table))
    assert got.meta == expected.meta


def test_a_folder_loads_every_rank_in_rank_order(rank_files: list[Path], singly: list[TraceTables]) -> None:
    found = load_ranks(rank_files[0].parent)
    assert [t.meta["rank"] for t in found.ranks] == [0, 1]
    assert found.world_size == 128
    assert found.missing == list(range(2, 128))  # a subset of the job is loaded, and said to be one
    for got, expected in zip(found.ranks, singly, strict=True):
        assert_same(got, expected)
    assert singly[0].kernels["duration_ns"].sum() != singly[1].kernels["duration_ns"].sum()  # the ranks differ


def test_a_list_in_reverse_order_loads_in_rank_order(rank_files: list[Path], singly: list[TraceTables]) -> None:
    found = load_ranks(list(reversed(rank_files)))
    assert [t.meta["source"] for t in found.ranks] == [str(f) for f in rank_files]
    for got, expected in zip(found.ranks, singly, strict=True):
        assert_same(got, expected)


def test_worker_processes_return_what_this_process_loads(rank_files: list[Path]) -> None:
    in_process, in_workers = load_ranks(rank_files, workers=1), load_ranks(rank_files, workers=2)
    assert (in_workers.world_size, in_workers.missing) == (in_process.world_size, in_process.missing)
    for got, expected in zip(in_workers.ranks, in_process.ranks, strict=True):
        assert_same(got, expected)


def test_a_damaged_rank_file_fails_as_load_does_and_is_named(rank_files: list[Path], tmp_path: Path) -> None:
    shutil.copy(rank_files[0], tmp_path / "rank-0.json.gz")
    damaged = tmp_path / "rank-1.json.gz"
    data = rank_files[1].read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError) as direct:
        load(damaged)
    with pytest.raises(TraceFormatError) as in_workers:
        load_ranks(tmp_path, workers=2)
    with pytest.raises(TraceFormatError) as in_process:
        load_ranks(tmp_path, workers=1)
    for caught in (in_workers, in_process):
        assert str(caught.value) == str(direct.value)
        assert (caught.value.path, caught.value.fix) == (str(damaged), direct.value.fix)
    assert "\n" not in str(in_workers.value)
    # The error was raised in a worker process and came back through pickle: the pool attaches the remote traceback.
    assert type(in_workers.value.__cause__).__name__ == "_RemoteTraceback"
    assert type(in_process.value.__cause__).__name__ != "_RemoteTraceback"


def test_the_same_file_twice_is_refused(rank_files: list[Path]) -> None:
    with pytest.raises(TraceFormatError, match="is given twice") as caught:
        load_ranks([rank_files[0], rank_files[1], rank_files[0]])
    assert caught.value.path == str(rank_files[0])


def test_a_copy_under_another_name_claims_the_same_rank(rank_files: list[Path], tmp_path: Path) -> None:
    shutil.copy(rank_files[0], tmp_path / "rank-0.json.gz")
    shutil.copy(rank_files[0], tmp_path / "rank-0-copy.json.gz")
    with pytest.raises(TraceFormatError, match="claims rank 0") as caught:
        load_ranks(tmp_path)
    assert str(tmp_path / "rank-0.json.gz") in str(caught.value)
    assert str(tmp_path / "rank-0-copy.json.gz") in str(caught.value)


@pytest.mark.parametrize(("other", "says"), [(OTHER_JOB, "world size 2"), (NO_RANK[0], "no world size")],
                         ids=["another-job", "no-distributedInfo"])
def test_ranks_of_different_jobs_are_refused(corpus: Path, rank_files: list[Path], other: str, says: str) -> None:
    with pytest.raises(TraceFormatError, match="different jobs") as caught:
        load_ranks([rank_files[0], corpus / other])
    message = str(caught.value)
    assert str(rank_files[0]) in message and str(corpus / other) in message
    assert "world size 128" in message and says in message


def test_a_rank_beyond_the_world_size_is_refused(rank_files: list[Path], tmp_path: Path) -> None:
    with gzip.open(rank_files[1], "rt", encoding="utf-8") as handle:
        doc = json.load(handle)
    doc["distributedInfo"]["world_size"] = 1
    edited = tmp_path / "rank-1.json"
    edited.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(TraceFormatError, match="claims rank 1 of a world size of 1") as caught:
        load_ranks([edited])
    assert caught.value.path == str(edited)


def test_traces_without_ranks_load_in_path_order(corpus: Path) -> None:
    # An A100 and an MI250 trace: no device model in common, so they are ranks of one run only when the caller says so
    found = load_ranks([corpus / name for name in reversed(NO_RANK)], workers=2, assume_ranks=True)
    assert [t.meta["source"] for t in found.ranks] == [str(corpus / name) for name in sorted(NO_RANK)]
    assert [t.meta.get("rank") for t in found.ranks] == [None, None]
    assert (found.world_size, found.missing) == (None, [])


@pytest.mark.parametrize(("files", "why"), [
    (["ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep", "kineto/a100_pg509_triton_kernel_kineto.json.gz"],
     "different formats"),
    (NO_RANK, "no device model in common"),
    (["nsys/a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite", "nsys/rtx4090_sumarray_pageable_zerocopy_nsys2023.3.sqlite"],
     "no device model in common"),
], ids=["ncu-and-kineto", "a100-and-mi250", "a100-and-rtx4090"])
def test_files_that_are_not_one_run_are_refused_unless_assumed(corpus: Path, files: list[str], why: str) -> None:
    """Files with no rank of their own: one format, a device model in common, or they are not ranks of one run."""
    paths = [corpus / name for name in files]
    with pytest.raises(TraceFormatError, match=rf"not ranks of one run \({why}\)") as caught:
        load_ranks(paths, workers=1)
    message = str(caught.value)
    assert all(str(p) in message for p in paths) and "--ranks" in message
    assert len(load_ranks(paths, workers=1, assume_ranks=True).ranks) == 2


def test_wall_clock_captures_hours_apart_are_not_one_run(tmp_path: Path) -> None:
    """Two H100 traces whose kernels carry Unix-epoch times (µs, as Kineto writes them) three hours apart; an hour's
    gap is not refused (the bound is an hour), nor are times that count from boot, which two files do not share."""
    from tests.conftest import write_kineto

    def kernel_at(ts_us: float) -> list[dict]:
        return [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts_us, "dur": 5.0,
                 "args": {"device": 0, "stream": 7, "grid": [1, 1, 1], "block": [32, 1, 1]}}]

    epoch_us = 1.7e15  # 2023-11-14, in µs
    first = write_kineto(tmp_path / "a.json", kernel_at(epoch_us))
    later = write_kineto(tmp_path / "b.json", kernel_at(epoch_us + 3 * 3600e6))
    with pytest.raises(TraceFormatError, match=r"not ranks of one run \(captured 3\.0 h apart\)"):
        load_ranks([first, later], workers=1)
    near = write_kineto(tmp_path / "c.json", kernel_at(epoch_us + 0.9 * 3600e6))
    assert len(load_ranks([first, near], workers=1).ranks) == 2
    boot_a = write_kineto(tmp_path / "d.json", kernel_at(2e9))  # µs since boot
    boot_b = write_kineto(tmp_path / "e.json", kernel_at(9e9))
    assert len(load_ranks([boot_a, boot_b], workers=1).ranks) == 2


def test_a_file_in_the_folder_that_is_no_trace_is_named(rank_files: list[Path], tmp_path: Path) -> None:
    shutil.copy(rank_files[0], tmp_path / "rank-0.json.gz")
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")  # hidden: skipped
    notes = tmp_path / "notes.txt"
    notes.write_text("ran with 128 GPUs\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as direct:
        load(notes)
    with pytest.raises(TraceFormatError) as caught:
        load_ranks(tmp_path)
    assert str(caught.value) == str(direct.value)
    assert caught.value.path == str(notes)


def test_an_empty_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="holds no trace files") as caught:
        load_ranks(tmp_path)
    assert caught.value.path == str(tmp_path)
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (tmp_path / "subfolder").mkdir()
    with pytest.raises(TraceFormatError, match="holds no trace files"):
        load_ranks(tmp_path)
    with pytest.raises(InvalidValueError, match="no trace files were given"):
        load_ranks([])
    with pytest.raises(TraceFormatError, match="does not exist"):
        load_ranks(tmp_path / "absent")
    with pytest.raises(InvalidValueError, match="workers=0"):
        load_ranks(tmp_path, workers=0)


@pytest.mark.parametrize("error", [
    TraceFormatError("/runs/rank-3.json.gz", "looks like kineto-json but cannot be read: EOFError",
                     "the file is damaged or truncated"),
    TraceFormatError(Path("/runs/rank-3.json.gz"), "is empty (0 bytes)"),
    TraceToolError("/runs/job.nsys-rep", "needs nsys to export", "install Nsight Systems"),
], ids=["format", "format-without-fix", "tool"])
def test_trace_errors_survive_pickling(error: TraceFormatError | TraceToolError) -> None:
    """Worker processes send errors back pickled; without ``__reduce__`` unpickling called ``__init__`` wrongly."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (str(copy), copy.args, copy.path, copy.problem, copy.fix, copy.exit_code) == \
           (str(error), error.args, error.path, error.problem, error.fix, error.exit_code)
