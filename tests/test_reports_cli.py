"""``iotrace report`` and ``iotrace diff`` as a user runs them, on real corpus files: in this process (what they check
is the command's output, not the process; the worker's imports are shared), but for a real subprocess each of
``report`` (PNG export without a browser: a fresh interpreter's browser search on its own PATH, exit 2, one line) and
``diff`` (a missing file), and the kaleido exports (a browser child process, kaleido's threads)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.conftest import run_cli_in_process as _in_process

T4 = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"
UNCOALESCED = "ncu-rep/rtx4050laptop_rgb_uncoalesced_memchart_ncu2023.3.ncu-rep"
COALESCED = "ncu-rep/rtx4050laptop_rgb_coalesced_memchart_ncu2023.3.ncu-rep"
NSYS = "nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite"

EVIL = "[bold red]x[/] <script>alert(1)</script>"



def _strict_json(text: str) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"JSON holds {constant}")

    return json.loads(text, parse_constant=refuse)


def _kineto(tmp_path: Path) -> Path:
    """A minimal Kineto trace (schema 1) whose kernel name is both rich markup and HTML."""
    events = [{"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
               "args": {"device": 0, "stream": 7, "correlation": i, "registers per thread": 32, "shared memory": 0,
                        "grid": [64, 1, 1], "block": [128, 1, 1]}}
              for i, (name, ts, dur) in enumerate(((EVIL, 100.0, 50.0), ("second", 400.0, 20.0)), start=1)]
    doc = {"schemaVersion": 1, "traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0,
                                 "numSms": 108, "warpSize": 32}]}
    path = tmp_path / "evil_kineto.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_report_json_per_kernel_keys_and_no_nan(corpus: Path) -> None:
    result = _in_process("report", str(corpus / T4), "--json")
    assert result.returncode == 0, result.stderr
    data = _strict_json(result.stdout)
    (kernel,) = data["kernels"]
    assert kernel["occupancy"]["theoretical_pct"] == kernel["occupancy"]["theoretical_pct_ncu"] == 100.0
    assert kernel["roofline"]["bound"] == "memory" and next(iter(kernel["stalls"])) == "long_scoreboard"
    same = _in_process("report", str(corpus / T4), "--format", "json")
    assert _strict_json(same.stdout) == data


def test_terminal_report_fits_100_columns(corpus: Path) -> None:
    for name in (T4, NSYS, "ncu-rep/v100_sxm2_miniweather_openacc_full_ncu2022.2.ncu-rep"):
        result = _in_process("report", str(corpus / name), env={"COLUMNS": "100"})
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= 100, name
        assert "Kernels (" in result.stdout and "Top findings" in result.stdout


def test_terminal_and_markdown_show_trace_names_as_typed(tmp_path: Path) -> None:
    trace = _kineto(tmp_path)
    result = _in_process("report", str(trace), "--details", "1")
    assert result.returncode == 0, result.stderr
    assert EVIL in result.stdout  # rich markup in a name is printed, not interpreted
    out = tmp_path / "r.md"
    assert _in_process("report", str(trace), "--format", "md", "-o", str(out)).returncode == 0
    text = out.read_text(encoding="utf-8")
    assert "<script>" not in text and r"\<script\>alert(1)\</script\>" in text


def test_markdown_html_and_diff_outputs(corpus: Path, tmp_path: Path) -> None:
    md = tmp_path / "t4.md"
    page = tmp_path / "t4.html"
    assert _in_process("report", str(corpus / T4), "--format", "md", "-o", str(md)).returncode == 0
    text = md.read_text()
    assert "| kernel |" in text and "1. **roofline** \\#0 matrix" in text and "Memory bound: memory throughput" in text
    assert text.index("## Top findings") < text.index("| kernel |")  # the report opens with what matters
    assert _in_process("report", str(corpus / T4), "--format", "html", "-o", str(page)).returncode == 0
    assert page.read_text().startswith("<!doctype html>")
    diff = _in_process("diff", str(corpus / UNCOALESCED), str(corpus / COALESCED), "--json")
    assert diff.returncode == 0, diff.stderr
    (row,) = _strict_json(diff.stdout)["kernels"]
    assert row["l2_bytes_ratio"] == pytest.approx(49495 / 98545)
    term = _in_process("diff", str(corpus / UNCOALESCED), str(corpus / COALESCED))
    assert "L2 bytes" in term.stdout and "only kernel left on each side" in term.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="PNG export needs Chromium (apt-get install chromium)")
def test_png_and_svg_through_kaleido(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("kaleido", reason="PNG export needs kaleido: pip install 'iotrace[image]'")
    # Real processes: the export drives a browser child process through kaleido's threads, which the program's exit
    # must get past (iotrace.cli.run).
    png = tmp_path / "t4.png"
    result = run_cli("report", str(corpus / T4), "--format", "png", "-o", str(png))
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "t4-stalls.png").exists()
    svg = tmp_path / "t4.svg"
    assert run_cli("report", str(corpus / T4), "--format", "svg", "-o", str(svg)).returncode == 0
    assert "<svg" in svg.read_text()[:2000]
    md = tmp_path / "t4.md"
    assert run_cli("report", str(corpus / T4), "--format", "md", "-o", str(md), "--images").returncode == 0
    assert "![roofline](t4-roofline.png)" in md.read_text() and (tmp_path / "t4-roofline.png").exists()


def test_png_without_chromium_names_the_missing_piece(corpus: Path, tmp_path: Path) -> None:
    # A real process: a fresh interpreter's browser search on its own PATH (nothing found or cached before), exit 2.
    env = {"PATH": str(tmp_path), "BROWSER_PATH": ""}  # no browser on the PATH
    result = run_cli("report", str(corpus / T4), "--format", "png", "-o", str(tmp_path / "x.png"), env=env)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "kaleido" in result.stderr or "Chromium" in result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--kernel", "("], "is not a regular expression"),
    (["--kernel", "no_such_kernel"], "matches none of the trace's kernels"),
    (["--format", "html"], "--format html writes a file"),
    (["--json", "--format", "md"], "disagree"),
    (["--plugin", "no_such_plugin"], "no kernel called 'no_such_plugin'"),
    (["--images"], "--images needs --format md"),
])
def test_bad_report_options_are_one_line_and_exit_2(corpus: Path, args: list[str], expected: str) -> None:
    result = _in_process("report", str(corpus / T4), *args)
    assert result.returncode == 2, result.stdout
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_missing_trace_is_one_line(tmp_path: Path) -> None:
    result = _in_process("report", str(tmp_path / "nope.ncu-rep"))
    assert result.returncode == 2 and "does not exist" in result.stderr
    result = run_cli("diff", str(tmp_path / "a"), str(tmp_path / "b"))  # diff through a real process
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_help_lists_the_flags() -> None:
    result = _in_process("report", "--help")
    assert result.returncode == 0
    for flag in ("--kernel", "--card", "--format", "--json", "--output", "--ceilings", "--plugin", "--shape"):
        assert flag in result.stdout
    assert _in_process("diff", "--help").returncode == 0


def test_a_launch_set_reads_in_one_unit(corpus: Path) -> None:
    """The H100 GEMM's three launches: "4.05 ms per launch, 3 launches, 4.03 ms min / 4.04 median / 4.07 max", in the
    unit of the per-launch time beside them, where it printed "4.03e+03 µs min"."""
    done = _in_process("report", str(corpus / "ncu-rep/h100sxm_bf16_gemm_pc_pipeline_full_ncu2024.1.ncu-rep"))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the terminal wraps the line
    assert "4.05 ms per launch, 3 launches, 4.03 ms min / 4.04 median / 4.07 max" in text
    assert "e+03 µs" not in text
