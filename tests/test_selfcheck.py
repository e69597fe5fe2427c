"""The GPU validation script runs end to end on CPU (`bench/gpu_check.py OUT --cpu --quick`): the results table
has its steps, every built-in kernel is checked correct under the interpreter, and what needs a GPU says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from iotrace.plugins import kernels
from tests.conftest import run_cli

# make test-fast leaves these out: the CPU self-check runs every kernel interpreted, and stand-in profilers.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["card ceilings (copy bandwidth, bf16 matmul)", "kernels against their references and baselines",
         "occupancy: iotrace against the CUDA driver", "tuner: static tune and replay of the committed sweeps",
         "profilers: ncu and nsys captures, loaded back",
         "model bench: SmolLM2-135M on the torch path (CPU figures)"]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("selfcheck")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), str(out), "--cpu", "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    return done, out


def test_cpu_selfcheck_checks_every_kernel(cpu_run) -> None:
    done, out = cpu_run
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    assert (result["mode"], result["quick"], result["ok"]) == ("cpu", True, True)
    assert [step["name"] for step in result["steps"]] == STEPS
    assert [step["status"] for step in result["steps"]] == ["skipped", "ok", "skipped", "ok", "skipped", "ok"]
    rows = result["steps"][1]["rows"]
    builtin = {name for name, spec in kernels().items() if type(spec).__module__.startswith("iotrace.kernels.")}
    assert {row["kernel"] for row in rows} == builtin and len(rows) == len(builtin)
    for row in rows:  # correct, interpreted (never timed on CPU), with compiled resources for the card
        assert row["correct"] is True and row["mode"] == "interpreter" and "us" not in row, row
        assert row["registers"] > 0 and 0 < row["occupancy_pct"] <= 100, row
    int8 = next(row for row in rows if row["kernel"] == "attention-decode-int8")
    assert int8["quality"]["cosine"] >= 0.9999  # the default key scheme holds the quality target
    assert result["environment"]["card"] == "h100-sxm" and result["environment"]["gpu"] is False
    static, *replays = result["steps"][3]["rows"]
    assert (static["configs"], static["pruned"], static["basis"]) == (4, 1, "predicted")
    assert replays and all(r["model_evaluations_to_95pct"] is not None for r in replays)
    bench_row, = result["steps"][5]["rows"]  # the pinned model on the torch path, its wall the CPU's own copy loop's
    assert bench_row["device"].startswith("cpu") and bench_row["decode_tok_s"] > 0
    assert bench_row["wall_from"] == "measured copy (this run, CPU)" and bench_row["of_wall"] == pytest.approx(
        bench_row["decode_tok_s"] / bench_row["wall_tok_s"])
    # Each replayed sweep says how it was made: the synthesised ones so, the H200's as measured (2026-12-04).
    assert all(r["how"].lower().startswith(("synthesised", "measured on ")) for r in replays)
    assert any(r["how"].startswith("measured on NVIDIA H200") for r in replays), [r["how"] for r in replays]


def test_cpu_selfcheck_writes_a_markdown_table(cpu_run) -> None:
    _, out = cpu_run
    text = (out / "results.md").read_text()
    # A CPU run names the card whose sizes it assumed, not a GPU it never saw.
    assert text.startswith("# iotrace self-check — no GPU: sizes of h100-sxm (NVIDIA H100 80GB HBM3) assumed (cpu, "
                           "quick)") and "Overall: ok" in text
    for number, name in enumerate(STEPS, 1):
        assert f"## {number}. {name} —" in text
    header = next(line for line in text.splitlines() if line.startswith("| kernel | preset |"))
    assert "| correct |" in header
    kernel_lines = [line for line in text.splitlines() if line.startswith("| attention-decode-int8 |")]
    assert len(kernel_lines) == 1
    correct = header.split(" | ").index("correct")
    assert kernel_lines[0].split(" | ")[correct] == "True"


@pytest.mark.parametrize(("mode", "title"), [
    ("cpu", "iotrace self-check — no GPU: sizes of h100-sxm (NVIDIA H100 80GB HBM3) assumed (cpu, quick)"),
    ("gpu", "iotrace self-check — NVIDIA H200 (gpu, quick)")])
def test_the_titles_name_the_gpu_or_the_card_assumed(mode: str, title: str) -> None:
    import io

    from iotrace.render.console import make_console, print_selfcheck
    from iotrace.selfcheck.markdown import render
    from iotrace.selfcheck.record import SelfcheckResult

    env = {"card": "h100-sxm", "card_name": "NVIDIA H100 80GB HBM3", **({"device": "NVIDIA H200"} if mode == "gpu"
                                                                        else {})}
    result = SelfcheckResult(mode, True, env, [])
    assert render(result).splitlines()[0] == f"# {title}"
    screen = make_console(file=io.StringIO(), record=True)
    print_selfcheck(screen, result, Path("out"))
    on = title.removeprefix("iotrace self-check — ").rsplit(" (", 1)[0]
    # rich wraps a title to its table's width: compare the words
    assert f"iotrace self-check ({mode}, quick) on {on}" in " ".join(screen.export_text().split())


def test_selfcheck_bad_input(tmp_path: Path) -> None:
    done = run_cli("selfcheck", str(tmp_path), "--cpu", "--budget", "0")
    assert done.returncode == 2 and "--budget 0 s leaves no time" in done.stderr
    done = run_cli("selfcheck", str(tmp_path), env={"TRITON_INTERPRET": "1"})
    assert done.returncode == 2 and "no GPU is visible" in done.stderr and "--cpu" in done.stderr


@pytest.mark.parametrize(("where", "says"), [("results", "exists and is not a folder"),
                                             ("/proc/nope", "cannot be made (No such file or directory)"),
                                             ("results/sub", "cannot be made (Not a directory)")],
                         ids=["a-file", "under-proc", "under-a-file"])
def test_an_out_that_cannot_be_a_folder_is_refused_before_any_step(where: str, says: str, tmp_path: Path) -> None:
    """OUT that is a file, or a folder that cannot be made, is one line and exit 2 at once (it was a FileExistsError
    or FileNotFoundError traceback)."""
    (tmp_path / "results").write_text("a file, not a folder")
    out = tmp_path / where  # an absolute `where` replaces tmp_path
    done = run_cli("selfcheck", str(out), "--cpu", "--quick")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip() == done.stderr.strip().splitlines()[0]  # one line
    assert done.stderr.startswith(f"iotrace: error: OUT {out} {says} — give a folder"), done.stderr


@pytest.mark.parametrize("mode", ["ok", "counters"])
def test_profiler_step_with_stand_in_tools(mode: str, tmp_path: Path, corpus: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 5 as a GPU run takes it, with stand-in nsys/ncu first on PATH (they check their argv and hand back real
    corpus exports): the ncu export is loaded back and iotrace's occupancy agrees with ncu's on both kernels; a
    tool that refuses its counters is recorded as the reason, not a failure."""
    from iotrace.plugins import kernel
    from iotrace.selfcheck.profiler_checks import capture_all
    from iotrace.selfcheck.record import Step
    from tests.test_profilers_standins import calls, install

    for key, value in {**install(tmp_path / "bin", corpus), "TRITON_INTERPRET": "0", "STANDIN_MODE": mode}.items():
        monkeypatch.setenv(key, value)
    step = capture_all(Step("profilers"), [kernel("gemm")], tmp_path / "out", "h100-sxm", quick=True,
                       out_of_time=lambda: False)
    tools = [c["tool"] for c in calls(tmp_path / "bin")]
    if mode == "counters":
        assert step.status == "ok" and "ERR_NVGPUCTRPERM" in step.reason, step
        assert step.rows[0]["status"] == "not captured" and step.rows[1]["status"] == "ok"
        return
    assert step.status == "ok" and step.reason == "", step
    assert "ncu" in tools and "nsys" in tools
    ncu_row, nsys_row = step.rows
    assert (ncu_row["tool"], ncu_row["status"], nsys_row["tool"], nsys_row["status"]) == ("ncu", "ok", "nsys", "ok")
    assert [r["agree"] for r in ncu_row["occupancy"]] == [True, True]  # the GTX 1660 SUPER report's two kernels
    assert Path(ncu_row["manifest"]).is_file() and step.figures["occupancy_mismatches_vs_ncu"] == 0


def test_the_measured_ceilings_are_read_against_the_cost_models_table() -> None:
    """The H200 self-check of 2026-12-04 (bench/recorded/, as it came back): the copy reached 87.0% of the 4,800 GB/s
    datasheet, the share iotrace/ceilings.py divides by; the --quick 4096³ matmul 72.8% of the dense peak, under the
    80% of 8192³ the table rests on, and the row says so."""
    from iotrace.cards import lookup
    from iotrace.selfcheck.ceilings import against_table

    record = json.loads((Path(__file__).resolve().parents[1] / "bench/recorded/h200-2026-12-04-selfcheck.json")
                        .read_text())
    figures = record["steps"][0]["figures"]
    copy, matmul = against_table(figures, lookup(record["environment"]["card"]))
    assert (copy["measured"], copy["datasheet"], copy["share_of_datasheet"], copy["cost_model_share"]) == (
        4176.8, 4800, 0.870, 0.87)
    assert matmul["share_of_datasheet"] == pytest.approx(720.1 / 989.4, abs=1e-3) and matmul["cost_model_share"] == 0.8
    assert "4096³ (--quick), below the 8192³" in matmul["note"] and "note" not in copy
    assert "stand-in" not in copy["cost_model_basis"]  # Hopper is measured
    [a100] = [r for r in against_table(figures, lookup("a100")) if r["ceiling"].startswith("copy")]
    assert a100["cost_model_basis"].startswith("stand-in (measured on an H200")
