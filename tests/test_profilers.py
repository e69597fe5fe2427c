"""`iotrace run KERNEL --nsys | --ncu | --cupti` on the CPU: real CLI subprocesses against stand-in profilers.

The stand-ins (tests/test_profilers_standins.py) sit first on PATH, check the argv iotrace gives them and write real
exports from ../shared/corpus. The parent runs with TRITON_INTERPRET=0, which is how a GPU machine runs it; the
stand-in nsys runs the child argv for real under the interpreter, standing in for the GPU.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iotrace.cards import lookup
from iotrace.kernel_call import KernelCall
from iotrace.plugins import kernel
from tests.conftest import load_corpus, run_cli
from tests.test_profilers_standins import NCU_REP, NSYS_SQLITE, calls, install

# make test-fast leaves these out: profiled runs through stand-in nsys/ncu in real subprocesses.
pytestmark = pytest.mark.slow

SHAPE = ["--shape", "M=64,N=64,K=64", "--dtype", "fp16", "--card", "h100", "--seed", "7"]


@pytest.fixture
def standin(tmp_path: Path, corpus: Path):
    """Run the CLI with stand-in profilers first on PATH; returns (run, bin_dir, out_dir)."""
    bin_dir, out = tmp_path / "bin", tmp_path / "traces"
    env = {**install(bin_dir, corpus), "TRITON_INTERPRET": "0"}

    def run(*args: str, mode: str = "ok", **extra: str):
        return run_cli("run", "gemm", *SHAPE, "--out", str(out), *args, env={**env, "STANDIN_MODE": mode, **extra})

    return run, bin_dir, out


def _manifest(out: Path) -> dict:
    found = sorted(out.glob("*.manifest.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def _one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iotrace: error: "), result.stderr
    return lines[0]


# --- end to end -------------------------------------------------------------------------------------------------


def test_nsys_capture_runs_the_child_loads_the_range_and_writes_the_manifest(standin, corpus: Path) -> None:
    run, bin_dir, out = standin
    result = run("--nsys", STANDIN_RUN_CHILD="1")
    assert result.returncode == 0, result.stderr
    assert "36 kernels in iotrace/gemm (of 36)" in result.stdout
    assert "sm80_xmma_fprop_implicit_gemm" in result.stdout  # the report (or the summary) names the kernels

    log = calls(bin_dir)
    profile = next(c for c in log if c["argv"][:1] == ["profile"] and "kernel" in c)
    child = profile["argv"][7:]
    assert "--cuda-graph-trace=node" in profile["argv"][:7]  # a replayed CUDA graph's kernels show as kernels
    assert [c.get("child_exit") for c in log if "child_exit" in c] == [0]  # the child argv really runs

    m = _manifest(out)
    assert m["schema"] == "iotrace.run-manifest/1" and m["status"] == "ok" and m["error"] is None
    assert (m["kernel"], m["dtype"], m["seed"], m["backend"], m["check"]) == ("gemm", "fp16", 7, "triton", True)
    assert m["shape"] == {"M": 64, "N": 64, "K": 64, "bias": 0} and m["config"] and m["range"] == "iotrace/gemm"
    assert m["tool"]["name"] == "nsys" and m["tool"]["version"] == "2024.5.1.113"
    assert m["tool"]["path"] == str(bin_dir / "nsys")
    assert m["argv"]["child"] == child and child[0] == sys.executable
    assert child[1:5] == ["-m", "iotrace", "run", "gemm"]
    for flag, value in (("--seed", "7"), ("--card", "h100"), ("--dtype", "fp16"),
                        ("--shape", "M=64,N=64,K=64,bias=0")):
        assert child[child.index(flag) + 1] == value
    assert [cmd[1] for cmd in m["argv"]["profiler"]] == ["profile", "export"]
    assert m["argv"]["profiler"][0][2] == "--trace=cuda,nvtx"
    assert "--nsys" in m["argv"]["rerun"] and "--seed 7" in m["argv"]["rerun"]
    assert "--nsys" in m["argv"]["parent"]
    assert m["card"] == {"key": "h100-sxm", "name": "NVIDIA H100 80GB HBM3", "cc": "9.0", "origin": "cardbook",
                         "given": "h100"}
    assert m["device"]["driver"] == "550.54.15" and m["device"]["name"] == "NVIDIA GeForce RTX 3090"
    assert m["device"]["cc"] == "8.6"
    assert m["versions"]["torch"] and m["versions"]["triton"] and m["versions"]["iotrace"]
    assert m["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert re.fullmatch(r"[0-9a-f]{40}", m["git"]["commit"]) and isinstance(m["git"]["dirty"], bool)
    assert m["kernels"]["in_range"] == 36 and m["kernels"]["total"] == 36
    for key, suffix in (("capture", ".nsys-rep"), ("export", ".sqlite"), ("log", ".log"), ("manifest", ".json")):
        assert m["paths"][key].endswith(suffix) and Path(m["paths"][key]).is_file(), key
    assert m["started_utc"] <= m["finished_utc"] and m["seconds"] >= 0

    from iotrace.trace import load

    tables = load(m["paths"]["export"])  # the export is the corpus capture plus the child's range
    assert len(tables.kernels) == len(load_corpus(corpus / NSYS_SQLITE).kernels) == 36
    assert "iotrace/gemm" in set(tables.ranges["name"])


def test_ncu_capture_filters_on_the_range_and_reports_stalls(standin) -> None:
    run, _bin_dir, out = standin
    result = run("--ncu", "--clock-control", "none")
    assert result.returncode == 0, result.stderr
    assert "2 kernels in iotrace/gemm (of 2)" in result.stdout
    assert "dot_prod_naive" in result.stdout
    assert "GTX 1660" in result.stdout  # the report (or summary) reads the export's own device, not --card h100

    m = _manifest(out)
    assert m["status"] == "ok" and m["tool"]["name"] == "ncu" and m["tool"]["version"] == "2024.1.1.0"
    assert m["nvtx_filter"] == "iotrace@iotrace\\/gemm/"
    assert m["options"]["clock_control"] == "none" and m["options"]["ncu_set"] == "full"
    assert m["options"]["launch_count"] == 1  # one Triton launch per gemm call
    ncu = m["argv"]["profiler"][0]
    assert ncu[1:3] == ["--set", "full"] and ncu[ncu.index("--clock-control") + 1] == "none"
    assert m["paths"]["capture"] == m["paths"]["export"] and m["paths"]["export"].endswith(".ncu-rep")
    assert m["kernels"]["names"] == ["dot_prod(float *, float *, float *, int)",
                                     "dot_prod_naive(float *, float *, float *, int)"]
    assert "--clock-control none" in m["argv"]["rerun"]


def test_json_prints_the_manifest(standin, corpus: Path) -> None:
    run, _, out = standin
    result = run("--ncu", "--json", "--launch-count", "3", "--ncu-set", "roofline")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == _manifest(out)
    assert printed["options"]["launch_count"] == 3 and printed["options"]["ncu_set"] == "roofline"
    assert printed["kernels"]["in_range"] == 2


# --- errors -----------------------------------------------------------------------------------------------------


def test_counters_not_permitted_says_how_to_enable_them(standin) -> None:
    run, _, out = standin
    line = _one_line_error(run("--ncu", mode="counters"))
    for text in ("ERR_NVGPUCTRPERM", "NVreg_RestrictProfilingToAdminUsers=0", "/etc/modprobe.d/",
                 "https://developer.nvidia.com/ERR_NVGPUCTRPERM", "--cupti"):
        assert text in line, text
    m = _manifest(out)  # a failed capture still leaves its record
    assert m["status"] == "failed" and "ERR_NVGPUCTRPERM" in m["error"]


@pytest.mark.parametrize("mode", ["child-fails", "child-fails-quietly"])
def test_a_failing_child_shows_its_stderr_tail(standin, mode: str) -> None:
    run, bin_dir, out = standin
    line = _one_line_error(run("--nsys", mode=mode))
    assert "the profiled run failed under nsys (exit 1)" in line
    assert re.search(r"(AssertionError|RuntimeError): .*(CUDA|GPU)", line), line
    assert "run the child alone" in line and "-m iotrace run gemm" in line
    assert [c["child_exit"] for c in calls(bin_dir) if "child_exit" in c] == [1]
    m = _manifest(out)
    assert m["status"] == "failed" and m["kernels"]["in_range"] is None and "failed under nsys" in m["error"]
    assert [cmd[1] for cmd in m["argv"]["profiler"]] == ["profile", "export"]  # what was to run, for a rerun by hand
    assert "Torch not compiled with CUDA enabled" in Path(m["paths"]["log"]).read_text() or \
        "CUDA" in Path(m["paths"]["log"]).read_text()


def test_an_nsys_export_without_the_range_is_refused(standin) -> None:
    run, _, out = standin
    line = _one_line_error(run("--nsys", mode="no-range"))
    assert "holds no kernels launched inside the NVTX range iotrace/gemm (36 kernels outside it)" in line
    m = _manifest(out)
    assert m["status"] == "failed" and m["kernels"] == {"in_range": 0, "total": 36, "names": []}


def test_ncu_profiling_nothing_is_refused(standin) -> None:
    run, _, _ = standin
    line = _one_line_error(run("--ncu", mode="no-kernels"))
    assert "ncu profiled no kernels matching --nvtx-include 'iotrace@iotrace\\\\/gemm/'" in line
    assert "No kernels were profiled" in line


def test_a_hanging_profiler_is_stopped_at_the_timeout(standin) -> None:
    run, bin_dir, _ = standin
    started = time.monotonic()
    line = _one_line_error(run("--nsys", "--timeout", "3", mode="slow"))
    assert time.monotonic() - started < 60  # the stand-in and its grandchild sleep 120 s each unless killed
    assert "nsys profile did not finish within 3 s and was stopped" in line and "raise --timeout" in line
    assert any(c.get("hanging") for c in calls(bin_dir))


@pytest.mark.parametrize(("flag", "product", "url"), [("--nsys", "Nsight Systems", "nsight-systems"),
                                                      ("--ncu", "Nsight Compute", "nsight-compute")])
def test_a_missing_tool_is_named_with_where_to_get_it(tmp_path: Path, flag: str, product: str, url: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("run", "gemm", *SHAPE, "--out", str(tmp_path / "traces"), flag,
                     env={"PATH": str(empty), "CUDA_HOME": str(empty), "TRITON_INTERPRET": "0"})
    line = _one_line_error(result)
    assert f"{flag[2:]} ({product}) is not installed" in line
    assert f"https://developer.nvidia.com/{url}" in line and "--cupti" in line
    assert not (tmp_path / "traces").exists()  # nothing was captured, so nothing is written


@pytest.mark.parametrize("flag", ["--nsys", "--ncu"])
def test_no_gpu_is_refused_before_the_tool_runs(standin, flag: str) -> None:
    run, bin_dir, out = standin
    line = _one_line_error(run(flag, TRITON_INTERPRET="1"))
    assert "no GPU" in line and "Triton interpreter" in line
    assert not out.exists() and not [c for c in calls(bin_dir) if c["argv"] != ["--version"]]


@pytest.mark.gpu
def test_cupti_capture_on_the_gpu(tmp_path: Path) -> None:
    result = run_cli("run", "rmsnorm", "--shape", "rows=1024,hidden=4096,residual=0", "--dtype", "fp16", "--seed", "3",
                     "--cupti", "--launches", "5", "--out", str(tmp_path), "--json", env={"TRITON_INTERPRET": "0"})
    assert result.returncode == 0, result.stderr
    m = json.loads(result.stdout)
    assert m["status"] == "ok" and m["tool"]["name"] == "cupti" and m["argv"]["child"] is None
    assert m["kernels"]["in_range"] >= 5 and m["paths"]["export"].endswith(".kineto.json")
    assert all("rmsnorm" in name for name in m["kernels"]["names"]), m["kernels"]["names"]
    assert m["device"]["driver"] and m["versions"]["cuda"]


def test_cupti_needs_a_gpu(tmp_path: Path) -> None:
    line = _one_line_error(run_cli("run", "gemm", *SHAPE, "--out", str(tmp_path), "--cupti"))
    assert "--cupti collects kernel activity from an NVIDIA GPU" in line and "torch.cuda sees no GPU" in line


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "x"], "--out only applies to a profiled run — add --nsys, --ncu or --cupti"),
    (["--nsys", "--clock-control", "none"], "--clock-control is for --ncu, not --nsys"),
    (["--ncu", "--launches", "3"], "--launches is for --cupti, not --ncu"),
])
def test_profiler_options_are_checked(args: list[str], message: str) -> None:
    assert message in _one_line_error(run_cli("run", "gemm", *SHAPE, *args))


def test_two_profilers_at_once_are_refused() -> None:
    result = run_cli("run", "gemm", *SHAPE, "--nsys", "--ncu")
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


# --- the pieces, in process ---------------------------------------------------------------------------------------


def test_the_cli_side_imports_nothing_heavy() -> None:
    # iotrace.cli imports the command module to build its parser on every run, `iotrace cards` included.
    code = ("import sys, iotrace.cli.profile; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton', 'pandas', 'numpy', 'nvtx'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_ncu_filter_escapes_the_slash_in_the_range_name() -> None:
    from iotrace.trace.profilers.ncu import escape, nvtx_filter

    assert nvtx_filter("attention-decode") == "iotrace@iotrace\\/attention-decode/"
    assert escape("a@b,c[d]e/f*g+h\\i") == "a\\@b\\,c\\[d\\]e\\/f\\*g\\+h\\\\i"


def test_child_argv_parses_back_to_the_same_run() -> None:
    from iotrace.cli import build_parser
    from iotrace.trace.profilers.child import RunPlan, child_argv

    plan = RunPlan(KernelCall(kernel("gemm"), {"M": 64, "N": 32, "K": 16, "bias": 1}, "bf16", lookup("a100")),
                   {"BLOCK_M": 64, "USE_TMA": True, "num_warps": 4}, seed=11, check=False, card="a100")
    argv = child_argv(plan, python="/usr/bin/python3")
    assert argv[:5] == ["/usr/bin/python3", "-m", "iotrace", "run", "gemm"]
    args = build_parser().parse_args(argv[3:])
    assert (args.kernel, args.shape, args.dtype, args.config, args.seed, args.card, args.no_check, args.backend) == \
        ("gemm", plan.shape, "bf16", plan.config, 11, "a100", True, "triton")
    assert not (args.nsys or args.ncu or args.cupti)


def test_find_tool_reads_the_version_and_searches_cuda_home(tmp_path: Path, corpus: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from iotrace.trace.profilers.errors import ToolNotFoundError
    from iotrace.trace.profilers.tools import find_tool

    env = install(tmp_path / "cuda" / "bin", corpus)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("STANDIN_LOG", env["STANDIN_LOG"])
    monkeypatch.setenv("STANDIN_CORPUS", env["STANDIN_CORPUS"])
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))  # the toolkit layout: $CUDA_HOME/bin/ncu
    ncu = find_tool("ncu")
    assert (ncu.path, ncu.version) == (str(tmp_path / "cuda" / "bin" / "ncu"), "2024.1.1.0")
    assert "Nsight Compute Command Line Profiler" in ncu.version_text
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nothing"))
    with pytest.raises(ToolNotFoundError, match="nsys \\(Nsight Systems\\) is not installed"):
        find_tool("nsys")


def test_selection_keeps_only_kernels_in_the_range(corpus: Path) -> None:
    from iotrace.trace.profilers.selection import in_range, name_regex

    tables = load_corpus(corpus / NSYS_SQLITE)
    assert in_range(tables, "iotrace/gemm", filtered_by_tool=False).empty
    # A TensorRT range of the same capture: exactly the kernels launched inside it, whatever its depth.
    inside = in_range(tables, "/conv1/Conv + /relu/Relu", filtered_by_tool=False)
    assert len(inside) == 1 and inside["name"].iloc[0].startswith("sm80_xmma_fprop_implicit_gemm_indexed")
    assert len(in_range(tables, "ExecutionContext::execute", filtered_by_tool=False)) == 36
    ncu = load_corpus(corpus / NCU_REP)
    assert len(in_range(ncu, "iotrace/gemm", filtered_by_tool=True)) == 2
    regex = re.compile(name_regex(["dot_prod(float *, float *, float *, int)", "a+b"]))
    assert regex.search("a+b") and not regex.search("aab") and not regex.search("dot_prod_naive(float *)")


def test_report_failure_falls_back_to_the_summary(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from iotrace.cli.profile import _print_report
    from iotrace.trace.profilers.child import RunPlan

    tables = load_corpus(corpus / NCU_REP)
    plan = RunPlan(KernelCall(kernel("gemm"), {"M": 64, "N": 64, "K": 64, "bias": 0}, "fp16", lookup("h100")), {},
                   seed=1)
    _print_report(corpus / "no-such-export.ncu-rep", tables, ["dot_prod"], plan)
    out = capsys.readouterr().out
    assert out.startswith("report unavailable (iotrace: error: ") and "does not exist" in out
    assert "2 kernels (2 launches)" in out and "dot_prod_naive" in out  # iotrace info's summary of the capture


def test_manifest_says_why_when_it_cannot_name_the_commit_or_the_driver(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import iotrace
    from iotrace.trace.profilers.manifest import device_info, git_info

    installed = tmp_path / "site-packages" / "iotrace"
    installed.mkdir(parents=True)
    monkeypatch.setattr(iotrace, "__file__", str(installed / "__init__.py"))
    found = git_info()
    assert found["commit"] is None and "not in a git checkout" in found["note"] and str(installed) in found["note"]
    monkeypatch.setenv("PATH", str(tmp_path))
    device = device_info()
    assert device["driver"] is None and device["note"].startswith("nvidia-smi not found")
