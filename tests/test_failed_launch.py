"""A launch Nsight Compute did not profile (issue 45 item 1), on a real report of the corpus.

``rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep`` (Nsight Compute 2024.3.2, RTX 4070 Laptop) holds two
launches: #0 ``initializeBiNodes`` was profiled; #1 ``biAStarMultipleBucketsSingleKernel`` has no ``launch__*`` metric
and no duration, and its stored rule results are the rule scripts' errors (Windows paths of ncu's section files and
all). The report must say once, first, that #1 was not profiled and how to collect it again; never show its errors as
advice, nor draw a verdict or finding from them; and report #0 as before. Expected values are read here with NVIDIA's
``ncu_report`` (independently of iotrace's reader).
"""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from iotrace.trace.reports.ncu_rules import bound_verdict, stored_rules
from tests.conftest import CORPUS, load_corpus, ncu_launches, run_cli_in_process

FAILED = "ncu-rep/rtx4070laptop_bastar_full_failedlaunch_ncu2024.3.ncu-rep"
HEALTHY = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"
#: How the report says it: once, as its first finding (the launch's own row and detail say "not profiled" for short).
SAID = "launch not profiled (no counters in the file:"


def _launch(action: Any) -> dict[str, Any]:
    """What ncu_report holds for one launch: its name, whether ncu recorded it, its rule results, its occupancy."""
    import ncu_report

    names = list(action.metric_names())
    duration = action.metric_by_name("gpu__time_duration.sum")
    occupancy = action.metric_by_name("sm__maximum_warps_per_active_cycle_pct")
    return {"name": action.name(), "full_name": action.name(ncu_report.IAction.NameBase_DEMANGLED),
            "launch_metrics": any(n.startswith("launch__") for n in names),
            "duration": None if duration is None else duration.as_double(),
            "occupancy": None if occupancy is None else occupancy.as_double(),
            "rules": action.rule_results_as_dicts(), "error": ncu_report.MsgType_ERR}


@cache
def _ncu(name: str) -> list[dict[str, Any]]:
    return ncu_launches(CORPUS / name, _launch)


@cache
def _out(name: str, *options: str) -> str:
    result = run_cli_in_process("report", str(CORPUS / name), "--wide", *options)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _errors(launch: dict[str, Any]) -> list[str]:
    return [d["rule_message"]["message"] for d in launch["rules"] if d["rule_message"]["type"] == launch["error"]]


def test_the_file_holds_one_unprofiled_launch_and_the_reader_names_it(corpus: Path) -> None:
    first, failed = _ncu(FAILED)
    assert first["launch_metrics"] and math.isfinite(first["duration"])
    assert not failed["launch_metrics"] and not math.isfinite(failed["duration"])
    errors = _errors(failed)
    assert len(errors) == 31 and any("SpeedOfLight.py:90" in e for e in errors) and not _errors(first)
    tables = load_corpus(corpus / FAILED)
    assert tables.meta["not_profiled"] == [1]
    [note] = [n for n in tables.meta["notes"] if "not profiled" in n]
    assert "#1 biAStarMultipleBucketsSingleKernel" in note and "#0" not in note
    # Its missing counters are not ncu's "unlimited": no note lists them as non-finite values.
    assert not any(n.startswith("non-finite values") for n in tables.meta["notes"])
    # The rules table keeps every stored row (tests/test_ncu_rules.py compares it row for row).
    assert (tables.rules["kernel_id"] == 1).sum() == len(failed["rules"]) == 32
    assert "not_profiled" not in load_corpus(corpus / HEALTHY).meta


def test_the_report_says_once_first_that_launch_1_was_not_profiled_and_how_to_collect_it(corpus: Path) -> None:
    failed = _ncu(FAILED)[1]
    function = failed["name"]  # ncu's function name: what -k regex: matches
    before = sum(function in launch["name"] for launch in _ncu(FAILED)[:1])  # launches of it before #1
    command = f"ncu --set full -k regex:{function} --launch-skip {before} --launch-count 1"
    for options in ((), ("--format", "md")):
        text = " ".join(_out(FAILED, *options).replace("\\", "").split())  # unwrapped; Markdown escapes # and *
        assert text.count(SAID) == 1, options
        said = text.index(SAID)
        assert said < text.index("Nsight Compute's own analysis") and said < text.index("Kernels (")
        assert text.index("#1") < said and "compute-sanitizer" in text and text.count(command) == 1
        assert "32 Nsight Compute rule results" in text and "31 errors" in text
    data = json.loads(_out(FAILED, "--json"))
    said = data["findings"][0]
    assert said["rule"] == "not-profiled" and SAID in said["text"] and command in said["try"]
    assert said["kernel_id"] == 1 and "compute-sanitizer" in said["try"]


@pytest.mark.parametrize("options", [(), ("--format", "md"), ("--json",)])
def test_its_rule_errors_are_never_advice(corpus: Path, options: tuple[str, ...]) -> None:
    _, failed = _ncu(FAILED)
    text = _out(FAILED, *options)
    assert "C:\\" not in text and "C:\\\\" not in text and ".py:90" not in text and ".py:99" not in text
    for message in _errors(failed) + [d["rule_message"]["message"] for d in failed["rules"]]:
        assert message.splitlines()[0] not in text.replace("\\_", "_"), message
    assert "collecting it again will not help" not in text


def test_the_html_report_shows_none_of_its_errors(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert run_cli_in_process("report", str(CORPUS / FAILED), "-o", str(out)).returncode == 0
    html = out.read_text(encoding="utf-8")
    # (the plotly bundle may hold "C:\\"; the rule files' paths and messages are what must not be there)
    assert "Users\\pc" not in html and "SpeedOfLight.py:90" not in html and "Required metric" not in html
    assert html.count(SAID) == 1


def test_no_finding_verdict_or_occupancy_for_it_and_launch_0_as_before(corpus: Path) -> None:
    first = _ncu(FAILED)[0]
    data = json.loads(_out(FAILED, "--json"))
    zero, one = data["kernels"]
    assert one["profiled"] is False and one["ncu_rules"] == [] and one["findings"] == []
    assert one["occupancy"]["theoretical_pct"] is None and one["roofline"]["bound"] is None
    assert [f["rule"] for f in data["findings"] if f["kernel_id"] == 1] == ["not-profiled"]
    assert all(1 not in u["kernel_ids"] for u in data["unavailable"])
    assert all(r["kernel_id"] == 0 for r in data["ncu_rules_ranked"])
    # Launch #0: its stored rules as ncu_report holds them, its findings, its occupancy.
    assert zero["profiled"] is True and zero["findings"]
    assert sorted((r["rule_id"], r["title"] or "") for r in zero["ncu_rules"]) == \
        sorted((d["rule_identifier"], d["rule_message"]["title"]) for d in first["rules"])
    assert ("SOLBottleneck", "High Throughput") in [(r["rule_id"], r["title"]) for r in zero["ncu_rules"]]
    assert zero["occupancy"]["theoretical_pct"] == pytest.approx(first["occupancy"], abs=1e-9)
    assert zero["roofline"]["bound"] == "memory"
    # The stored verdicts: #0's SOLBottleneck reads as memory, #1's three errors as none.
    tables = load_corpus(corpus / FAILED)
    assert bound_verdict(stored_rules(tables, [0])) == "memory"
    errors = [r for r in stored_rules(tables, [1]) if r.rule_id == "SOLBottleneck"]
    assert len(errors) == 3 and {r.severity for r in errors} == {"error"} and bound_verdict(errors) is None
    [sol] = [r for r in stored_rules(tables, [0]) if r.rule_id == "SOLBottleneck"]
    assert bound_verdict([dataclasses.replace(sol, severity="error")]) is None  # an error is never a verdict


def test_a_healthy_report_says_nothing_of_the_kind(corpus: Path) -> None:
    [launch] = _ncu(HEALTHY)
    assert launch["launch_metrics"] and math.isfinite(launch["duration"])
    for options in ((), ("--format", "md"), ("--json",)):
        text = _out(HEALTHY, *options)
        assert "not profiled" not in text and "compute-sanitizer" not in text, options
    assert not [f for f in json.loads(_out(HEALTHY, "--json"))["findings"] if f["rule"] == "not-profiled"]
