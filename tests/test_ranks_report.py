"""The report across ranks (``iotrace report DIR``) against the two real ranks of one NCCL job in the corpus.

``kineto-ranks/`` holds ranks 0 and 1 of a 128-rank job (PROVENANCE.md). Every expected value is read here from the
files' JSON (``traceEvents``), with interval arithmetic written for the test (a merge loop and a two-pointer sweep),
not with iotrace's. Jobs with more ranks, a straggler, a missing rank, another job and a damaged file are made in
``tmp_path`` from copies whose ``distributedInfo`` (and durations) are edited.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from iotrace.trace import load_ranks
from iotrace.trace.render.ranks import kernel_cells, kernel_headers, print_ranks, ranks_html, ranks_markdown, sources
from iotrace.trace.reports.ranks_report import MAD_Z, STRAGGLER_FLOOR, STRAGGLER_RULE, outliers, rank_report
from tests.conftest import merge_spans, run_cli

NO_RANK = ["kineto/a100_pg509_triton_kernel_kineto.json.gz", "kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz"]


@pytest.fixture(scope="module")
def rank_dir(corpus: Path) -> Path:
    folder = corpus / "kineto-ranks"
    if not all((folder / f"rank-{r}.json.gz").is_file() for r in (0, 1)):
        pytest.skip(f"the two-rank corpus is not at {folder} (rank-0.json.gz, rank-1.json.gz)")
    return folder


@pytest.fixture(scope="module")
def docs(rank_dir: Path) -> list[dict]:
    """Each rank file's JSON, read with gzip and json only."""
    out = []
    for r in (0, 1):
        with gzip.open(rank_dir / f"rank-{r}.json.gz", "rt", encoding="utf-8") as handle:
            out.append(json.load(handle))
    return out


@pytest.fixture(scope="module")
def report(rank_dir: Path):
    return rank_report(load_ranks(rank_dir, workers=1), top=1000)


def events(doc: dict, *cats: str) -> list[dict]:
    return [ev for ev in doc["traceEvents"] if ev.get("cat") in cats and ev.get("ph") == "X"]


def interval(ev: dict) -> tuple[int, int]:
    """[start, end) in ns from the event's µs ``ts`` and ``dur``."""
    start = round(ev["ts"] * 1000)
    return start, start + round(ev["dur"] * 1000)


def length(spans: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in spans)


def intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of the overlap of two merged, sorted interval lists (two-pointer sweep)."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def is_comm(name: str) -> bool:
    return "ncclKernel" in name or "ncclDevKernel" in name  # HTA's is_comm_kernel


def test_per_rank_kernel_time_and_top_kernels_are_the_files_sums(report, docs: list[dict]) -> None:
    assert report.world_size == 128 and report.missing == list(range(2, 128)) and report.backend == "nccl"
    assert report.labels == ["0", "1"]
    matrix = report.kernel_matrix()
    per_name: dict[str, list[float]] = {}
    for r, doc in enumerate(docs):
        kernels = events(doc, "kernel")
        row = report.summary.iloc[r]
        assert row["rank"] == doc["distributedInfo"]["rank"] == r
        assert row["launches"] == len(kernels)
        assert row["kernel_ns"] == pytest.approx(sum(ev["dur"] for ev in kernels) * 1000)
        for ev in kernels:
            per_name.setdefault(ev["name"], [0.0, 0.0])[r] += ev["dur"] * 1000
    assert len(matrix) == len(per_name)
    expected = sorted(per_name, key=lambda n: -sum(per_name[n]))
    assert list(matrix.index[:5]) == expected[:5]
    for name in expected[:10]:
        assert matrix.loc[name].tolist() == pytest.approx(per_name[name])
    assert matrix.index[0].startswith("ncclKernel_SendRecv")  # the job's one collective leads on both ranks


def test_nccl_time_and_overlap_equal_an_interval_sweep(report, docs: list[dict]) -> None:
    for r, doc in enumerate(docs):
        kernels = events(doc, "kernel")
        comm = [interval(ev) for ev in kernels if is_comm(ev["name"])]
        compute = [interval(ev) for ev in kernels if not is_comm(ev["name"])]
        row = report.summary.iloc[r]
        assert row["comm_launches"] == len(comm) == 10  # PROVENANCE.md: 10 NCCL kernels per rank
        assert row["comm_ns"] == pytest.approx(sum(b - a for a, b in comm))
        assert row["compute_ns"] == pytest.approx(sum(b - a for a, b in compute))
        assert row["comm_busy_ns"] == length(merge_spans(comm))
        assert row["compute_busy_ns"] == length(merge_spans(compute))
        overlap = intersection(merge_spans(comm), merge_spans(compute))
        assert overlap > 0
        assert row["overlap_ns"] == overlap
        assert row["overlap_share"] == pytest.approx(overlap / length(merge_spans(comm)))
    assert report.summary["overlap_share"].tolist() != [0.0, 0.0]


def test_idle_time_is_the_gaps_between_kernels_and_copies(report, docs: list[dict]) -> None:
    for r, doc in enumerate(docs):
        busy = merge_spans([interval(ev) for ev in events(doc, "kernel", "gpu_memcpy", "gpu_memset")])
        span = busy[-1][1] - busy[0][0]
        row = report.summary.iloc[r]
        assert row["span_ns"] == span
        assert row["idle_ns"] == span - length(busy)
        assert row["idle_share"] == pytest.approx((span - length(busy)) / span)
        steps = [ev["dur"] * 1000 for ev in events(doc, "user_annotation") if ev["name"].startswith("ProfilerStep#")]
        assert row["steps"] == len(steps) == 2
        assert row["step_ns"] == pytest.approx(sum(steps) / len(steps))


def write_rank(doc: dict, path: Path, rank: int, world: int, stretch: float = 1.0) -> dict:
    """A copy of ``doc`` as rank ``rank`` of a ``world``-rank job; ``stretch`` scales its steps and compute kernels."""
    edited = copy.deepcopy(doc)
    edited["distributedInfo"].update(rank=rank, world_size=world)
    for ev in edited["traceEvents"]:
        if stretch != 1.0 and ((ev.get("cat") == "kernel" and not is_comm(ev["name"]))
                               or str(ev.get("name", "")).startswith("ProfilerStep#")):
            ev["dur"] = ev["dur"] * stretch
    path.write_text(json.dumps(edited), encoding="utf-8")
    return edited


def bound(values: list[float]) -> float:
    """The upper bound of STRAGGLER_RULE, computed here from the values."""
    median = float(pd.Series(values).median())
    mad = float(pd.Series([abs(v - median) for v in values]).median())
    return median + max(MAD_Z * mad / 0.6745, STRAGGLER_FLOOR * median)


def test_a_straggler_is_flagged_by_the_stated_threshold(docs: list[dict], tmp_path: Path) -> None:
    """Nine ranks (copies of the two), the last with its steps and compute kernels three times as long. The two corpus
    ranks differ by 30% in compute time, so the MAD of the eight copies is wide and the bound well above both."""
    written = [write_rank(docs[1 if r == 8 else r % 2], tmp_path / f"rank-{r}.json", r, 9, 3.0 if r == 8 else 1.0)
               for r in range(9)]
    report = rank_report(load_ranks(tmp_path, workers=2))
    steps = [sum(ev["dur"] * 1000 for ev in events(d, "user_annotation") if ev["name"].startswith("ProfilerStep#"))
             / 2 for d in written]
    compute = [sum(ev["dur"] * 1000 for ev in events(d, "kernel") if not is_comm(ev["name"])) for d in written]
    comm = [sum(ev["dur"] * 1000 for ev in events(d, "kernel") if is_comm(ev["name"])) for d in written]
    tests = {t.metric: t for t in report.stragglers}
    for metric, values in (("step time", steps), ("compute kernel time", compute)):
        test = tests[metric]
        assert test.upper_ns == pytest.approx(bound(values)) and test.lower_ns is None
        assert max(values[:8]) < test.upper_ns < values[8]
        assert [(h["label"], h["side"], h["straggler"]) for h in test.flagged] == [("8", "high", True)]
        assert test.flagged[0]["value_ns"] == pytest.approx(values[8])
    nccl = tests["NCCL kernel time"]
    assert nccl.upper_ns == pytest.approx(bound(comm)) and nccl.lower_ns is not None and nccl.flagged == []
    assert any(f.text.startswith("Rank 8 is a straggler by step time") for f in report.findings)
    text = ranks_markdown(report)
    assert STRAGGLER_RULE in text.replace("\\", "") and "stragglers: rank 8" in text
    # Past eight ranks the kernel table gives the spread and the slowest rank instead of a column per rank.
    assert kernel_headers(report)[-4:] == ["min", "median", "max", "slowest rank"]
    top_compute = next(row for row in kernel_cells(report) if row[1] == "compute")
    assert top_compute[-1] == "8"
    assert sources(report) == [f"9 files in {tmp_path}"]


def test_the_rule_on_its_own() -> None:
    values = pd.Series([100.0, 101.0, 99.0, 100.0, 60.0], index=list("abcde"))
    both = outliers(values, "x", ("high", "low"))
    assert [(h["label"], h["side"]) for h in both.flagged] == [("e", "low")]
    assert outliers(values, "x", ("high",)).flagged == []
    # A high NCCL time is a rank waiting for a slower peer, not the straggler; a low one is the straggler.
    high = outliers(pd.Series([100.0, 101.0, 99.0, 100.0, 140.0]), "NCCL kernel time", ("high", "low"))
    assert [(h["side"], h["straggler"]) for h in high.flagged] == [("high", False)]
    assert [h["straggler"] for h in outliers(values, "NCCL kernel time", ("high", "low")).flagged] == [True]
    # Ranks in lock step (MAD 0): the 5% floor decides; 3% apart is not a straggler, 6% is.
    assert outliers(pd.Series([100.0, 100.0, 100.0, 103.0]), "x").flagged == []
    assert [h["label"] for h in outliers(pd.Series([100.0, 100.0, 100.0, 106.0]), "x").flagged] == ["3"]
    assert "needs 3 ranks" in outliers(pd.Series([1.0, 2.0]), "x").skipped


def test_cli_report_dir_as_json(rank_dir: Path, docs: list[dict]) -> None:
    done = run_cli("report", str(rank_dir), "--json", "--top", "5")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["world_size"], data["ranks"], data["missing"]) == (128, 2, list(range(2, 128)))
    assert "missing ranks: 2-127" in data["ranks_line"]
    assert data["definitions"]["straggler"] == STRAGGLER_RULE
    for r, doc in enumerate(docs):
        assert data["summary"][r]["kernel_ns"] == pytest.approx(sum(ev["dur"] for ev in events(doc, "kernel")) * 1000)
    assert len(data["kernels"]) == 5
    first = data["kernels"][0]
    assert first["kind"] == "comm" and list(first["per_rank_ns"]) == ["0", "1"]
    assert first["per_rank_ns"]["0"] == pytest.approx(
        sum(ev["dur"] * 1000 for ev in events(docs[0], "kernel") if is_comm(ev["name"])))
    assert [t["skipped"] is not None for t in data["stragglers"]] == [True, True, True]  # two ranks: not tested


def test_cli_report_dir_as_text_and_one_file_as_before(rank_dir: Path, corpus: Path) -> None:
    done = run_cli("report", str(rank_dir), "--top", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("iotrace report across ranks: 2 of 128 ranks (nccl); missing ranks: 2-127 "
                                           "(no file holds them; the figures cover the ranks here)")
    assert "rule: " + STRAGGLER_RULE in " ".join(done.stdout.split())
    one = run_cli("report", str(corpus / NO_RANK[0]), "--json", "--top", "1")  # the smallest Kineto trace
    assert one.returncode == 0, one.stderr
    single = json.loads(one.stdout)
    assert "ranks_line" not in single and single["source"] == str(corpus / NO_RANK[0])  # as before


def test_html_and_terminal_hold_the_same_rows(report) -> None:
    import io

    from iotrace.render.console import make_console

    page = ranks_html(report)
    assert page.count("<tr>") >= 3 and "plot-ranks" in page and "missing ranks: 2-127" in page
    console = make_console(file=io.StringIO(), record=True)
    print_ranks(console, report)
    text = console.export_text()
    assert "14.9%" in text and "19.9%" in text  # rank 0's and 1's overlap share, as the sweep test checks
    assert f"{report.summary['overlap_share'][0] * 100:.1f}%" == "14.9%"


def test_a_missing_rank_is_one_line_and_can_be_required(docs: list[dict], tmp_path: Path) -> None:
    for r in (0, 1):
        write_rank(docs[r], tmp_path / f"rank-{r}.json", r, 3)
    done = run_cli("report", str(tmp_path), "--format", "md")
    assert done.returncode == 0, done.stderr
    assert "2 of 3 ranks (nccl); missing ranks: 2 (no file holds them" in done.stdout
    strict = run_cli("report", str(tmp_path), "--require-all-ranks")
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.strip().count("\n") == 0 and "no file holds rank(s) 2" in strict.stderr


def test_ranks_of_two_jobs_are_one_line_and_exit_2(docs: list[dict], tmp_path: Path) -> None:
    write_rank(docs[0], tmp_path / "rank-0.json", 0, 128)
    write_rank(docs[1], tmp_path / "rank-1.json", 1, 64)
    done = run_cli("report", str(tmp_path / "rank-0.json"), str(tmp_path / "rank-1.json"))
    assert done.returncode == 2 and done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line and "different jobs" in line
    assert "world size 64" in line and "world size 128" in line and str(tmp_path / "rank-1.json") in line


def test_a_damaged_rank_file_is_one_line_and_exit_2(rank_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "rank-0.json.gz").write_bytes((rank_dir / "rank-0.json.gz").read_bytes())
    data = (rank_dir / "rank-1.json.gz").read_bytes()
    (tmp_path / "rank-1.json.gz").write_bytes(data[: len(data) // 2])
    done = run_cli("report", str(tmp_path), "--json")
    assert done.returncode == 2 and done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line and str(tmp_path / "rank-1.json.gz") in line and "Traceback" not in line


def test_traces_without_distributed_info_are_compared_by_file(corpus: Path) -> None:
    found = load_ranks([corpus / name for name in NO_RANK], workers=1, assume_ranks=True)  # an A100's and an MI250's
    report = rank_report(found)
    assert report.labels == [Path(name).name for name in sorted(NO_RANK)]
    assert report.ranks_line().startswith("2 traces with no distributedInfo")
    assert (report.summary["comm_launches"] == 0).all()
    assert any("no NCCL/RCCL kernels" in note for note in report.notes)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_files_of_different_runs_are_one_line_naming_both_unless_ranks_is_given(corpus: Path) -> None:
    """A T4's Nsight Compute report and an A100's Kineto trace were reported as two ranks of one job: now one line
    naming both and what to do, exit 2; --ranks says they are ranks, and the report across them is drawn."""
    t4, a100 = corpus / "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep", corpus / NO_RANK[0]
    done = run_cli("report", str(t4), str(a100))
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"iotrace: error: {t4}: is an ncu-rep trace of Tesla T4, {a100} a "
                                                f"kineto-json trace of NVIDIA A100-PG509-200: not ranks of one run "
                                                "(different formats) — report each file on its own"), line
    assert "--ranks" in line
    assumed = run_cli("report", str(t4), str(a100), "--ranks", "--top", "1")
    assert assumed.returncode == 0, assumed.stderr
    assert assumed.stdout.startswith("iotrace report across ranks: 2 traces with no distributedInfo")
