"""Nsight Compute's stored rule results (guided analysis): the ``rules`` table against ``ncu_report`` read here.

Expected values are read in the test with NVIDIA's ``ncu_report`` (``IAction.rule_results_as_dicts``, and its own enum
constants for the message and speedup types), independently of iotrace's reader; the counts were read the same way
once and written down. Each report is loaded once for the module.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from iotrace.trace.formats.ncu_rep import _probe_in_child
from iotrace.trace.formats.ncu_rep_rules import NO_RULES, rule_rows, rules_note
from iotrace.trace.reports.ncu_rules import StoredRule, bound_verdict, plain_message, rules_status, stored_rules
from iotrace.trace.tables import TraceTables, build
from tests.conftest import load_corpus, ncu_launches

H100_GEMM = "h100sxm_bf16_gemm_pc_pipeline_full_ncu2024.1.ncu-rep"
#: file -> (launches, launches with rule results, rule results, results with a speedup estimate), read with ncu_report.
COUNTS = {
    "a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep": (1, 1, 1, 0),  # captured with --rule SOLBottleneck only
    "a10g_sgemm_tiling_variants_ncu2023.1.ncu-rep": (4, 4, 8, 0),
    "a40_imma_1block_grid_julia_full_ncu2021.2.ncu-rep": (1, 1, 17, 0),
    "a40_imma_int8_tensor_julia_full_ncu2022.1.ncu-rep": (1, 1, 13, 0),
    "a40_julia_repeated_names_mixed_grids_ncu2022.4.ncu-rep": (5, 5, 33, 0),
    "gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep": (100, 100, 200, 0),
    "gtx1660super_dot_product_full_ncu2024.1.ncu-rep": (2, 2, 19, 11),
    "gtx1660ti_mojo_math_kernels_ncu2022.4.ncu-rep": (4, 4, 12, 0),
    "h100_stochastic_round_bf16_1block_full_ncu2024.3.ncu-rep": (4, 4, 48, 32),
    H100_GEMM: (3, 3, 42, 27),
    "rtx2060super_gsz_compress_ncu2024.3.ncu-rep": (10, 10, 78, 68),
    "rtx2070_matrixMul_nsight_compute_2019.nsight-cuprof-report": (8, 0, 0, 0),
    "rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep": (1, 0, 0, 0),  # --section MemoryWorkloadAnalysis_Chart only
    "rtx4050laptop_rgb_coalesced_memchart_ncu2023.3.ncu-rep": (1, 0, 0, 0),
    "rtx4050laptop_rgb_uncoalesced_memchart_ncu2023.3.ncu-rep": (1, 0, 0, 0),
    # Launch #1 was not profiled: its 32 results are the rules' errors (31) and one warning about missing metrics.
    "rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep": (2, 2, 42, 6),
    "t4_matrix_add2d_full_ncu2024.2.ncu-rep": (1, 1, 9, 5),
    "v100_sxm2_miniweather_openacc_full_ncu2022.2.ncu-rep": (5, 5, 64, 0),
}
RULE_IDS = {"AchievedOccupancy", "CPIStall", "FPInstructions", "HighPipeUtilization", "IssueSlotUtilization",
            "LaunchConfiguration", "MemoryCacheAccessPattern", "MemoryL2Compression", "Occupancy", "PCSamplingData",
            "PMSamplingData", "SOLBottleneck", "SOLFPRoofline", "ThreadDivergence", "TheoreticalOccupancy",
            "UncoalescedGlobalAccess", "UncoalescedSharedAccess", "WorkloadImbalance"}
#: Every SOLBottleneck title in the corpus (ncu 2021.2-2024.3) and the verdict it reads as; "High Throughput" (one unit
#: past 80% of peak) reads as the unit whose section its message names (memory: DRAM, in both corpus files).
SOL_TITLES = {"Balanced Throughput": "balanced", "High Compute Throughput": "compute",
              "High Memory Throughput": "memory", "High Throughput": "memory", "Latency Issue": "latency",
              "Small Grid": "latency"}
MARKUP = re.compile(r"@(section|url|source|sass):")


@pytest.fixture(scope="module")
def reports(corpus: Path) -> dict[str, tuple[TraceTables, list[list[dict[str, Any]]]]]:
    """Every corpus Nsight Compute report: iotrace's tables and, per launch, ncu_report's own rule dicts."""
    paths = sorted(p for p in (corpus / "ncu-rep").iterdir() if p.suffix in (".ncu-rep", ".nsight-cuprof-report"))
    return {p.name: (load_corpus(p), ncu_launches(p, lambda action: action.rule_results_as_dicts())) for p in paths}


def test_every_launch_matches_ncu_report(reports: dict[str, Any]) -> None:
    import ncu_report

    words = {ncu_report.MsgType_NONE: "none", ncu_report.MsgType_OK: "ok",
             ncu_report.MsgType_OPTIMIZATION: "optimization", ncu_report.MsgType_WARNING: "warning",
             ncu_report.MsgType_ERR: "error"}
    kinds = {ncu_report.SpeedupType_LOCAL: "local", ncu_report.SpeedupType_GLOBAL: "global"}
    assert set(COUNTS) == set(reports)
    for name, (tables, launches) in reports.items():
        assert list(tables.kernels["id"]) == list(range(len(launches))), name  # kernel ids are file order
        expected = [(kid, d["rule_identifier"], d["name"], d["section_identifier"], d["rule_message"]["title"] or None,
                     d["rule_message"]["message"] or None, words[d["rule_message"]["type"]],
                     d.get("speedup_estimation", {}).get("speedup"),
                     kinds.get(d.get("speedup_estimation", {}).get("type")), d.get("focus_metrics", []))
                    for kid, dicts in enumerate(launches) for d in dicts]
        rules = tables.rules
        found = [(int(r.kernel_id), r.rule_id, r.rule_name, r.section, r.title, r.message, r.severity,
                  None if math.isnan(r.speedup) else r.speedup, r.speedup_type, json.loads(r.focus_metrics))
                 for r in rules.itertuples()]
        assert found == expected, name
        assert [int(t) for t in rules["message_type"]] == [d["rule_message"]["type"] for ds in launches for d in ds]
        assert (len(launches), sum(1 for ds in launches if ds), len(found), sum(1 for f in found if f[7] is not None)) \
            == COUNTS[name], name


def test_rule_ids_speedup_versions_and_types(reports: dict[str, Any]) -> None:
    every = {rule for tables, _ in reports.values() for rule in tables.rules["rule_id"]}
    assert every == RULE_IDS
    assert sum(COUNTS[name][1] for name in COUNTS) == 143  # launches with rule results in the corpus
    for name, (tables, _) in reports.items():
        rules = tables.rules
        with_speedup = rules["speedup"].notna()
        # Speedup estimates came with ncu 2023.x (none in the 2021.2-2023.1 files); rules without one stay NaN/None.
        if re.search(r"ncu202[123]\.[0-2]\.", name):
            assert not with_speedup.any(), name
        assert set(rules.loc[with_speedup, "speedup_type"]) <= {"local", "global"}, name
        assert rules.loc[~with_speedup, "speedup_type"].isna().all(), name
        assert ((rules.loc[with_speedup, "speedup"] >= 0) & (rules.loc[with_speedup, "speedup"] <= 100)).all(), name


def test_files_without_rule_results_say_so_in_one_note(reports: dict[str, Any]) -> None:
    for name, (tables, _) in reports.items():
        notes = [n for n in tables.meta["notes"] if n.startswith(NO_RULES)]
        if COUNTS[name][2]:
            status = rules_status(tables)  # None, or the one line saying the results carry no estimate
            assert notes == [] and (status is None or "carry no speedup estimates" in status), name
            assert (status is None) == bool(tables.rules["speedup"].notna().any()), name
            continue
        assert len(notes) == 1 and "\n" not in notes[0], name
        assert rules_status(tables) == notes[0]
        assert tables.rules.empty
    [note] = [n for n in reports["rtx4050laptop_rgb_brightness_ncu2023.3.ncu-rep"][0].meta["notes"]
              if n.startswith(NO_RULES)]
    assert "2023.3.0.0" in note and "MemoryWorkloadAnalysis_Chart" in note
    old = reports["rtx2070_matrixMul_nsight_compute_2019.nsight-cuprof-report"][0]
    assert "version not stated" in rules_status(old)


def test_section_and_link_markup_becomes_words(reports: dict[str, Any]) -> None:
    tables, launches = reports[H100_GEMM]
    raw = launches[0][0]["rule_message"]["message"]
    assert "@section:MemoryWorkloadAnalysis:Memory Workload Analysis@ section" in raw
    [sol] = [r for r in stored_rules(tables, [0]) if r.rule_id == "SOLBottleneck"]
    assert sol.message.startswith("Memory is more heavily utilized than Compute: Look at the Memory Workload Analysis "
                                  "section to identify the DRAM bottleneck.")
    # Two references joined by "and", with no "the" or "section" in the sentence, and the other markup kinds.
    assert plain_message("Look at @section:SchedulerStats:Scheduler Statistics@ and @section:WarpStateStats:Warp State "
                         "Statistics@ for potential reasons.") == ("Look at the Scheduler Statistics and Warp State "
                                                                   "Statistics sections for potential reasons.")
    assert plain_message("See the @url:Kernel Profiling Guide:https://docs.nvidia.com/x.html#y@ for more.") \
        == "See the Kernel Profiling Guide (https://docs.nvidia.com/x.html#y) for more."
    assert plain_message("at PC @source:7fc3bcfafb70:0x7fc3bcfafb70@ at") == "at PC 0x7fc3bcfafb70 at"
    for tables, _ in reports.values():  # no markup survives in any corpus message
        for kid in set(tables.rules["kernel_id"]):
            assert not any(r.message and MARKUP.search(r.message) for r in stored_rules(tables, [int(kid)]))


def test_stored_rules_of_a_group_are_its_first_launch_by_speedup(reports: dict[str, Any]) -> None:
    tables, launches = reports["rtx2060super_gsz_compress_ncu2024.3.ncu-rep"]
    rules = stored_rules(tables, [3, 0, 1])
    assert {r.kernel_id for r in rules} == {3} and len(rules) == len(launches[3])
    speedups = [r.speedup_pct for r in rules]
    known = [s for s in speedups if s is not None]
    assert known == sorted(known, reverse=True) and speedups == known + [None] * (len(speedups) - len(known))
    top = rules[0]
    assert isinstance(top, StoredRule) and top.to_dict()["speedup_pct"] == top.speedup_pct
    assert json.dumps(top.to_dict()) and top.rule_id in top.text() and f"{top.speedup_pct:.1f}%" in top.text()
    assert stored_rules(tables, []) == []


def test_bound_verdict_reads_every_corpus_solbottleneck_title(reports: dict[str, Any]) -> None:
    """Only a result that is not an error is a verdict: an error (MsgType_ERR) is the rule failing, with an empty title
    (launch #1 of the RTX 4070 file, not profiled, holds three) and gives none."""
    import ncu_report

    def sol(dicts: list[dict[str, Any]], errors: bool) -> list[str]:
        return [d["rule_message"]["title"] for d in dicts if d["rule_identifier"] == "SOLBottleneck"
                and (d["rule_message"]["type"] == ncu_report.MsgType_ERR) == errors]

    titles = {title for _, launches in reports.values() for ds in launches for title in sol(ds, False)}
    assert titles == set(SOL_TITLES)
    failed = [title for _, launches in reports.values() for ds in launches for title in sol(ds, True)]
    assert failed == ["", "", ""]
    for _, (tables, launches) in reports.items():
        for kid, dicts in enumerate(launches):
            [title] = sol(dicts, False) or [None]
            assert bound_verdict(stored_rules(tables, [kid])) == SOL_TITLES.get(title)


def test_a_damaged_rule_payload_loses_only_its_own_rows(corpus: Path, reports: dict[str, Any]) -> None:
    """The reader's row conversion with real dicts altered: a key removed, a speedup that is not a number."""
    dicts = reports[H100_GEMM][1][0]
    whole, problem = rule_rows(0, dicts)
    assert problem is None and len(whole) == len(dicts) == 14
    damaged = copy.deepcopy(dicts)
    del damaged[0]["rule_identifier"]
    [at] = [i for i, d in enumerate(damaged) if "speedup_estimation" in d][:1]
    damaged[at]["speedup_estimation"]["speedup"] = "36.4%"
    rows, problem = rule_rows(0, damaged)
    assert problem == "result 1 of 14: no 'rule_identifier'; 1 more left out"
    assert rows == [row for i, row in enumerate(whole) if i not in (0, at)]
    _, speedup_problem = rule_rows(0, damaged[1:])
    assert speedup_problem == f"result {at} of 13: speedup is '36.4%', not a number"
    note = rules_note(corpus / "ncu-rep" / H100_GEMM, 2, problem)
    assert note == (f"{H100_GEMM}: rule results of launch #2 could not be read (result 1 of 14: no 'rule_identifier'; "
                    "1 more left out): the rest of the report is unaffected")
    assert rule_rows(0, None) == ([], "ncu_report returned NoneType, not a list")
    assert rule_rows(0, ["x", *dicts[:1]]) == (whole[:1], "result 1 of 2: a str, not a dict")
    # The surviving rows build a table as the reader's do.
    tables = build(Path("x.ncu-rep"), kernels=[{"id": 0, "name": "k"}], rules=rows, meta={})
    assert list(tables.rules["rule_id"]) == [row["rule_id"] for row in rows]


def test_the_probe_child_reads_the_rule_payload_too() -> None:
    """A report whose rule payload crashes ncu_report's native code must be refused like any other crash: the forked
    probe calls the same function (read from the source: a crash cannot be staged without damaging native state)."""
    import inspect

    assert "rule_results_as_dicts()" in inspect.getsource(_probe_in_child)
