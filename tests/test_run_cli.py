"""`iotrace run` and `iotrace kernels` on the CPU (interpreter + static analysis): in process, sharing the worker's
imports and compiled kernels, but for one real subprocess each of `run` (human output, a bad input) and `kernels`."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

import pytest

from tests.conftest import CLI_ENV, run_cli

# make test-fast leaves these out: each test runs `iotrace run` under the Triton interpreter.
pytestmark = pytest.mark.slow


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``iotrace ARGS`` in this process (conftest's cli_in_process, with ``env``): (exit code, stdout, stderr);
    argparse's own errors exit 2 as in a process."""
    from iotrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {**CLI_ENV, **(env or {})}), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _run_json(*args: str) -> dict:
    code, out, err = _cli("run", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_run_gemm_reports_everything_on_h100() -> None:
    out = _run_json("gemm", "--card", "h100", "--shape", "M=97,N=83,K=71,bias=1", "--seed", "3")
    for key in ("registers", "shared_mem_bytes", "spills", "occupancy_pct", "limiters", "flops", "bytes",
                "roofline_floor_us", "correct", "max_abs_err"):
        assert key in out, key
    assert out["correct"] is True and out["mode"] == "interpreter" and out["time_us"] is None
    assert out["flops"] == 2 * 97 * 83 * 71 + 97 * 83
    # H100 SXM: 3350 GB/s; this shape is memory-bound, so the floor is bytes / bandwidth.
    assert out["roofline_floor_us"] == pytest.approx(out["bytes"] / 3350e9 * 1e6)
    assert out["resources"][0]["target"] == "sm_90" and out["resources"][0]["kind"] == "static"
    assert out["cost"]["kind"] == "modelled" and out["timing"] is None
    assert 0 < out["occupancy_pct"] <= 100 and out["limiters"]


@pytest.mark.parametrize("card", ["a100", "a10g", "rtx4090", "h100"])
def test_run_rmsnorm_preset_on_each_target(card: str) -> None:
    out = _run_json("rmsnorm", "--preset", "llama-3-8b-prefill-2k-residual", "--dtype", "bf16", "--card", card)
    assert out["shape"] == {"rows": 2048, "hidden": 4096, "residual": 1}
    assert out["correct"] is True and "reduced shape" in out["check"]["note"]
    assert out["check"]["shape"]["rows"] < 2048
    assert out["bound"] == "memory" and out["registers"] > 0


def test_run_cuda_backend_on_cpu_reports_resources_and_why_no_check() -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed: CUDA C++ resources need it")
    out = _run_json("rmsnorm", "--backend", "cuda", "--card", "h100", "--shape", "rows=64,hidden=4096")
    assert out["correct"] is None and "needs a GPU" in out["check"]["note"] and out["mode"] == "static"
    assert out["resources"][0]["compiler"].startswith("nvcc") and out["registers"] > 0


@pytest.mark.parametrize(("kernel", "preset"), [("attention-prefill", "llama-3-8b-prefill-2k-b8-varlen"),
                                                ("attention-decode", "llama-3-8b-ctx8k-b32-varlen"),
                                                ("draft-verify", "llama-3-b64-g4"),
                                                ("attention-decode-int8", "llama-3-8b-ctx8k-b32-paged")])
def test_run_attention_presets(kernel: str, preset: str) -> None:
    out = _run_json(kernel, "--preset", preset, "--dtype", "fp32" if kernel == "draft-verify" else "bf16",
                    "--card", "h200")
    assert out["correct"] is True and out["resources"][0]["target"] == "sm_90"
    assert out["bound"] == ("compute" if kernel.endswith("prefill") else "memory")
    if kernel == "draft-verify":
        assert out["dtype"] == "fp32" and out["check"]["shape"]["vocab"] < 128256
    if kernel == "attention-decode-int8":  # quality against the unquantised cache rides along with the check
        assert out["check"]["quality"]["cosine"] > 0.999


def test_run_accepts_a_config_inside_the_space() -> None:
    out = _run_json("gemm", "--card", "h100", "--preset", "square-4096", "--config",
                    "BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,GROUP_M=4,USE_TMA=1,num_stages=2")
    assert out["config"]["USE_TMA"] is True and out["config"]["GROUP_M"] == 4 and out["correct"] is True
    assert out["resources"][0]["kernel"] == "_gemm_tma_kernel"
    # The preset is checked on a reduced shape whose N and K stay 16-byte aligned for the descriptors.
    assert out["check"]["shape"]["K"] % 16 == 0 and out["check"]["shape"]["N"] % 16 == 0


def test_run_human_output_labels_its_numbers() -> None:
    result = run_cli("run", "rmsnorm", "--card", "a10g")
    assert result.returncode == 0, result.stderr
    for label in ("correct", "(modelled)", "(static", "interpreter"):
        assert label in result.stdout


def test_kernels_lists_builtins() -> None:
    result = run_cli("kernels", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"gemm", "rmsnorm", "attention-prefill", "attention-decode", "draft-verify",
            "attention-decode-int8"} <= set(rows)
    assert rows["rmsnorm"]["backends"] == ["triton", "cuda"] and rows["rmsnorm"]["space_size"]["cuda"] == 5
    assert "llama-3-8b-qkv-prefill-2k" in rows["gemm"]["presets"] and rows["gemm"]["space_size"]["triton"] > 100


BAD = [
    (["run", "matmul", "--card", "h100"], "no kernel called 'matmul'"),
    (["run", "gemm", "--card", "h100", "--preset", "llama-9"], "gemm has no preset 'llama-9'"),
    (["run", "gemm", "--card", "h100", "--dtype", "fp64"], "does not support dtype 'fp64'"),
    (["run", "gemm", "--card", "t4", "--dtype", "fp8e4m3"], "has no fp8 tensor cores"),
    (["run", "gemm", "--card", "h100", "--shape", "M=4,N=4"], "lacks K"),
    (["run", "gemm", "--card", "h100", "--shape", "M=4,N=4,K=0"], "K=0 must be"),
    (["run", "gemm", "--card", "h100", "--shape", "M4"], "'M4' is not KEY=VALUE"),
    (["run", "gemm", "--card", "h100", "--config", "BLOCK_Q=4"], "gemm has no tuning parameter BLOCK_Q"),
    (["run", "gemm", "--card", "h100", "--config", "BLOCK_M=0"], "gemm BLOCK_M=0 is not valid for this shape"),
    (["run", "gemm", "--card", "h100", "--config", "BLOCK_M=3"], "gemm BLOCK_M=3 is not valid"),
    (["run", "gemm", "--card", "h100", "--config", "GROUP_M=0"], "gemm GROUP_M=0 is not valid"),
    (["run", "gemm", "--card", "h100", "--config", "USE_TMA=5"], "gemm USE_TMA=5 is not valid"),
    (["run", "gemm", "--card", "a100", "--preset", "square-4096", "--config", "USE_TMA=1"],
     "gemm USE_TMA=True is not valid for this shape on NVIDIA A100"),
    (["run", "gemm", "--card", "h100", "--config", "USE_TMA=1"], "gemm USE_TMA=True is not valid for this shape"),
    (["run", "gemm", "--card", "h100", "--config", "num_warps=64"], "gemm num_warps=64 is not valid"),
    (["run", "rmsnorm", "--card", "h100", "--backend", "cuda", "--config", "BLOCK_THREADS=48"],
     "rmsnorm BLOCK_THREADS=48 is not valid"),
    (["run", "gemm", "--card", "h100", "--shape", "M=64,M=32,N=4,K=4"], "M is given twice"),
    (["run", "gemm", "--card", "a10g", "--preset", "square-4096", "--config",
      "BLOCK_M=256,BLOCK_N=128,BLOCK_K=128,num_stages=5"],
     "cannot launch on NVIDIA A10G"),
    (["run", "gemm", "--card", "h100", "--backend", "cuda"], "gemm has no 'cuda' backend"),
    (["run", "rmsnorm", "--card", "h100", "--shape", "rows=2,hidden=70000"], "exceeds the Triton kernel's 65536"),
    (["run", "gemm"], "no GPU found"),
    (["run", "attention-prefill", "--card", "h100", "--shape",
      "batch=1,heads=6,kv_heads=4,head_dim=64,seqlen=64"], "6 query heads are not a multiple of 4 KV heads"),
    (["run", "attention-decode", "--card", "h100", "--shape", "batch=1,heads=8,kv_heads=8,head_dim=80,context=64"],
     "head_dim=80 is not supported"),
    (["run", "attention-decode", "--card", "h100", "--dtype", "fp8e4m3"], "does not support dtype 'fp8e4m3'"),
    (["run", "attention-prefill", "--card", "h100", "--shape", "batch=1,heads=8,kv_heads=8,head_dim=64"],
     "lacks seqlen"),
]


@pytest.mark.parametrize(("args", "expected"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_run_bad_input(args: list[str], expected: str) -> None:
    if args == BAD[0][0]:  # one through a real process: its exit code and its stderr
        result = run_cli(*args, env={"IOTRACE_CARD": ""})
        code, out, err = result.returncode, result.stdout, result.stderr
    else:
        code, out, err = _cli(*args, env={"IOTRACE_CARD": ""})
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err


#: A hang guard, not a speed check (docs/contributing: the suite must pass on a loaded machine): each of these bad
#: inputs is refused in about 2 s on two cores, where it used to run a compile or the interpreter for 20 s to minutes.
HANG_GUARD_S = 20


@pytest.mark.parametrize(("args", "says"), [
    (["run", "gemm", "--shape", "M=1e9,N=1e9,K=1e9", "--card", "h100"],
     "gemm at M=1000000000,N=1000000000,K=1000000000,bias=0 (fp16) needs 6e18 B of operands in device memory, more "
     "than the 8.59e10 B (80 GiB) of NVIDIA H100 80GB HBM3 — give a smaller shape"),
    (["run", "rmsnorm", "--shape", "rows=3e9,hidden=1", "--card", "h100"],
     "rmsnorm: _rmsnorm_kernel's grid 3000000000 × 1 × 1 has 3000000000 blocks along x, over CUDA's limit of "
     "2147483647"),
], ids=["operands-over-memory", "grid-over-limit"])
def test_a_shape_no_card_can_hold_or_launch_is_refused_at_once(args: list[str], says: str) -> None:
    """6e18 bytes of GEMM operands on an 80 GB card were reported "correct" (checked on a reduced shape), and a grid
    of 3e9 blocks compiled and ran: now one line naming the bytes against the card's memory, or the grid against
    CUDA's limit, exit 2, before any compile or interpreted check."""
    started = time.monotonic()
    done = run_cli(*args)
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith(f"iotrace: error: {says}"), line
    assert elapsed < HANG_GUARD_S, f"{elapsed:.1f} s"


def test_a_config_over_the_shared_memory_limit_is_refused_before_ptxas(tmp_path) -> None:
    """256 x 256 x 128 tiles over 4 warps on an RTX 3090 (99 KiB of shared memory a block): refused with the same
    occupancy line as before, but the compile stops once Triton knows the block's shared memory (its LLVM IR), before
    PTX and ptxas, which spill such a tile (128 KiB of shared memory, 60 KB of spills a thread): the run took 21 s, the
    compile alone 13 s where the stopped one takes 4 s. A fresh compile cache, so it compiles here."""
    started = time.monotonic()
    done = run_cli("run", "gemm", "--card", "rtx3090", "--config", "BLOCK_M=256,BLOCK_N=256,BLOCK_K=128,num_stages=5",
                   env={"IOTRACE_CACHE_DIR": str(tmp_path)})
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "cannot launch on NVIDIA GeForce RTX 3090: " in line, line
    assert "bytes of shared memory per block exceed the opt-in limit of 101376 bytes per block on CC 8.6" in line
    # A hang guard with room for a compile worker's start (torch and Triton imported) on a loaded machine; the full
    # compile took minutes.
    assert elapsed < 45, f"{elapsed:.1f} s"
    assert not any(tmp_path.rglob("*.json")), "a stopped compile is no unit's resources: nothing is cached"
