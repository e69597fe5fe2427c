"""The ``api_calls`` table and the copies' direction and memory kinds, on every Nsight Systems SQLite export and
Kineto trace of the corpus, against the files read here with ``sqlite3`` and ``json`` alone.

The reference side names and sorts calls by its own rules, written out below from the task's definition (CUDA
Runtime/Driver API names; CUPTI's ``_vNNNN`` callback suffix dropped), and reads copy kinds from each export's own
``ENUM_CUDA_MEMCPY_OPER``/``ENUM_CUDA_MEM_KIND`` labels (not the names iotrace reads) or from Kineto's event names
split by hand; it calls no iotrace helper.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from iotrace.trace import TraceFormatError, load
from iotrace.trace.formats.api_calls import api_call_kind, api_call_name
from iotrace.trace.tables import TraceTables, build
from tests.conftest import CORPUS, load_corpus, write_kineto

NSYS = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("nsys/*.sqlite"))
KINETO = sorted(str(p.relative_to(CORPUS)) for p in [*CORPUS.glob("kineto/*.json*"), *CORPUS.glob("kineto-ranks/*")])

# The reference classification: exact names, then prefixes; HIP's mirrors of the runtime calls alike.
SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent", "hipDeviceSynchronize",
        "hipStreamSynchronize", "hipEventSynchronize", "hipStreamWaitEvent"}
GRAPH = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
PREFIXES = [("launch", ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "hipLaunchKernel",
                        "hipExtModuleLaunchKernel", "hipModuleLaunchKernel")),
            ("memcpy", ("cudaMemcpy", "cuMemcpy", "hipMemcpy")), ("memset", ("cudaMemset", "cuMemset", "hipMemset"))]


def _name(raw: str) -> str:
    return re.sub(r"_v[0-9]{4,5}$", "", raw)


def _kind(name: str | None) -> str:
    if name is None:
        return "other"
    base = re.sub(r"(_ptsz|_ptds)?(_v[0-9]+)?$", "", name)
    if base in SYNC:
        return "sync"
    if base in GRAPH:
        return "graph"
    return next((kind for kind, prefixes in PREFIXES if base.startswith(prefixes)), "other")


@cache
def _loaded(name: str) -> TraceTables:
    return load_corpus(CORPUS / name)


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _observed(tables: TraceTables) -> dict[str, Any]:
    calls = tables.api_calls
    return {"kinds": Counter(calls["kind"]), "count": len(calls),
            "total_ns": {n: round(float(t)) for n, t in calls.groupby("name")["duration_ns"].sum().items()},
            "correlations": sorted(int(c) for c in calls["correlation_id"].dropna())}


def _nsys_calls(path: Path) -> list[tuple[str | None, int, int, int, int]]:
    """(name, start, end, correlationId, globalTid) per runtime/driver call; eventClass 67 rows (nsys 2022.2's
    "CUDA backtrace" copies of calls, same correlationId) are no calls of their own."""
    with _db(path) as db:
        return db.execute("SELECT s.value, r.start, r.end, r.correlationId, r.globalTid FROM "
                          "CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId "
                          "WHERE r.eventClass IS NOT 67").fetchall()


@pytest.mark.parametrize("name", NSYS)
def test_nsys_api_calls_equal_the_runtime_table(corpus: Path, name: str) -> None:
    """Count per kind, total time per name, the correlation ids and the thread/process ids, as sqlite3 reads them."""
    rows = _nsys_calls(corpus / name)
    names = [_name(n) if n is not None else None for n, *_ in rows]
    totals: Counter[str] = Counter()
    for n, (_, start, end, _, _) in zip(names, rows, strict=True):
        totals[n] += end - start
    tables = _loaded(name)
    got = _observed(tables)
    assert got == {"kinds": Counter(_kind(n) for n in names), "count": len(rows), "total_ns": dict(totals),
                   "correlations": sorted(r[3] for r in rows)}
    calls = tables.api_calls
    assert list(calls["start_ns"]) == sorted(r[1] for r in rows) and list(calls["id"]) == list(range(len(rows)))
    assert set(calls["thread"]) == {r[4] for r in rows}
    assert set(calls["process"]) == {(r[4] >> 24) & 0xFFFFFF for r in rows}
    assert tables.counts()["api_calls"] == len(rows)
    assert not any(str(n).endswith(("_v3020", "_v7000")) for n in calls["name"])


def test_nsys_2022_backtrace_rows_are_not_calls(corpus: Path) -> None:
    """The 2022.2 export writes 38 eventClass-67 rows that repeat calls (same correlation id, name without the
    suffix): 95 rows, 57 calls, each correlation id once."""
    name = "nsys/a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite"
    with _db(corpus / name) as db:
        (rows,), (copies,) = (db.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME {where}").fetchone()
                              for where in ("", "WHERE eventClass = 67"))
    calls = _loaded(name).api_calls
    assert (rows, copies, len(calls)) == (95, 38, 57)
    assert calls["correlation_id"].is_unique
    assert Counter(calls["name"])["cudaMemcpy"] == 15 and Counter(calls["kind"])["launch"] == 5


@pytest.mark.parametrize("name", KINETO)
def test_kineto_api_calls_equal_the_runtime_events(corpus: Path, name: str) -> None:
    """Count per kind, total time per name (dur is µs) and the correlation ids of the cuda_runtime and cuda_driver
    events (Runtime in the 2021 schema), as json reads them."""
    events = [e for e in _events(corpus / name)
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime")]
    totals: Counter[str] = Counter()
    for e in events:
        totals[e["name"]] += e.get("dur", 0) * 1000
    tables = _loaded(name)
    got = _observed(tables)
    assert got == {"kinds": Counter(_kind(e["name"]) for e in events), "count": len(events),
                   "total_ns": {n: round(t) for n, t in totals.items()},
                   "correlations": sorted(e["args"]["correlation"] for e in events)}
    assert set(tables.api_calls["process"]) == {e["pid"] for e in events}
    assert set(tables.api_calls["thread"]) == {int(e["tid"]) for e in events}


def _nsys_copies(path: Path) -> Counter[tuple[str | None, str | None, str | None]]:
    """(copy_kind, src_kind, dst_kind) per copy and set: the export's enum labels ("Host-to-Device", "Pageable"), a
    unified-memory migration's unknown sides being the managed memory it migrates; a set has its memory as dst."""
    direction = {"Host-to-Device": "HtoD", "Device-to-Host": "DtoH", "Device-to-Device": "DtoD",
                 "Unified Host-to-Device": "HtoD", "Unified Device-to-Host": "DtoH"}
    memory = {"Pageable": "pageable", "Pinned": "pinned", "Device": "device", "Unknown": None}
    out: Counter[tuple[str | None, str | None, str | None]] = Counter()
    with _db(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "ENUM_CUDA_MEMCPY_OPER" not in tables:
            return out
        for oper, src, dst, n in db.execute(
                "SELECT o.label, s.label, d.label, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m "
                "JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = m.copyKind JOIN ENUM_CUDA_MEM_KIND s ON s.id = m.srcKind "
                "JOIN ENUM_CUDA_MEM_KIND d ON d.id = m.dstKind GROUP BY 1, 2, 3"):
            unified = oper.startswith("Unified")
            out[direction[oper], memory[src] or ("managed" if unified else None),
                memory[dst] or ("managed" if unified else None)] += n
        if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
            for kind, n in db.execute("SELECT k.label, count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET m "
                                      "JOIN ENUM_CUDA_MEM_KIND k ON k.id = m.memKind GROUP BY 1"):
                out[None, None, memory[kind]] += n
    return out


def _found(tables: TraceTables) -> Counter[tuple[Any, Any, Any]]:
    t = tables.transfers
    return Counter(zip(t["copy_kind"], t["src_kind"], t["dst_kind"], strict=True))


@pytest.mark.parametrize("name", NSYS)
def test_nsys_copy_kinds_equal_the_exports_enum_labels(corpus: Path, name: str) -> None:
    """Copies per direction and memory kinds, and their correlation ids (0, a migration's, is none), as sqlite3
    reads them through the export's own enum tables; the 2022.2 export has none, and its 15 copies are known."""
    want = _nsys_copies(corpus / name) or {
        "nsys/a100_sxm4_40gb_saxpy_mpi_nsys2022.2.sqlite": Counter({("HtoD", "pageable", "device"): 10,
                                                                   ("DtoH", "device", "pageable"): 5})}[name]
    tables = _loaded(name)
    assert _found(tables) == want
    with _db(corpus / name) as db:
        ids = sorted(r[0] for r in db.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                              "WHERE correlationId != 0"))
    copies = tables.transfers[tables.transfers["kind"] != "memset"]
    assert sorted(int(c) for c in copies["correlation_id"].dropna()) == ids
    # Each copy's issuing call is an API call of the trace: a memcpy call.
    calls = tables.api_calls.set_index("correlation_id")["kind"]
    assert {calls[c] for c in copies["correlation_id"].dropna()} <= {"memcpy"}


@pytest.mark.parametrize(("name", "want", "kinds"), [
    ("nsys/rtx4090_sumarray_pageable_zerocopy_nsys2023.3.sqlite",
     {("HtoD", "pageable", "device"): 2, ("DtoH", "device", "pageable"): 2}, {"memcpy HtoD", "memcpy DtoH"}),
    ("nsys/gtx1650_windows_matmul_pageable_memcpy_nsys2025.3.sqlite",
     {("HtoD", "pageable", "device"): 2, ("DtoH", "device", "pageable"): 1}, {"memcpy HtoD", "memcpy DtoH"}),
    ("nsys/rtx4060laptop_um_add_1block_nsys2023.4.sqlite",
     {("HtoD", "managed", "managed"): 48, ("DtoH", "managed", "managed"): 24},
     {"memcpy HtoD (unified memory)", "memcpy DtoH (unified memory)"}),
], ids=lambda v: v.split("/")[1].split("_")[0] if isinstance(v, str) and "/" in v else None)
def test_pageable_and_unified_memory_copies_are_named(corpus: Path, name: str, want: dict[Any, int],
                                                      kinds: set[str]) -> None:
    """The pageable-memcpy exports' copies are pageable HtoD/DtoH; the UM export's are migrations (copyKind 11/12,
    no issuing call)."""
    tables = _loaded(name)
    assert _found(tables) == want and set(tables.transfers["kind"]) == kinds
    if "um_add" in name:
        assert tables.transfers["correlation_id"].isna().all()
    else:
        synchronous = tables.api_calls[tables.api_calls["name"] == "cudaMemcpy"]
        assert set(synchronous["correlation_id"]) == set(tables.transfers["correlation_id"])


def _kineto_copies(events: list[dict[str, Any]]) -> Counter[tuple[str | None, str | None, str | None]]:
    """Kineto's "Memcpy HtoD (Pinned -> Device)" / "Memset (Device)" names split by hand."""
    memory = {"Pageable": "pageable", "Pinned": "pinned", "Device": "device", "Host": None, "Unknown": None}
    out: Counter[tuple[str | None, str | None, str | None]] = Counter()
    for e in events:
        words = e["name"].replace("(", "").replace(")", "").split()
        if words[0] == "Memset":
            out[None, None, memory[words[1]]] += 1
        else:  # Memcpy HtoD Pinned -> Device
            out[words[1], memory[words[2]], memory[words[4]]] += 1
    return out


@pytest.mark.parametrize("name", KINETO)
def test_kineto_copy_kinds_equal_the_event_names(corpus: Path, name: str) -> None:
    """Copies per direction and memory kinds, their correlation ids and bytes, as json reads them."""
    events = [e for e in _events(corpus / name)
              if e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset")]
    tables = _loaded(name)
    assert _found(tables) == _kineto_copies(events)
    assert sorted(int(c) for c in tables.transfers["correlation_id"]) == sorted(
        e["args"]["correlation"] for e in events)
    assert list(tables.transfers["kind"]) == [e["name"] for e in events]  # Kineto's kind stays its event name


def test_pinned_and_pageable_kineto_copies(corpus: Path) -> None:
    """The V100 trace-diff trace: 151 HtoD copies from pinned memory, 60 DtoH to pageable, 4,645 DtoD, 900 sets."""
    found = _found(_loaded("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"))
    assert found == {("HtoD", "pinned", "device"): 151, ("DtoH", "device", "pageable"): 60,
                     ("DtoD", "device", "device"): 4645, (None, None, "device"): 900}


@pytest.mark.parametrize(("name", "want"), [
    ("kineto/a100_pg509_multistream_event_sync_kineto.json.gz", {"cudaDeviceSynchronize": 1, "cudaStreamWaitEvent": 1}),
    ("kineto/a100_pg509_alexnet_kineto_trace.json.gz", {"cudaStreamWaitEvent": 34, "cudaStreamSynchronize": 16,
                                                        "cudaDeviceSynchronize": 5}),
    ("nsys/a100_sxm4_80gb_cloverleaf_nsys2024.5.sqlite", {"cudaDeviceSynchronize": 1312}),
    ("nsys/gtx1650_windows_matmul_pageable_memcpy_nsys2025.3.sqlite", {"cudaDeviceSynchronize": 1,
                                                                       "cuCtxSynchronize": 1}),
    ("nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite", {"cudaStreamSynchronize": 1}),
    ("nsys/a40_a100pcie_cutlass_gemm_nsys2023.2.sqlite", {"cudaEventSynchronize": 1}),
])
def test_synchronization_calls(corpus: Path, name: str, want: dict[str, int]) -> None:
    """The traces' synchronization calls by name (counted in the files with sqlite3 / json by hand), each lasting
    as long as the file says."""
    calls = _loaded(name).api_calls
    sync = calls[calls["kind"] == "sync"]
    assert dict(Counter(sync["name"])) == want
    assert (sync["duration_ns"] == sync["end_ns"] - sync["start_ns"]).all()


def test_the_cloverleaf_launches_and_syncs_pair_up(corpus: Path) -> None:
    """CloverLeaf synchronises after every one of its 1,312 launches: every kernel's launch call is a launch call."""
    tables = _loaded("nsys/a100_sxm4_80gb_cloverleaf_nsys2024.5.sqlite")
    calls = tables.api_calls
    launches = calls[calls["kind"] == "launch"]
    assert len(launches) == len(tables.kernels) == 1312
    assert set(tables.kernels["correlation_id"]) == set(launches["correlation_id"])


def test_a_kineto_trace_of_runtime_calls_only(corpus: Path, tmp_path: Path) -> None:
    """A real trace with its GPU events removed (kernels, copies, sets, GPU annotations) keeps every runtime call."""
    source = "kineto/a100_pg509_alexnet_kineto_trace.json.gz"
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    events = [e for e in _events(corpus / source) if e.get("cat") not in gpu]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    tables = load(write_kineto(tmp_path / "runtime_only.json", events))
    assert (len(tables.kernels), len(tables.transfers), len(tables.api_calls)) == (0, 0, len(runtime)) == (0, 0, 361)
    assert Counter(tables.api_calls["kind"]) == Counter(_kind(e["name"]) for e in runtime)
    assert Counter(tables.api_calls["kind"]) == Counter(_loaded(source).api_calls["kind"])
    assert tables.counts()["api_calls"] == 361 and tables.counts()["launches"] == 0


@pytest.mark.parametrize(("raw", "name", "kind"), [
    ("cudaMemcpyAsync_v3020", "cudaMemcpyAsync", "memcpy"), ("cudaMemcpy2DAsync_v3020", "cudaMemcpy2DAsync", "memcpy"),
    ("cudaMemcpyAsync_ptsz_v7000", "cudaMemcpyAsync_ptsz", "memcpy"), ("cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2", "memcpy"),
    ("cudaMemsetAsync", "cudaMemsetAsync", "memset"), ("cudaLaunchKernel_v7000", "cudaLaunchKernel", "launch"),
    ("cuLaunchKernelEx", "cuLaunchKernelEx", "launch"), ("cudaLaunchKernelExC", "cudaLaunchKernelExC", "launch"),
    ("cudaLaunchCooperativeKernel_v9000", "cudaLaunchCooperativeKernel", "launch"),
    ("cudaGraphLaunch_v10000", "cudaGraphLaunch", "graph"), ("cuGraphLaunch_ptsz", "cuGraphLaunch_ptsz", "graph"),
    ("cudaStreamSynchronize_v3020", "cudaStreamSynchronize", "sync"), ("cuCtxSynchronize", "cuCtxSynchronize", "sync"),
    ("cudaStreamWaitEvent", "cudaStreamWaitEvent", "sync"), ("cudaEventQuery", "cudaEventQuery", "other"),
    ("cudaGetDeviceProperties_v2_v12000", "cudaGetDeviceProperties_v2", "other"),
    ("cudaStreamGetCaptureInfo_v2", "cudaStreamGetCaptureInfo_v2", "other"), ("INVALID", "INVALID", "other"),
    ("cudaLaunchHostFunc", "cudaLaunchHostFunc", "other"), ("hipDeviceSynchronize", "hipDeviceSynchronize", "sync"),
])
def test_call_names_and_kinds(raw: str, name: str, kind: str) -> None:
    """The callback suffix goes, an API's own _v2 stays; kinds by name, per-thread-stream variants alike."""
    assert (api_call_name(raw), api_call_kind(raw)) == (name, kind) == (_name(raw), _kind(_name(raw)))


def test_build_refuses_an_api_call_kind_it_does_not_know(tmp_path: Path) -> None:
    """A reader (or plugin) that writes a kind outside API_CALL_KINDS fails whole, naming the kind."""
    with pytest.raises(TraceFormatError, match="'blocking'"):
        build(tmp_path / "x", api_calls={"id": [0], "name": ["cudaFoo"], "kind": ["blocking"]}, meta={})
    assert build(tmp_path / "x", api_calls={"id": [0], "name": ["cudaFoo"], "kind": [None]},
                 meta={}).rows("api_calls") == 1
