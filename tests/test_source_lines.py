"""Stall samples per source line (reports/source_lines.py, the ncu-rep reader's ``source_samples`` table).

Every value is checked against the same report read independently with NVIDIA's ``ncu_report``: the per-address
stall counters (``smsp__pcsamp_warps_issue_stalled_*`` instances and their correlation ids), the address's source
line (``source_info``), its SASS (``sass_by_pc``) and the imported source (``source_files``). ``sass_by_pc`` is read
in a fresh process: ncu_report starts its disassembler thread once per process, and a forked child of a process that
has called it hangs (see ``_probe_in_child`` in iotrace/trace/formats/ncu_rep.py), so it must never run in pytest's.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from iotrace.errors import IotraceError
from iotrace.trace.render.html import report_html
from iotrace.trace.render.markdown import md, report_markdown
from iotrace.trace.render.terminal import print_report
from iotrace.trace.reports import build_report
from iotrace.trace.tables import SOURCE_SAMPLE_COLUMNS, build
from tests.conftest import load_corpus, ncu_launches, run_cli

V100 = "ncu-rep/v100_sxm2_miniweather_openacc_full_ncu2022.2.ncu-rep"  # --import-source: lines and their text
A100 = "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep"  # lines, SASS and imported CUTLASS headers
T4 = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"  # --set full without -lineinfo: SASS addresses only
KMEANS = "ncu-rep/gtx1660_kmeans_100_launches_default_set_ncu2022.4.ncu-rep"  # default set: no source counters
PREFIX = "smsp__pcsamp_warps_issue_stalled_"
#: The one sampling spelling the counter family writes differently (Kernel Profiling Guide, "Warp Stall Reasons").
SPELLING = {"no_instructions": "no_instruction"}


def _samples(action: Any) -> list[tuple[int, str, int, str | None, int | None]]:
    """(address, reason, samples, file, line) for every stall counter instance with samples, read with ncu_report."""
    out = []
    for name in action.metric_names():
        if not name.startswith(PREFIX) or name.endswith("_not_issued"):
            continue
        metric = action.metric_by_name(name)
        ids = metric.correlation_ids()
        for i in range(metric.num_instances()):
            if metric.as_double(i) > 0:
                address = ids.as_uint64(i)
                info = action.source_info(address)
                file = info.file_name() if info is not None and info.file_name() else None
                out.append((address, name[len(PREFIX):], int(metric.as_double(i)), file,
                            info.line() if file else None))
    return out


def _groups(rows: list[tuple[int, str, int, str | None, int | None]]) -> dict[Any, dict[str, Any]]:
    """location -> {"reasons": Counter, "addresses": set}: a mapped address's line, else the address itself."""
    groups: dict[Any, dict[str, Any]] = {}
    for address, raw, samples, file, line in rows:
        group = groups.setdefault((file, line) if file else address, {"reasons": Counter(), "addresses": set()})
        group["reasons"][SPELLING.get(raw, raw)] += samples
        group["addresses"].add(address)
    return groups


def _sample_total(action: Any) -> int:
    return int(action.metric_by_name("smsp__pcsamp_sample_count").as_double())


def _sass(path: Path, addresses: list[int]) -> dict[int, str]:
    """``sass_by_pc`` of the first launch's addresses, in a fresh interpreter (see the module docstring)."""
    script = ("import json, sys, ncu_report\n"
              "action = ncu_report.load_report(sys.argv[1]).range_by_idx(0).action_by_idx(0)\n"
              "print(json.dumps({a: action.sass_by_pc(int(a)).strip() for a in sys.argv[2:]}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(path), *map(str, addresses)], capture_output=True,
                          text=True, timeout=60, check=True)
    return {int(a): text for a, text in json.loads(done.stdout).items()}


@pytest.fixture(scope="module")
def reports(corpus: Path) -> dict[str, Any]:
    """Each corpus file of this test loaded and reported once."""
    return {name: build_report(load_corpus(corpus / name)) for name in (V100, A100, T4, KMEANS)}


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_table_holds_every_sampled_address_and_reason(corpus: Path, reports: dict[str, Any]) -> None:
    for name in (V100, T4):
        expected = {(kid, address, reason, samples, file, line)
                    for kid, rows in enumerate(ncu_launches(corpus / name, _samples))
                    for address, reason, samples, file, line in rows}
        table = reports[name].tables.source_samples
        assert list(table.columns) == list(SOURCE_SAMPLE_COLUMNS)
        got = {(int(r.kernel_id), int(r.address), r.reason, int(r.samples), r.file,
                None if pd.isna(r.line) else int(r.line)) for r in table.itertuples()}
        assert got == expected and len(table) == len(expected), name


@pytest.mark.parametrize("name", [V100, A100, T4])
def test_top_lines_samples_and_dominant_reason(corpus: Path, reports: dict[str, Any], name: str) -> None:
    launches = ncu_launches(corpus / name, lambda action: (_groups(_samples(action)), _sample_total(action)))
    records = reports[name].source_lines
    assert [k.kernel_id for k in records] == list(range(len(launches)))
    for k in records:
        groups, total = launches[k.kernel_id]
        assert k.samples == total  # the file's own smsp__pcsamp_sample_count
        assert k.locations == len(groups)
        by_samples = sorted((sum(g["reasons"].values()) for g in groups.values()), reverse=True)
        assert [line.samples for line in k.lines] == by_samples[:10]
        for line in k.lines:
            group = groups[(line.file, line.line) if line.file else line.address]
            top = max(group["reasons"].values())
            assert line.samples == sum(group["reasons"].values())
            assert group["reasons"][line.reason] == top == line.reason_samples
            assert line.share == pytest.approx(line.samples / total)
            assert line.reason_share == pytest.approx(top / line.samples)
            assert line.addresses == len(group["addresses"]) and line.address in group["addresses"]


def test_lines_carry_the_imported_source_and_the_sass(corpus: Path, reports: dict[str, Any]) -> None:
    k = reports[A100].source_lines[0]
    texts = ncu_launches(corpus / A100, lambda action: dict(action.source_files().items()))[0]
    sass = _sass(corpus / A100, [line.address for line in k.lines])
    for line in k.lines:
        assert line.text == texts[line.file].split("\n")[line.line - 1].strip()
        assert line.sass == sass[line.address] and line.sass
    assert k.by == "line" and k.advice == ""


def test_without_line_info_rows_are_sass_addresses_and_name_lineinfo(corpus: Path, reports: dict[str, Any]) -> None:
    k = reports[T4].source_lines[0]
    sass = _sass(corpus / T4, [line.address for line in k.lines])
    assert k.by == "address" and k.mapped_samples == 0
    assert all(line.file is None and line.sass == sass[line.address] for line in k.lines)
    assert "-lineinfo" in k.advice and "TRITON_DISABLE_LINE_INFO=1" in k.advice
    assert k.title() == f"stall samples by SASS address (top 10 of {k.locations}; {k.samples:,} samples)"


def test_unmapped_share_is_named(corpus: Path, reports: dict[str, Any]) -> None:
    """compute_tendencies_x_279_gpu: some addresses map to no line; their share of the samples is stated."""
    rows = ncu_launches(corpus / V100, _samples)[2]
    unmapped = sum(samples for _, _, samples, file, _ in rows if file is None) / sum(r[2] for r in rows)
    k = reports[V100].source_lines[2]
    assert k.by == "line and address" and 0 < unmapped < 1
    assert k.advice.startswith(f"{unmapped * 100:.0f}% of the samples are at addresses")


def test_report_without_source_counters_names_the_flags(corpus: Path, reports: dict[str, Any]) -> None:
    names = ncu_launches(corpus / KMEANS, lambda action: [n for n in action.metric_names()
                                                          if n.startswith("smsp__pcsamp")])
    assert not any(names)  # the file holds no sampling at all
    report = reports[KMEANS]
    assert report.source_lines == [] and report.tables.rows("source_samples") == 0
    advice = [u for u in report.unavailable if u["report"] == "source lines"]
    assert len(advice) == 1
    assert advice[0]["collect"] == "ncu --section SourceCounters"
    for flag in ("--set full", "-lineinfo", "--import-source yes"):
        assert flag in advice[0]["line"]


def test_other_formats_have_an_empty_typed_table(corpus: Path) -> None:
    tables = load_corpus(corpus / "kineto/a100_pg509_triton_kernel_kineto.json.gz")
    assert tables.rows("source_samples") == 0 and list(tables.source_samples.columns) == list(SOURCE_SAMPLE_COLUMNS)
    report = build_report(tables)
    assert report.source_lines == [] and not [u for u in report.unavailable if u["report"] == "source lines"]


def test_cli_json_carries_the_lines(corpus: Path) -> None:
    groups, total = ncu_launches(corpus / T4, lambda action: (_groups(_samples(action)), _sample_total(action)))[0]
    hottest, group = max(groups.items(), key=lambda item: sum(item[1]["reasons"].values()))
    done = run_cli("report", str(corpus / T4), "--json")
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["source_lines"]
    first = entry["lines"][0]
    assert (entry["samples"], entry["locations"], entry["by"]) == (total, len(groups), "address")
    assert (first["address"], first["samples"]) == (hottest, sum(group["reasons"].values()))
    assert first["reason"] == max(group["reasons"], key=group["reasons"].get)


def test_renderers_show_the_section(reports: dict[str, Any]) -> None:
    k = reports[T4].source_lines[0]
    console = Console(width=100, record=True, color_system=None, file=io.StringIO())
    print_report(console, reports[T4])
    text = console.export_text()
    head = f"stall samples by SASS address (top 10 of {k.locations}"
    assert head in text and f"{k.lines[0].address:#x}" in text and "-lineinfo" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    markdown = report_markdown(reports[A100])
    assert "## Stall samples by source line" in markdown and md(reports[A100].source_lines[0].lines[0].text) in markdown
    assert head in report_html(reports[T4])


def test_damaged_sample_rows_are_refused(tmp_path: Path) -> None:
    """build() checks the new table as it checks metrics: rows for a launch the file lacks, fractional samples."""
    row = {"kernel_id": [0], "address": [4096], "reason": ["wait"], "samples": [3], "sass": ["NOP"],
           "file": [None], "line": [None], "text": [None]}
    assert build(tmp_path / "x", kernels=[{"id": 0, "name": "k"}], source_samples=row, meta={}).rows(
        "source_samples") == 1
    with pytest.raises(IotraceError, match="stall-sample rows for kernels it does not hold"):
        build(tmp_path / "x", kernels=[{"id": 1, "name": "k"}], source_samples=row, meta={})
    with pytest.raises(IotraceError, match="fraction"):
        build(tmp_path / "x", kernels=[{"id": 0, "name": "k"}], source_samples={**row, "samples": [2.5]}, meta={})
