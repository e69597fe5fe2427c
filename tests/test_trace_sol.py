"""Speed-of-light throughputs kept and used when a report has no DRAM bytes: a default-set Nsight Compute report
(``--set default``: SpeedOfLight without the roofline sections) gets its bound from ncu's own two percentages.

Values are read from the file independently with ``ncu_report``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iotrace.trace.reports.report import build_report
from iotrace.trace.reports.roofline import LATENCY_PCT
from tests.conftest import load_corpus, ncu_launches

SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"


def _sol_bottleneck(sm: float, memory: float) -> str:
    """Nsight Compute's SOLBottleneck rule (sections/SpeedOfLight.py), restated: a unit at 80% or more binds; both
    below 60% is latency; between, the unit 10 points ahead leads, else the two are balanced."""
    if max(sm, memory) >= 80:
        return "compute" if sm >= memory else "memory"
    if max(sm, memory) < LATENCY_PCT:
        return "latency"
    if abs(sm - memory) >= 10:
        return "compute" if sm > memory else "memory"
    return "balanced"


def _throughputs(path: Path) -> list[tuple[str, float, float, bool]]:
    """Per launch: name, SM and memory throughput (% of peak), and whether the file holds dram__bytes."""
    return ncu_launches(path, lambda action: (action.name(), action.metric_by_name(SM).as_double(),
                                              action.metric_by_name(MEMORY).as_double(),
                                              "dram__bytes.sum" in set(action.metric_names())))


@pytest.mark.parametrize("name", ["gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep",
                                  "rtx2060super_gsz_compress_ncu2024.3.ncu-rep"])
def test_a_report_without_dram_bytes_keeps_its_speed_of_light_and_is_classified_from_it(corpus: Path,
                                                                                         name: str) -> None:
    path = corpus / "ncu-rep" / name
    raw = _throughputs(path)
    assert not any(has_dram for *_, has_dram in raw), "the file was meant to lack dram__bytes"
    report = build_report(load_corpus(path), each_launch=True)  # compared launch by launch
    assert report.kernels
    for kernel in report.kernels:
        _, sm, memory, _ = raw[kernel.kernel_id]
        roof = kernel.roofline
        assert roof is not None and roof.bound_basis == "speed of light"
        assert roof.sol == {"sm_throughput_pct": pytest.approx(sm), "memory_throughput_pct": pytest.approx(memory)}
        expected = _sol_bottleneck(sm, memory)
        assert roof.bound == expected
        assert roof.flops is None and roof.levels == ()
        (finding,) = [f for f in kernel.findings if f.report == "roofline"]
        assert f"{sm:.1f}%" in finding.text and "not a roofline placement" in finding.text
        as_json = kernel.to_dict()["roofline"]
        assert as_json["bound"] == expected and as_json["sol"]["memory_throughput_pct"] == pytest.approx(memory)
    # The roofline itself still needs DRAM bytes, and says that the bound came from the throughputs instead.
    lines = [u["line"] for u in report.to_dict()["unavailable"] if u["report"] == "roofline"]
    assert lines and all("speed-of-light" in line for line in lines)


def test_kmeans_first_launch_is_balanced_by_its_speed_of_light(corpus: Path) -> None:
    # From the file: SM 79.07%, memory 75.84% of peak: both above ncu's 60% latency line, neither at the 80% where a
    # unit binds, within 10 points of each other: ncu's SOLBottleneck calls that "well-balanced".
    path = corpus / "ncu-rep" / "gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"
    _, sm, memory, _ = _throughputs(path)[0]
    assert (round(sm, 2), round(memory, 2)) == (79.07, 75.84)
    kernel = build_report(load_corpus(path), each_launch=True).kernels[0]  # launch 0
    assert kernel.roofline.bound == "balanced"
