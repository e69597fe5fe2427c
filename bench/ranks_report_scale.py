"""What the report across ranks costs as the job grows: ``load_ranks`` + ``rank_report`` + its JSON, timed.

    .venv/bin/python bench/ranks_report_scale.py [--ranks 2,16,64] [--workers 1,2] [--rounds 3]

The two corpus ranks (``kineto-ranks/``, ~120 KB gzipped, ~1,100 kernels each) are copied into a temporary
folder as ranks 0..N-1 of an N-rank job (``distributedInfo`` edited, alternating rank 0's and rank 1's events), so
every size has real events. Each figure is a fresh process (``python -c``): its wall time (start, imports, load,
report, JSON, exit), the load and the report timed inside it with ``time.perf_counter``, and its peak RSS
(``VmHWM``). Medians of the rounds. The last lines extrapolate to 128 ranks;
docs/commands/traces.md states the assumption.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANKS = ROOT.parent / "shared" / "corpus" / "kineto-ranks"

_CHILD = """
import sys, time, json
t0 = time.perf_counter()
from iotrace.trace import load_ranks
from iotrace.trace.reports.ranks_report import rank_report
from iotrace.trace.render.ranks import ranks_json
t1 = time.perf_counter()
job = load_ranks(sys.argv[1], workers=int(sys.argv[2]))
t2 = time.perf_counter()
text = ranks_json(rank_report(job))
t3 = time.perf_counter()
peak = 0
with open("/proc/self/status") as status:
    for line in status:
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) // 1024
print(json.dumps({"imports_s": t1 - t0, "load_s": t2 - t1, "report_s": t3 - t2, "peak_mb": peak,
                  "ranks": len(job.ranks), "json_bytes": len(text)}))
"""


def make_job(folder: Path, ranks: int) -> None:
    """``ranks`` rank files in ``folder``, copies of the corpus ranks with their distributedInfo edited."""
    docs = []
    for r in (0, 1):
        with gzip.open(RANKS / f"rank-{r}.json.gz", "rt", encoding="utf-8") as handle:
            docs.append(json.load(handle))
    for r in range(ranks):
        doc = docs[r % 2]
        doc["distributedInfo"].update(rank=r, world_size=ranks)
        with gzip.open(folder / f"rank-{r}.json.gz", "wt", encoding="utf-8", compresslevel=6) as handle:
            json.dump(doc, handle)


def run(folder: Path, workers: int) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, str(folder), str(workers)], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,16,64", help="job sizes to time (default 2,16,64)")
    parser.add_argument("--workers", default="1,2", help="load_ranks worker counts (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(n) for n in args.ranks.split(",")]
    workers = [int(n) for n in args.workers.split(",")]
    rows = []
    print(f"cpus {os.cpu_count()}, python {sys.version.split()[0]}")
    print("ranks workers | wall s  load s  report s  imports s | peak MB | JSON KB")
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            make_job(Path(tmp), size)
            for w in workers:
                runs = [run(Path(tmp), w) for _ in range(args.rounds)]
                med = {key: statistics.median(r[key] for r in runs)
                       for key in ("wall_s", "load_s", "report_s", "imports_s", "peak_mb", "json_bytes")}
                rows.append({"ranks": size, "workers": w, **med})
                print(f"{size:5d} {w:7d} | {med['wall_s']:6.2f} {med['load_s']:7.2f} {med['report_s']:9.3f} "
                      f"{med['imports_s']:10.2f} | {med['peak_mb']:7.0f} | {med['json_bytes'] / 1024:7.0f}")
    # Marginal cost per rank: the slope between the smallest and the largest size (fixed costs cancel), then a
    # straight line to 128 ranks. docs/commands/traces.md states the assumption.
    small, big = min(sizes), max(sizes)
    for w in workers:
        lo = next(r for r in rows if r["ranks"] == small and r["workers"] == w)
        hi = next(r for r in rows if r["ranks"] == big and r["workers"] == w)
        per = {key: (hi[key] - lo[key]) / (big - small) if big > small else hi[key] / big
               for key in ("wall_s", "load_s", "report_s", "peak_mb")}
        at = {key: hi[key] + per[key] * (128 - big) for key in per}
        print(f"128 ranks, workers={w}: wall {at['wall_s']:.1f} s (load {at['load_s']:.1f} s, report "
              f"{at['report_s']:.2f} s), peak {at['peak_mb']:.0f} MB; per rank: load {per['load_s'] * 1000:.1f} ms, "
              f"report {per['report_s'] * 1000:.1f} ms, {per['peak_mb']:.1f} MB")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
