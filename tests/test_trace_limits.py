"""Every limit stated: a report or info cut by --top says how many it shows of how many, in text and JSON.

The totals are the file's own: 100 profiled launches in the GTX 1660 k-means report (read with ncu_report), 131
kernel names in the V100 Kineto trace (read with json). The CLI is called in this process (what these tests check is
what it says, not the process), but for one real subprocess each of ``report`` and ``info``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import ncu_launches, run_cli
from tests.conftest import run_cli_in_process as _in_process

KMEANS = "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"
V100 = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"



def _launches(path: Path) -> int:
    return len(ncu_launches(path, lambda action: action.name()))


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_a_report_cut_by_top_says_what_it_shows_of_how_many(corpus: Path) -> None:
    total = _launches(corpus / KMEANS)
    assert total == 100
    # Listed launch by launch (identical launches are otherwise one row: tests/test_launch_groups.py).
    done = run_cli("report", str(corpus / KMEANS), "--json", "--each-launch")  # `report` through a real process
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["kernels_shown"], data["kernels_total"], len(data["kernels"])) == (50, total, 50)
    text = _in_process("report", str(corpus / KMEANS), "--each-launch", env={"COLUMNS": "120"}).stdout
    assert f"Kernels (showing 50 of {total} profiled launches of 1 kernel; --top {total} shows all)" in text
    whole = json.loads(_in_process("report", str(corpus / KMEANS), "--json", "--top", "200", "--each-launch").stdout)
    assert whole["kernels_shown"] == whole["kernels_total"] == total == len(whole["kernels"])


def test_info_cut_by_top_says_how_many_kernels_there_are(corpus: Path) -> None:
    events = json.loads(gzip.decompress((corpus / V100).read_bytes()))["traceEvents"]
    names = len({e["name"] for e in events if e.get("cat") == "kernel"})
    assert names == 131
    done = run_cli("info", str(corpus / V100), "--json", "--top", "3")  # `info` through a real process
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (len(data["top_kernels"]), data["top_kernels_of"]) == (3, names)
    text = _in_process("info", str(corpus / V100), "--top", "3").stdout
    assert f"top 3 of {names} kernels, --top {names} lists all" in text
