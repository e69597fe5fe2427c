"""The table model without pandas: typed columns, DataFrames on first access, the numpy joins.

Corpus files are read from ../shared/corpus (skipped with the reason without it); the pandas-free path is checked
in a fresh interpreter, where ``sys.modules`` tells whether pandas was imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import iotrace.trace
from iotrace.trace.formats._common import launch_times
from iotrace.trace.tables import build

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
KINETO = sorted([*CORPUS.glob("kineto/*.json*"), *CORPUS.glob("kineto-ranks/*.json*")])


def _corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"corpus file {path} is absent (../shared/corpus holds the real exports)")
    return path


def test_loading_a_kineto_trace_and_its_breakdown_never_import_pandas() -> None:
    path = _corpus("kineto/a100_pg509_nccl_kineto.json.gz")
    script = ("import sys, iotrace.trace\n"
              "t = iotrace.trace.load(sys.argv[1])\n"
              "rows = t.kernel_breakdown(); counts = t.counts()\n"
              "print('pandas' in sys.modules, counts['kernel_rows'], len(rows), rows[0].name, rows[0].launches)\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    pandas_imported, kernels, names, top, launches = done.stdout.split(maxsplit=4)
    assert pandas_imported == "False"
    # Values read from the file: 2,700 kernel events, 70 names, the ring all-reduce on top with 15 launches.
    assert (int(kernels), int(names)) == (2700, 70)
    assert launches.strip().endswith("15") and top.startswith("ncclKernel_AllReduce_RING_LL_Sum_float")


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_kernel_breakdown_equals_pandas_groupby_of_the_kernel_table(path: Path) -> None:
    tables = iotrace.trace.load(path)
    rows = tables.kernel_breakdown()
    timed = tables.kernels.dropna(subset=["duration_ns"])
    expected = timed.groupby("name", sort=False).agg(launches=("launches", "sum"), total=("duration_ns", "sum"))
    assert {r.name: (r.launches, r.total_ns) for r in rows} == {
        name: (int(row.launches), pytest.approx(row.total, rel=1e-12)) for name, row in expected.iterrows()}
    assert [r.total_ns for r in rows] == sorted((r.total_ns for r in rows), reverse=True)
    top = tables.top_kernels(3)
    assert list(top["name"]) == [r.name for r in rows[:3]]
    assert tables.counts()["launches"] == int(tables.kernels["launches"].sum())


def test_columns_match_the_frame_and_follow_it_once_it_is_handed_out() -> None:
    tables = iotrace.trace.load(_corpus("kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz"))
    fresh = tables.column("kernels", "duration_ns").copy()
    frame = tables.kernels
    np.testing.assert_array_equal(fresh, frame["duration_ns"].to_numpy())
    assert tables.kernels is frame  # built once
    frame["duration_ns"] = 1.0
    assert set(tables.column("kernels", "duration_ns").tolist()) == {1.0}
    assert tables.kernel_breakdown()[0].total_ns == max(r.launches for r in tables.kernel_breakdown())


def test_a_copy_is_the_file_as_parsed_and_changes_to_either_stay_their_own() -> None:
    """What tests.conftest.load_corpus hands each test: one parse, copied (a change through a frame, in place into a
    frame's array, or to meta reaches neither the original nor another copy)."""
    original = iotrace.trace.load(_corpus("kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz"))
    durations = original.column("kernels", "duration_ns").copy()
    first, second = original.copy(), original.copy()
    pd.testing.assert_frame_equal(first.kernels, original.kernels)
    assert first.meta == original.meta and first.counts() == original.counts()
    first.column("transfers", "launches")[:] = 7  # in place, into the array column() hands out
    first.kernels["duration_ns"] = 1.0
    first.table("ops").loc[0, "name"] = "changed"
    first.meta["notes"].append("a note of the first copy's")
    np.testing.assert_array_equal(second.column("kernels", "duration_ns"), durations)
    np.testing.assert_array_equal(original.column("kernels", "duration_ns"), durations)
    assert second.counts()["transfers"] == original.counts()["transfers"] != 7 * original.rows("transfers")
    assert second.ops.loc[0, "name"] == original.ops.loc[0, "name"] != "changed"
    assert "a note of the first copy's" not in second.meta["notes"] + original.meta["notes"]


def test_plain_columns_and_a_dataframe_build_the_same_exact_tables() -> None:
    epoch_ns = [1_712_195_495_506_162_530, None, 1_712_195_495_506_162_531]  # past 2^53: a float would round
    columns = {"id": [0, 1, 2], "name": ["a", None, "c"], "start_ns": epoch_ns, "duration_ns": [1.5, None, 2.0],
               "registers_per_thread": [32, None, 64]}
    plain = build(Path("p.json"), kernels=columns, meta={})
    framed = build(Path("f.json"), kernels=pd.DataFrame({**columns, "start_ns": pd.array(epoch_ns, dtype="Int64")}),
                   meta={})
    pd.testing.assert_frame_equal(plain.kernels, framed.kernels)
    assert plain.kernels["start_ns"].tolist() == [1_712_195_495_506_162_530, pd.NA, 1_712_195_495_506_162_531]
    assert plain.kernels["name"].dtype == object and plain.kernels["launches"].tolist() == [1, 1, 1]


def test_a_string_in_a_number_column_is_refused_naming_the_column() -> None:
    with pytest.raises(iotrace.trace.TraceFormatError, match=r"kernels.registers_per_thread holds a value that is "
                                                             r"not a number"):
        build(Path("bad.json"), kernels={"id": [0], "name": ["k"], "registers_per_thread": ["lots"]}, meta={})


def test_launch_time_is_the_latest_call_of_the_id_at_or_before_the_kernel() -> None:
    # Ids repeat across processes: kernel 0 (id 7 at t=100) was launched by the call at 90, not the one at 120;
    # kernel 1 (id 7 at t=130) by the call at 120; kernel 2 has no call; kernel 3 starts with its call (t=50).
    kernel_corr = np.array([7.0, 7.0, 9.0, 3.0, np.nan])
    kernel_start = np.array([100, 130, 10, 50, 60], dtype=np.int64)
    call_corr = np.array([7.0, 3.0, 7.0, np.nan])
    call_time = np.array([120, 50, 90, 0], dtype=np.int64)
    values, missing = launch_times(kernel_corr, kernel_start, call_corr, call_time)
    assert missing.tolist() == [False, False, True, False, True]
    assert values[~missing].tolist() == [90, 120, 50]
