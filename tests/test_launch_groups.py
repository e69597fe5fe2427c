"""Kernel rows are launches of one name in one launch configuration (issue 20, items 1, 2 and 5).

- Identical Nsight Compute launches are one row with their count and min/median/max duration, counters averaged
  (the GTX 1660 k-means report's 100 launches, read with ``ncu_report``).
- Launches of one name at different grids stay apart and a finding gives the time-weighted aggregate (the A40 Julia
  report; a Kineto trace and an nsys export, read with json and sqlite3).
- A launch with no counters (its replay failed) is named once as not profiled, with the capture's command, and
  drives no advice; a section the capture did collect is never advised again. No corpus file has a failed launch, so
  the test removes one launch's counters from a real report's loaded tables.
"""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from iotrace.trace.findings.launch_rules import CONFIG_OCCUPANCY_POINTS, CONFIG_SHARE
from iotrace.trace.reports.launch_groups import NOT_COUNTERS
from iotrace.trace.reports.report import build_report
from iotrace.trace.tables import TABLES, TraceTables, build
from tests.conftest import load_corpus, ncu_launches, run_cli

KMEANS = "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"
JULIA = "ncu-rep/a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep"
T4_FULL = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"
ALEXNET = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"
TENSORRT = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def _metric(name: str):
    def read(action):
        metric = action.metric_by_name(name)
        return None if metric is None else metric.as_double()
    return read


def test_identical_ncu_launches_are_one_row_with_count_and_spread(corpus: Path) -> None:
    durations = ncu_launches(corpus / KMEANS, _metric("gpu__time_duration.sum"))
    sm = ncu_launches(corpus / KMEANS, _metric(SM))
    report = build_report(load_corpus(corpus / KMEANS))
    [row] = report.kernels
    assert row.launches == row.measured_launches == len(durations) == 100
    assert row.launch_ids == list(range(100))
    assert row.duration_stats == pytest.approx({"min": min(durations), "median": statistics.median(durations),
                                                "max": max(durations)})
    assert row.duration_ns == pytest.approx(statistics.fmean(durations))
    assert row.total_ns == pytest.approx(sum(durations))
    # The analyses read the launches' averaged counters (ncu --print-summary per-kernel).
    assert row.roofline.sol["sm_throughput_pct"] == pytest.approx(statistics.fmean(sm))
    assert report.kernels_title() == ("Kernels (1 launch group: 100 profiled launches of 1 kernel, identical launches "
                                      "grouped)")
    each = build_report(load_corpus(corpus / KMEANS), each_launch=True, top=10)
    assert [k.duration_ns for k in each.kernels] == pytest.approx(durations[:10])
    assert each.kernels_title() == "Kernels (showing 10 of 100 profiled launches of 1 kernel; --top 100 shows all)"


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_the_cli_groups_identical_launches_and_lists_them_one_by_one_on_request(corpus: Path) -> None:
    data = json.loads(run_cli("report", str(corpus / KMEANS), "--json").stdout)
    assert (data["kernels_are"], data["kernels_shown"], data["kernels_total"]) == ("launch_groups", 1, 1)
    assert data["kernels"][0]["launches"] == 100 and len(data["kernels"][0]["launch_ids"]) == 100
    assert set(data["kernels"][0]["duration_stats"]) == {"min", "median", "max"}
    text = run_cli("report", str(corpus / KMEANS), env={"COLUMNS": "160"}).stdout
    assert "100 launches, " in text and " min / " in text
    each = json.loads(run_cli("report", str(corpus / KMEANS), "--json", "--each-launch", "--top", "200").stdout)
    assert (each["kernels_are"], each["kernels_total"], len(each["kernels"])) == ("launches", 100, 100)


def test_one_name_at_different_grids_is_one_row_per_configuration(corpus: Path) -> None:
    grids = ncu_launches(corpus / JULIA, lambda a: (a.name(), int(a.metric_by_name("launch__grid_size").as_double())))
    by_name: dict[str, set[int]] = defaultdict(set)
    for name, grid in grids:
        by_name[name].add(grid)
    mixed = {n: g for n, g in by_name.items() if len(g) > 1}
    assert mixed  # the file's point: repeated names with different grids
    report = build_report(load_corpus(corpus / JULIA))
    for name, sizes in mixed.items():
        rows = [k for k in report.kernels if k.name.startswith(name)]
        assert sorted(k.grid[0] * k.grid[1] * k.grid[2] for k in rows) == sorted(sizes)
        assert [(k.config_index, k.configs_of_name) for k in rows] == [(i + 1, len(sizes)) for i in range(len(rows))]
    # Each mixed name takes under 5% of the kernel time: not material (CONFIG_SHARE), so no finding.
    total = sum(k.total_ns for k in report.kernels)
    assert all(sum(k.total_ns for k in report.kernels if k.name.startswith(n)) / total < CONFIG_SHARE for n in mixed)
    assert not [f for f in report.findings if f.report == "launch configurations"]


def _kineto_configs(path: Path) -> dict[str, dict[tuple, list[tuple[float, float]]]]:
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    out: dict[str, dict[tuple, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            a = e["args"]
            key = (tuple(a["grid"]), tuple(a["block"]), a.get("registers per thread"), a.get("shared memory"))
            out[e["name"]][key].append((e["dur"] * 1e3, a.get("est. achieved occupancy %")))
    return out


def test_a_kineto_name_with_two_configurations_has_two_rows_and_a_time_weighted_aggregate(corpus: Path) -> None:
    configs = _kineto_configs(corpus / ALEXNET)
    mixed = {n: c for n, c in configs.items() if len(c) > 1}
    name = max(mixed, key=lambda n: sum(d for runs in mixed[n].values() for d, _ in runs))
    report = build_report(load_corpus(corpus / ALEXNET), top=500)
    rows = [k for k in report.kernels if k.name == name]
    expected = {(key[0], key[1]): (len(runs), sum(d for d, _ in runs)) for key, runs in mixed[name].items()}
    got = {(tuple(k.grid), tuple(k.block)): (k.launches, k.total_ns) for k in rows}
    assert got.keys() == expected.keys()
    for key, (launches, total) in expected.items():
        assert got[key][0] == launches and got[key][1] == pytest.approx(total, rel=1e-6)
    runs = [r for c in mixed[name].values() for r in c]
    weighted = sum(d * o for d, o in runs) / sum(d for d, _ in runs)
    # A finding where it matters: the name's share of kernel time and its configurations' occupancy spread.
    share = sum(d for d, _ in runs) / sum(d for c in configs.values() for r in c.values() for d, _ in r)
    means = [sum(d * o for d, o in c) / sum(d for d, _ in c) for c in mixed[name].values()]
    material = share >= CONFIG_SHARE and max(means) - min(means) >= CONFIG_OCCUPANCY_POINTS
    found = [f for f in report.findings if f.report == "launch configurations" and f.kernel == name]
    assert len(found) == int(material)
    if found:
        assert f"{weighted:.1f}%" in found[0].text
    occupancy = {(tuple(k.grid), tuple(k.block)): k.occupancy.achieved_pct for k in rows}
    for key, c_runs in mixed[name].items():
        mine = sum(d * o for d, o in c_runs) / sum(d for d, _ in c_runs)
        assert occupancy[(key[0], key[1])] == pytest.approx(mine, abs=0.01)


def test_an_nsys_name_with_two_configurations_has_two_rows(corpus: Path) -> None:
    with sqlite3.connect(corpus / TENSORRT) as db:
        rows = db.execute("SELECT s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, "
                          "k.registersPerThread, k.staticSharedMemory, k.dynamicSharedMemory, k.end - k.start "
                          "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName").fetchall()
    configs: dict[str, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    for name, *config, duration in rows:
        configs[name][tuple(config)].append(duration)
    mixed = {n: c for n, c in configs.items() if len(c) > 1}
    assert mixed
    report = build_report(load_corpus(corpus / TENSORRT), top=500)
    for name, by_config in mixed.items():
        mine = sorted((k.launches, k.total_ns) for k in report.kernels if k.name == name)
        assert mine == sorted((len(d), float(sum(d))) for d in by_config.values())


def _with_metrics(tables: TraceTables, keep) -> TraceTables:
    """The loaded tables rebuilt with only the metric rows ``keep`` selects."""
    metrics = tables.metrics
    others = {name: tables.table(name) for name in TABLES if name != "metrics"}
    return build(Path(tables.meta["source"]), **others, metrics=metrics[keep(metrics)].reset_index(drop=True),
                 meta=tables.meta)


def _without_counters(tables: TraceTables, kid: int) -> TraceTables:
    """The loaded tables with every counter of launch ``kid`` removed, as a failed replay leaves it."""
    return _with_metrics(tables, lambda m: ~((m["kernel_id"] == kid) & ~m["metric"].str.startswith(NOT_COUNTERS)))


def test_a_launch_with_no_counters_is_named_once_and_drives_no_advice(corpus: Path) -> None:
    path = corpus / JULIA
    tables = load_corpus(path)
    whole = build_report(tables)
    failed = 2
    report = build_report(_without_counters(tables, failed))
    [row] = [k for k in report.kernels if failed in k.launch_ids]
    assert not row.profiled and row.roofline is None and row.occupancy is None and row.stalls.empty
    [finding] = [f for f in report.findings if f.report == "profiling"]
    assert f"#{failed}" in finding.text and "not profiled" in finding.text
    assert "--set full" in finding.try_next and b"--set full" in path.read_bytes()  # the capture's own command
    assert all(failed not in u["kernel_ids"] for u in report.unavailable)
    assert [u["line"] for u in report.unavailable] == [u["line"] for u in whole.unavailable]
    # The other launches are reported as before.
    before = {k.kernel_id: k.duration_ns for k in whole.kernels if failed not in k.launch_ids}
    assert {k.kernel_id: k.duration_ns for k in report.kernels if k.profiled} == before


def test_a_section_the_capture_collected_is_not_advised_again(corpus: Path) -> None:
    tables = load_corpus(corpus / T4_FULL)
    assert "WarpStateStats" in tables.meta["sections"]
    # Without the stall counters and PC samples both sections hold, warp stalls are unavailable.
    stripped = _with_metrics(tables, lambda m: ~m["metric"].str.startswith(("smsp__average_warps_issue_stalled",
                                                                              "smsp__pcsamp", "smsp__warps_issue")))
    [entry] = [u for u in build_report(stripped).unavailable if u["report"] == "warp stalls"]
    assert entry["collected"] and "WarpStateStats section did not record" in entry["line"]
    assert "collect with" not in entry["line"]


@pytest.mark.parametrize("name", [JULIA, ALEXNET])
def test_grouping_survives_damaged_tables_and_accounts_for_every_launch(corpus: Path, name: str) -> None:
    """Fuzz at the table boundary: random metric rows dropped and random configuration values missing; every launch
    stays in exactly one row and nothing but a row count changes."""
    tables = load_corpus(corpus / name)
    seed = random.randrange(2**32)
    rng = np.random.default_rng(seed)
    for case in range(4):
        kernels = tables.kernels.copy()
        for column in ("grid_x", "block_x", "registers_per_thread", "smem_bytes", "duration_ns"):
            kernels.loc[rng.random(len(kernels)) < 0.3, column] = None
        metrics = tables.metrics
        keep = rng.random(len(metrics)) > rng.random()
        others = {n: tables.table(n) for n in TABLES if n not in ("kernels", "metrics")}
        damaged = build(Path(tables.meta["source"]), **others, kernels=kernels,
                        metrics=metrics[keep].reset_index(drop=True), meta=tables.meta)
        report = build_report(damaged, top=10_000)
        ids = sorted(i for k in report.kernels for i in k.launch_ids)
        assert ids == sorted(int(i) for i in kernels["id"]), (case, seed)
        assert sum(k.launches for k in report.kernels) == int(kernels["launches"].sum()), (case, seed)
