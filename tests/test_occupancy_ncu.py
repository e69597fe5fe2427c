"""iotrace's occupancy against the values Nsight Compute stored in real reports (../shared/corpus/ncu-rep/).

Each report holds ncu's own occupancy answer (launch__occupancy_limit_*, sm__maximum_warps_*), its
inputs (launch__block_size, launch__registers_per_thread, launch__shared_mem_*), its what-if curves
(launch__occupancy_per_*) and the device's attributes. NVIDIA's ncu_report module reads them on CPU. A launch Nsight
Compute did not profile (no launch__* metric, no duration: launch #1 of the RTX 4070 report) has nothing to compare:
iotrace must say it was not profiled and give no occupancy for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from iotrace.occupancy import (
    OccupancyResult,
    curve_block_size,
    curve_registers,
    curve_shared_mem,
    occupancy_of_recorded_launch,
)
from iotrace.sm_limits import sm_limits
from iotrace.trace.formats.ncu_rep import _VERSION
from iotrace.trace.reports.report import Report, build_report
from tests.conftest import load_corpus

ncu_report = pytest.importorskip("ncu_report", reason="ncu-report is not installed: pip install 'iotrace[nsight]'")


@dataclass
class Launch:
    file: str
    kernel: str
    metrics: dict[str, object]
    curves: dict[str, list[tuple[int, float]]]
    ncu_version: tuple[int, int] | None  # the Nsight Compute that recorded it (None: unstated, 2019-era)
    path: Path
    index: int  # its place in the file (iotrace's kernel id)

    @property
    def profiled(self) -> bool:
        """False where ncu recorded neither a launch__* metric nor a duration for it: it was not profiled."""
        duration = self.num("gpu__time_duration.sum")
        return any(n.startswith("launch__") for n in self.metrics) or (duration is not None and math.isfinite(duration))

    def num(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return None if value is None else float(value)  # type: ignore[arg-type]

    def int(self, name: str) -> int:
        value = self.num(name)
        assert value is not None and value == int(value), f"{self.file}:{self.kernel} {name}={value}"
        return int(value)


CURVES = ("launch__occupancy_per_block_size", "launch__occupancy_per_register_count",
          "launch__occupancy_per_shared_mem_size")


def _ncu_version(path: Path) -> tuple[int, int] | None:
    """The Nsight Compute (year, release) that recorded a report, as iotrace's reader finds it; None in a 2019-era
    report, which does not state it."""
    stated = _VERSION.search(path.read_bytes())
    if stated is None:
        return None
    year, release = stated.group(1).split(b".")[:2]
    return int(year), int(release)


def _launches(corpus: Path) -> list[Launch]:
    launches = []
    for path in sorted((corpus / "ncu-rep").iterdir()):
        version = _ncu_version(path)
        context = ncu_report.load_report(str(path))
        assert context.num_ranges() > 0, f"{path.name} loaded as an empty report"
        first = len(launches)
        for r in range(context.num_ranges()):
            rng = context.range_by_idx(r)
            for a in range(rng.num_actions()):
                action = rng.action_by_idx(a)
                metrics, curves = {}, {}
                for name in action.metric_names():
                    metric = action.metric_by_name(name)
                    if name in CURVES and metric.has_correlation_ids():
                        ids = metric.correlation_ids()
                        curves[name] = [(ids.as_uint64(i), metric.as_double(i)) for i in range(metric.num_instances())]
                    elif name.startswith(("launch__", "device__attribute_", "sm__maximum_warps", "gpu__time_duration")):
                        kind = metric.kind()
                        metrics[name] = metric.as_string() if kind == ncu_report.IMetric.ValueKind_STRING \
                            else metric.as_double()
                launches.append(Launch(path.name, action.name(), metrics, curves, version, path,
                                       len(launches) - first))
    return launches


@pytest.fixture(scope="module")
def launches(corpus: Path) -> list[Launch]:
    found = _launches(corpus)
    assert len(found) >= 9, f"expected every corpus report to hold kernels, found {len(found)} launches"
    return found


def _cc(launch: Launch) -> str:
    return (f"{launch.int('device__attribute_compute_capability_major')}."
            f"{launch.int('device__attribute_compute_capability_minor')}")


#: Nsight Compute before this version computed its occupancy (launch__occupancy_limit_shared_mem and the
#: launch__occupancy_per_* curves) for the default carveout, the SM's whole shared memory, not for the carveout the
#: launch ran with (launch__shared_mem_config_size), as cuda_occupancy.h does with no carveout preference
#: (cudaOccSMemPreferenceVoltaPlus: SHAREDMEM_CARVEOUT_DEFAULT -> sharedMemPerMultiprocessor). Seen in the corpus:
#: 2021.2 on an A40 stores 102400 // 1024 = 100 blocks for a 1 KB block in an 8 KB carveout, where 2022.4 on the same
#: GPU stores 8192 // 1024 = 8; 2022.2's curves (V100) follow the launch's carveout. 2021.3-2022.1 are not in the
#: corpus with a carveout below the maximum; one that disagrees with this cut fails below.
NCU_LAUNCH_CARVEOUT_FROM = (2022, 1)


def _ncu_carveout(launch: Launch) -> int | None:
    """The shared memory per SM ncu's own occupancy was computed for: the launch's carveout, or None (the default,
    the largest) for a report recorded by an ncu older than :data:`NCU_LAUNCH_CARVEOUT_FROM`."""
    if launch.ncu_version is not None and launch.ncu_version < NCU_LAUNCH_CARVEOUT_FROM:
        return None
    return launch.int("launch__shared_mem_config_size")


def _iotrace_answer(launch: Launch) -> OccupancyResult:
    cc = _cc(launch)
    reserved = launch.num("launch__shared_mem_per_block_driver")
    return occupancy_of_recorded_launch(
        cc,
        launch.int("launch__block_size"),
        launch.int("launch__registers_per_thread"),
        launch.int("launch__shared_mem_per_block_static"),
        launch.int("launch__shared_mem_per_block_dynamic"),
        smem_reserved=None if reserved is None else int(reserved),
        smem_config=_ncu_carveout(launch),
    )


@cache
def _report(path: Path) -> Report:
    return build_report(load_corpus(path), top=1000, each_launch=True)  # one row per launch, ids in file order


def _said_not_profiled(launch: Launch) -> None:
    """iotrace's report on the launch's file says it was not profiled, once, and gives it no occupancy."""
    report = _report(launch.path)
    [kernel] = [k for k in report.kernels if k.kernel_id == launch.index]
    where = f"{launch.file} #{launch.index}"
    assert not kernel.profiled and kernel.occupancy is None, where
    assert kernel.to_dict()["occupancy"]["theoretical_pct"] is None, where
    [said] = [f for f in report.findings if f.rule == "not-profiled"]
    assert f"#{launch.index}" in said.text, where


def _profiled(launches: list[Launch]) -> list[Launch]:
    """The launches ncu profiled; the others are checked to be said not profiled (the RTX 4070 file's #1 among them)."""
    failed = [launch for launch in launches if not launch.profiled]
    assert ("rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep", 1) in [(f.file, f.index) for f in failed]
    for launch in failed:
        _said_not_profiled(launch)
    return [launch for launch in launches if launch.profiled]


def test_every_corpus_kernel_matches_ncu(launches: list[Launch]) -> None:
    compared = 0
    profiled = _profiled(launches)
    for launch in profiled:
        mine = _iotrace_answer(launch)
        where = f"{launch.file}:{launch.kernel}"
        for name in ("registers", "shared_mem", "warps", "blocks"):
            stored = launch.num(f"launch__occupancy_limit_{name}")
            if stored is None or math.isnan(stored):
                # ncu 2019 stores NaN for a resource the kernel does not use.
                assert name in mine.unlimited, f"{where}: ncu says {name} is unlimited, iotrace {mine.limits[name]}"
            else:
                assert mine.limits[name] == stored, f"{where}: {name} limit {mine.limits[name]} != ncu {stored}"
        assert mine.active_warps_per_sm == launch.num("sm__maximum_warps_avg_per_active_cycle"), where
        assert mine.occupancy_pct == pytest.approx(launch.num("sm__maximum_warps_per_active_cycle_pct"), abs=1e-9)
        allocated = launch.num("launch__registers_per_thread_allocated")  # ncu names it per thread; it is per block
        if allocated is not None:
            assert mine.allocated_registers_per_block == allocated, where
        smem_allocated = launch.num("launch__shared_mem_per_block_allocated")
        if smem_allocated is not None:
            assert mine.allocated_smem_per_block == smem_allocated, where
        compared += 1
    assert compared == len(profiled) >= 9


def test_sm_limits_match_the_devices_in_the_corpus(launches: list[Launch]) -> None:
    attributes = {
        "max_threads_per_sm": "device__attribute_max_threads_per_multiprocessor",
        "max_blocks_per_sm": "device__attribute_max_blocks_per_multiprocessor",
        "regs_per_sm": "device__attribute_max_registers_per_multiprocessor",
        "regs_per_block": "device__attribute_max_registers_per_block",
        "max_regs_per_thread": "device__attribute_max_registers_per_thread",
        "smem_per_sm": "device__attribute_max_shared_memory_per_multiprocessor",
        "smem_per_block": "device__attribute_max_shared_memory_per_block",
        "smem_per_block_optin": "device__attribute_max_shared_memory_per_block_optin",
        "smem_reserved_per_block": "device__attribute_reserved_shared_memory_per_block",
        "max_threads_per_block": "device__attribute_max_threads_per_block",
        "warp_size": "device__attribute_warp_size",
    }
    checked = set()
    for launch in launches:
        cc = _cc(launch)
        limits = sm_limits(cc)
        for field, metric in attributes.items():
            stored = launch.num(metric)
            if stored is not None:
                ours = getattr(limits, field)
                assert ours == stored, f"{launch.file}: CC {cc} {field} {ours} != {stored}"
                checked.add((cc, field))
    assert {cc for cc, _ in checked} >= {"7.0", "7.5", "8.6", "8.9"}


def test_what_if_curves_match_ncu(launches: list[Launch]) -> None:
    builders = {
        "launch__occupancy_per_block_size": curve_block_size,
        "launch__occupancy_per_register_count": curve_registers,
        "launch__occupancy_per_shared_mem_size": curve_shared_mem,
    }
    points = 0
    for launch in _profiled(launches):
        base = _iotrace_answer(launch)
        for metric, build in builders.items():
            stored = launch.curves.get(metric)
            if not stored:
                continue
            step = stored[2][0] - stored[1][0] if metric.endswith("shared_mem_size") else None
            mine = {p.x: p.active_warps_per_sm for p in (build(base, step) if step else build(base))}
            for x, warps in stored:
                # Above 48 KB per block ncu's cut-off depends on its version (2022.2 and 2024.1-2024.2 stop at
                # 48 KB, 2023.x and 2024.3 at the opt-in maximum) and on an opt-in it cannot see; compare below it.
                beyond_48k = metric.endswith("shared_mem_size") and x > sm_limits(base.cc).smem_per_block
                if x in mine and not beyond_48k:
                    assert mine[x] == warps, f"{launch.file}:{launch.kernel} {metric} at {x}: {mine[x]} != ncu {warps}"
                    points += 1
    assert points > 10_000, f"only {points} curve points compared"
