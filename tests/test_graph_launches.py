"""Kernels a CUDA graph ran, attributed to the graph launch call that ran them (Kineto JSON, Nsight Systems SQLite).

CUPTI gives every kernel of a graph launch the correlation id of the ``cudaGraphLaunch`` call, so the loaded
``graph_launch_id`` must be that call's id for exactly those kernels. The Kineto values are read here straight from
the real V100 trace with ``json``. No corpus nsys export holds graph kernels, so the nsys tests write a small
export in nsys's own schema: the table definitions are copied from a real 2024.6 export's ``sqlite_master``.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from iotrace.trace import load
from iotrace.trace.reports.timeline import timeline
from tests.conftest import load_corpus, run_cli

V100 = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"
NSYS_2024 = "nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite"
GRAPH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")


@pytest.fixture(scope="module")
def v100_events(corpus: Path) -> list[dict[str, Any]]:
    """The V100 trace's events, read with json (once for the module: the file is 33 MB of JSON)."""
    return json.loads(gzip.decompress((corpus / V100).read_bytes()))["traceEvents"]


@pytest.fixture(scope="module")
def v100_tables(corpus: Path) -> Any:
    return load_corpus(corpus / V100)


def test_kineto_graph_kernels_carry_their_graph_launch(v100_events: list[dict[str, Any]], v100_tables: Any) -> None:
    """Each cudaGraphLaunch's correlation id is the graph_launch_id of the kernels that share it, and only theirs;
    launch_ns and launch_end_ns are that call's start and end (integer µs in the file, so exact in ns)."""
    events = v100_events
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") == "cuda_runtime" and e.get("name") in GRAPH_CALLS}
    assert len(calls) == 12
    kernel_events = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    ran: dict[int, int] = defaultdict(int)
    for e in kernel_events:
        if e["args"]["correlation"] in calls:
            ran[e["args"]["correlation"]] += 1
    assert set(ran) == set(calls)  # every graph launch ran kernels (315 or 429 here)

    tables = v100_tables
    kernels = tables.kernels
    assert len(kernels) == len(kernel_events)
    graph = kernels[kernels["graph_launch_id"].notna()]
    assert graph.groupby("graph_launch_id").size().to_dict() == dict(ran)
    assert (graph["graph_launch_id"] == graph["correlation_id"]).all()
    assert not kernels.loc[kernels["graph_launch_id"].isna(), "correlation_id"].isin(list(calls)).any()
    for corr, group in graph.groupby("graph_launch_id"):
        call = calls[int(corr)]
        assert set(group["launch_ns"]) == {call["ts"] * 1000}
        assert set(group["launch_end_ns"]) == {(call["ts"] + call["dur"]) * 1000}
    assert kernels["graph_node_id"].isna().all() and kernels["graph_id"].isna().all()  # Kineto writes neither
    counts = tables.counts()
    assert (counts["graph_launches"], counts["graph_kernels"]) == (12, sum(ran.values()))


def test_kineto_graph_kernels_take_the_ranges_open_at_their_graph_launch(v100_events: list[dict[str, Any]],
                                                                         v100_tables: Any) -> None:
    """A graph's kernels are joined to the user_annotation ranges open on the launching thread when the
    cudaGraphLaunch call began (outermost first), read from the JSON."""
    events = v100_events
    annotations = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    kernels = v100_tables.kernels
    joined = 0
    for e in events:
        if e.get("cat") != "cuda_runtime" or e.get("name") not in GRAPH_CALLS:
            continue
        open_ = sorted((a for a in annotations if (a["pid"], a["tid"]) == (e["pid"], e["tid"])
                        and a["ts"] <= e["ts"] <= a["ts"] + a["dur"]), key=lambda a: (a["ts"], -a["dur"]))
        paths = set(kernels.loc[kernels["graph_launch_id"] == e["args"]["correlation"], "nvtx_path"])
        assert paths == {" > ".join(a["name"] for a in open_) or None}
        joined += bool(open_)
    assert joined >= 6  # the launches inside profiler steps


def test_kineto_timeline_graph_figure(v100_events: list[dict[str, Any]], v100_tables: Any) -> None:
    """The timeline's GraphLaunches: counts, GPU time and share, CPU time of the launch calls per kernel against
    ordinary launch calls, and the call-to-first-kernel latency, all recomputed from the JSON."""
    events = v100_events
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    calls = {c: e for c, e in runtime.items() if e["name"] in GRAPH_CALLS}
    kernel_events = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    graph = [e for e in kernel_events if e["args"]["correlation"] in calls]
    direct = [e for e in kernel_events if e["args"]["correlation"] not in calls and e["args"]["correlation"] in runtime]
    first = defaultdict(list)
    for e in graph:
        first[e["args"]["correlation"]].append(e["ts"])

    line = timeline(v100_tables)
    figure = line.graph_launches
    assert figure is not None
    assert (figure.launches, figure.graphs, figure.kernels) == (12, None, len(graph))
    assert figure.kernel_ns == sum(e["dur"] for e in graph) * 1000
    assert figure.kernel_share == pytest.approx(sum(e["dur"] for e in graph) / sum(e["dur"] for e in kernel_events))
    cpu_ns = sum(c["dur"] for c in calls.values()) * 1000
    assert figure.launch_cpu_ns == cpu_ns
    assert figure.cpu_ns_per_kernel == pytest.approx(cpu_ns / len(graph))
    assert figure.direct_cpu_ns_per_kernel == pytest.approx(
        statistics.mean(runtime[e["args"]["correlation"]]["dur"] * 1000 for e in direct))
    assert figure.first_kernel_latency_ns == statistics.median(
        (min(ts) - calls[c]["ts"]) * 1000 for c, ts in first.items())
    # The launch latency is that of ordinary launches: a graph's kernels are left out of it.
    assert line.launch_latency["count"] == len(direct)
    assert line.to_dict()["graph_launches"]["kernels"] == len(graph)


def test_info_states_the_graph_launches(corpus: Path) -> None:
    result = run_cli("info", str(corpus / V100), "--top", "1")
    assert result.returncode == 0, result.stderr
    assert "12 CUDA graph launches (running 4464 of the launches)" in result.stdout


# --- Nsight Systems: a small export in the real schema --------------------------------------------------------------

GRAPH_LAUNCH = "cudaGraphLaunch_v10000"
#: (name, correlationId, start, end) of the runtime calls, on one thread.
CALLS = [("cudaLaunchKernel_v7000", 10, 1_000, 1_500), (GRAPH_LAUNCH, 20, 3_000, 8_000),
         ("cuGraphLaunch", 30, 10_000, 12_000), ("cudaLaunchKernel_v7000", 40, 20_000, 20_700)]
#: (correlationId, start, end, graphNodeId, graphId) of the kernels: 0 is CUPTI's "not a graph node".
KERNELS = [(10, 2_000, 2_500, None, None), (20, 9_000, 9_400, 101, 7), (20, 9_500, 9_700, 102, 7),
           (20, 9_800, 10_100, 103, 7), (30, 13_000, 13_400, 101, 7), (30, 13_500, 13_700, 102, 7),
           (40, 21_300, 22_200, 0, 0)]
THREAD = (4242 << 24) | 4242  # globalTid packs pid and tid


def _value(value: Any) -> int | None:
    return None if pd.isna(value) else int(value)


def _nsys_export(corpus: Path, path: Path, *, graph_id: bool = True, node_id: bool = True,
                 whole_graphs: int = 0) -> Path:
    """An nsys export with the tables iotrace reads, their definitions copied from a real 2024.6 export; ``graphId``
    added to the kernel table as newer schemas have it (Nsight Systems Analysis Guide, "SQLite Schema Reference":
    ``graphId INTEGER -- Kernel graph ID``), ``graphNodeId`` dropped for a schema without it."""
    with sqlite3.connect(f"file:{corpus / NSYS_2024}?mode=ro&immutable=1", uri=True) as real:
        ddl = dict(real.execute("SELECT name, sql FROM sqlite_master WHERE type='table' AND name IN ('StringIds', "
                                "'CUPTI_ACTIVITY_KIND_KERNEL', 'CUPTI_ACTIVITY_KIND_RUNTIME', 'NVTX_EVENTS', "
                                "'META_DATA_EXPORT')"))
    assert len(ddl) == 5
    strings = {name: i for i, name in enumerate(dict.fromkeys([c[0] for c in CALLS] + ["graphed_kernel", "step"]))}
    with sqlite3.connect(path) as db:
        for sql in ddl.values():
            db.execute(sql)
        if graph_id:
            db.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphId INTEGER")
        if not node_id:
            db.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN graphNodeId")
        db.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", [(i, s) for s, i in strings.items()])
        db.executemany("INSERT INTO META_DATA_EXPORT (name, value) VALUES (?, ?)",
                       [("EXPORT_SCHEMA_VERSION", "3.15.1"), ("EXPORT_PRODUCT_VERSION", "2024.6.1")])
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, "
                       "nameId, returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)",
                       [(start, end, THREAD, corr, strings[name]) for name, corr, start, end in CALLS])
        columns = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "demangledName", "shortName",
                   "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                   "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal", "gridId"]
        columns += ["graphNodeId"] * node_id + ["graphId"] * graph_id
        name = strings["graphed_kernel"]
        rows = [(start, end, 0, 1, 7, corr, name, name, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, i)
                + (node,) * node_id + (graph,) * graph_id
                for i, (corr, start, end, node, graph) in enumerate(KERNELS)]
        db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(columns)}) "
                       f"VALUES ({', '.join('?' * len(columns))})", rows)
        # A push/pop range (eventType 59) open while the first graph launch call runs.
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid) VALUES (2900, 8100, 59, ?, ?)",
                   (strings["step"], THREAD))
        if whole_graphs:  # CUPTI_ACTIVITY_KIND_GRAPH_TRACE, as the Analysis Guide's schema reference defines it
            db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                       "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId "
                       "INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, "
                       "graphExecId INTEGER NOT NULL)")
            db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start, end, deviceId, contextId, streamId, "
                           "correlationId, graphId, graphExecId) VALUES (?, ?, 0, 1, 7, ?, 7, 1)",
                           [(30_000 + i, 30_500 + i, 50 + i) for i in range(whole_graphs)])
    return path


def test_nsys_graph_kernels_carry_their_graph_launch(corpus: Path, tmp_path: Path) -> None:
    path = _nsys_export(corpus, tmp_path / "graphs.sqlite")
    with sqlite3.connect(path) as db:  # what the file says, read back with sqlite3
        want = db.execute("SELECT k.correlationId, r.start, r.end, s.value, NULLIF(k.graphNodeId, 0), "
                          "NULLIF(k.graphId, 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                          "ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = r.nameId "
                          "ORDER BY k.start").fetchall()
    tables = load(path)
    kernels = tables.kernels
    assert len(kernels) == len(want) == len(KERNELS)
    for row, (corr, start, end, name, node, graph) in zip(kernels.to_dict("records"), want, strict=True):
        assert (row["launch_ns"], row["launch_end_ns"]) == (start, end)
        graphed = name in (GRAPH_LAUNCH, "cuGraphLaunch")
        assert _value(row["graph_launch_id"]) == (corr if graphed else None)
        assert (_value(row["graph_node_id"]), _value(row["graph_id"])) == (node, graph)
    # The NVTX join goes through the graph launch call: the range open when it began, not when the kernels ran.
    assert list(kernels["nvtx_path"]) == [None, "step", "step", "step", None, None, None]
    assert {k: tables.counts()[k] for k in ("graph_launches", "graph_kernels")} == {"graph_launches": 2,
                                                                                   "graph_kernels": 5}


def test_nsys_timeline_graph_figure(corpus: Path, tmp_path: Path) -> None:
    line = timeline(load(_nsys_export(corpus, tmp_path / "graphs.sqlite")))
    figure = line.graph_launches
    graph_kernels = [k for k in KERNELS if k[0] in (20, 30)]
    kernel_ns = sum(end - start for _, start, end, _, _ in graph_kernels)
    assert (figure.launches, figure.graphs, figure.kernels, figure.kernel_ns) == (2, 1, 5, kernel_ns)
    assert figure.kernel_share == pytest.approx(kernel_ns / sum(end - start for _, start, end, _, _ in KERNELS))
    assert (figure.launch_cpu_ns, figure.cpu_ns_per_kernel) == (5_000 + 2_000, 7_000 / 5)
    assert figure.direct_cpu_ns_per_kernel == (500 + 700) / 2
    assert figure.first_kernel_latency_ns == ((9_000 - 3_000) + (13_000 - 10_000)) / 2
    assert line.launch_latency == {"count": 2, "median": 1_150.0, "p90": pytest.approx(1_270.0), "max": 1_300.0}


def test_nsys_schema_without_graph_columns(corpus: Path, tmp_path: Path) -> None:
    """Without graphNodeId and graphId the kernels still get their graph launch, from the runtime calls."""
    kernels = load(_nsys_export(corpus, tmp_path / "old.sqlite", graph_id=False, node_id=False)).kernels
    assert kernels["graph_node_id"].isna().all() and kernels["graph_id"].isna().all()
    assert list(kernels["graph_launch_id"].fillna(0)) == [0, 20, 20, 20, 30, 30, 0]
    assert timeline(load(tmp_path / "old.sqlite")).graph_launches.graphs is None


def test_nsys_graphs_traced_whole_are_noted(corpus: Path, tmp_path: Path) -> None:
    tables = load(_nsys_export(corpus, tmp_path / "whole.sqlite", whole_graphs=3))
    assert any(n.startswith("3 CUDA graph launches were traced whole") and "--cuda-graph-trace=node" in n
               for n in tables.meta["notes"])


def test_report_shows_the_graph_launches(corpus: Path, tmp_path: Path) -> None:
    path = _nsys_export(corpus, tmp_path / "graphs.sqlite")
    result = run_cli("report", str(path))
    assert result.returncode == 0, result.stderr
    assert "CUDA graphs: 2 launches of 1 graph ran 5 kernels" in result.stdout
    assert "graph launch calls: 7 µs of CPU time, 1.4 µs per kernel they ran vs 600 ns per ordinary launch call" \
        in result.stdout
    markdown = run_cli("report", str(path), "--format", "md")
    assert "| graph launches | 2 |" in markdown.stdout and "| distinct graphs | 1 |" in markdown.stdout
