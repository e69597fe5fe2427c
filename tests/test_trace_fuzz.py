"""Fuzz: mutated corpus files (truncation, byte flips, field deletion) give only IotraceError subclasses, quickly.

1,100 cases from a fixed seed, 100 per source in turn (``IOTRACE_TEST_SEED=random`` or a number explores further).
Each case runs under a 5 s alarm; a case that raises anything but an IotraceError, or runs past its alarm, fails
with the mutation named so it can be replayed. Large files are represented by small real ones of the same format,
and by a compact copy of an Nsight Systems export that keeps the tables iotrace reads, so the whole run stays within
seconds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from iotrace.errors import IotraceError
from iotrace.trace import load

# make test-fast leaves these out: 1,100 mutated corpus files.
pytestmark = pytest.mark.slow

PER_CASE_S = 5
SOURCES = [
    "kineto/a100_pg509_alexnet_kineto_trace.json.gz", "kineto/a100_pg509_backward_thread_callstack_kineto.json",
    "kineto/a100_pg509_multistream_event_sync_kineto.json.gz", "kineto/a100_pg509_triton_kernel_kineto.json.gz",
    "kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz", "ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv",
    "ncu-csv/nvprof_gpu_summary_epicflow_sor.csv", "nsys/nbody_nvtx_pushpop_trace_nsys_stats.csv",
    "ncu-rep/rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep",
    "ncu-rep/rtx2070_matrixMul_nsight_compute_2019.nsight-cuprof-report",
]
#: Each source (and the compact Nsight Systems export) mutated 100 times, in turn.
CASES = 100 * (len(SOURCES) + 1)
KEEP_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "NVTX_EVENTS", "StringIds", "TARGET_INFO_GPU", "EXPORT_META_DATA")


def _seed() -> int:
    text = os.environ.get("IOTRACE_TEST_SEED", "20240607")
    return random.randrange(2**32) if text == "random" else int(text)


def _compact_sqlite(corpus: Path, out: Path) -> bytes:
    """The RTX 3090 export with only the tables iotrace reads (about 1/8 of the size), byte-for-byte real rows."""
    source = corpus / "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"
    with sqlite3.connect(f"file:{source}?mode=ro&immutable=1", uri=True) as db:
        db.execute(f"VACUUM INTO '{out}'")
    with sqlite3.connect(out) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for name in names:
            if name not in KEEP_TABLES:
                db.execute(f'DROP TABLE "{name}"')
    with sqlite3.connect(out) as db:
        db.execute("VACUUM")
    return out.read_bytes()


def _delete_field(data: bytes, rng: random.Random) -> bytes:
    """Remove one field: a JSON key of one event, a CSV column of one line; else drop a byte run."""
    import gzip

    zipped = data[:2] == b"\x1f\x8b"
    text = gzip.decompress(data) if zipped else data
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) and doc["traceEvents"]:
        event = rng.choice(doc["traceEvents"])
        target = event.get("args") if isinstance(event.get("args"), dict) and rng.random() < 0.5 else event
        if isinstance(target, dict) and target:
            target.pop(rng.choice(list(target)))
        out = json.dumps(doc).encode()
        return gzip.compress(out) if zipped else out
    lines = text.split(b"\n")
    if len(lines) > 1 and b"," in text[:2000]:
        k = rng.randrange(len(lines))
        cells = lines[k].split(b",")
        if len(cells) > 1:
            cells.pop(rng.randrange(len(cells)))
            lines[k] = b",".join(cells)
        return b"\n".join(lines)
    start = rng.randrange(len(data))
    return data[:start] + data[start + rng.randint(1, 64):]


def _mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(("truncate", "flip", "flip", "delete"))
    if kind == "truncate":
        cut = rng.randrange(len(data))
        return f"truncate@{cut}", data[:cut]
    if kind == "flip":
        out = bytearray(data)
        where = [rng.randrange(len(out)) for _ in range(rng.randint(1, 16))]
        for pos in where:
            out[pos] = rng.randrange(256)
        return f"flip@{where[:4]}", bytes(out)
    return "delete-field", _delete_field(data, rng)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def _fuzz(originals: dict[str, bytes], cases: int, seed: int, target: Path) -> dict[str, int]:
    """Load ``cases`` mutations of the originals (in turn) at ``target``; fail on anything but an IotraceError or on
    a case past PER_CASE_S; return how many loaded and how many were refused."""
    rng = random.Random(seed)
    names = sorted(originals)
    outcomes = {"loaded": 0, "refused": 0}
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case in range(cases):
            name = names[case % len(names)]
            how, data = _mutate(originals[name], rng)
            target.write_bytes(data)
            signal.alarm(PER_CASE_S)
            try:
                load(target)
                outcomes["loaded"] += 1
            except IotraceError:
                outcomes["refused"] += 1
            except _Hang:
                pytest.fail(f"case {case} ({name}, {how}, seed {seed}) ran past {PER_CASE_S} s")
            except Exception as exc:  # the point of the test: name the escape
                pytest.fail(f"case {case} ({name}, {how}, seed {seed}) raised {type(exc).__name__}: {exc}")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return outcomes


def test_fuzzed_corpus_raises_only_iotrace_errors(corpus: Path, tmp_path: Path) -> None:
    originals = {name: (corpus / name).read_bytes() for name in SOURCES}
    originals["nsys-compact.sqlite"] = _compact_sqlite(corpus, tmp_path / "compact.sqlite")
    for name, data in originals.items():  # the unmutated sources load: the fuzz starts from good files
        path = tmp_path / "orig"
        path.write_bytes(data)
        assert len(load(path).kernels) + len(load(path).ranges) > 0, name
    started = time.monotonic()
    outcomes = _fuzz(originals, CASES, _seed(), tmp_path / "case")
    assert outcomes["refused"] > CASES // 4, outcomes  # mutations are mostly caught, not silently loaded
    assert time.monotonic() - started < 120


#: A report with source counters (per-address stall samples, SASS, the source-line map: the ``source_samples``
#: reader), fuzzed on its own so the cases above keep their seeded order. Each case that reaches ncu_report pays its
#: disassembler's start-up (about 0.3 s), hence fewer cases.
SOURCE_COUNTERS = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"
SOURCE_COUNTER_CASES = 100


def test_fuzzed_source_counter_report_raises_only_iotrace_errors(corpus: Path, tmp_path: Path) -> None:
    original = (corpus / SOURCE_COUNTERS).read_bytes()
    target = tmp_path / "case.ncu-rep"
    target.write_bytes(original)
    assert load(target).rows("source_samples") > 0  # the unmutated report reaches the per-address reader
    outcomes = _fuzz({SOURCE_COUNTERS: original}, SOURCE_COUNTER_CASES, _seed(), target)
    assert outcomes["refused"] > SOURCE_COUNTER_CASES // 4, outcomes
