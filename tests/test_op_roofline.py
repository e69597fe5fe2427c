"""Op-level rooflines from PyTorch profiler traces with input shapes: FLOPs and bytes from the plugins' cost models,
kernels joined through the launching call, identity 4 on the trace's card.

The corpus case is checked against the file read with ``json`` (ops, runtime calls and kernels joined by hand); the
wrapper, attention and RMSNorm cases use a small trace written here in Kineto's schema (no corpus trace records
attention or RMSNorm shapes).
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
from pathlib import Path

import pytest

from iotrace.cards import lookup
from iotrace.trace import load
from iotrace.trace.reports.op_roofline import op_rooflines
from tests.conftest import load_corpus, write_kineto

V100 = "kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz"


@functools.cache
def _events(path: Path) -> tuple[list[dict], dict[tuple, list[tuple[float, int]]], dict[int, float]]:
    """The file's cpu ops, its runtime calls (ts, correlation) by (pid, tid) in time order, kernel dur by id."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    calls: dict[tuple, list[tuple[float, int]]] = {}
    for e in events:
        if e.get("cat") == "cuda_runtime":
            calls.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["args"]["correlation"]))
    for listed in calls.values():
        listed.sort()
    kernels = {e["args"]["correlation"]: e["dur"] for e in events if e.get("cat") == "kernel"}
    return [e for e in events if e.get("cat") == "cpu_op"], calls, kernels


def _by_hand(path: Path, name: str, dims: list[list[int]]) -> tuple[int, float]:
    """Calls of op ``name`` with ``dims``, and the summed duration (ns) of the kernels launched inside them."""
    ops, calls, kernels = _events(path)
    mine = [e for e in ops if e["name"] == name and e["args"].get("Input Dims") == dims]
    total = 0.0
    for op in mine:
        listed = calls.get((op["pid"], op["tid"]), [])
        first = bisect.bisect_left(listed, (op["ts"], -1))
        for ts, correlation in listed[first:]:
            if ts > op["ts"] + op["dur"]:
                break
            total += kernels.get(correlation, 0.0)
    return len(mine), total * 1000.0


def test_v100_gemm_ops_are_placed_from_their_shapes_and_their_kernels(corpus: Path) -> None:
    path = corpus / V100
    tables = load_corpus(path)
    rows = op_rooflines(tables, lookup("v100-sxm2-16gb"))
    top = rows.iloc[0]
    assert (top["op"], top["shapes"], top["dtype"], top["plugin"]) == (
        "aten::mm", "[[1024, 1024], [1024, 1705]]", "fp32", "gemm")
    calls, kernel_ns = _by_hand(path, "aten::mm", [[1024, 1024], [1024, 1705]])
    assert (top["calls"], top["kernel_ns"]) == (calls, pytest.approx(kernel_ns))
    assert top["flops"] == calls * 2 * 1024 * 1705 * 1024
    assert top["bytes"] == calls * 4 * (1024 * 1024 + 1024 * 1705 + 1024 * 1705)
    assert top["achieved_flop_per_s"] == pytest.approx(top["flops"] / (kernel_ns / 1e9))
    card = lookup("v100-sxm2-16gb")  # 15.7 TFLOPS fp32, 900 GB/s: intensity 197 is right of the ridge (17.4)
    assert top["attainable_flop_per_s"] == pytest.approx(card.peak_flop_per_s("fp32"))
    assert top["bound"] == "compute" and 60 < top["pct_of_attainable"] < 100
    assert "2·M·N·K" in top["formula"] and "4 B per element" in top["formula"]
    # Each op's calls and kernel time equal the hand join, for every row.
    for row in rows.itertuples():
        assert (row.calls, row.kernel_ns) == pytest.approx(_by_hand(path, row.op, json.loads(row.shapes)))


def _trace(tmp_path: Path) -> Path:
    """One thread: linear (wrapping addmm) in bf16, flash attention and rms_norm, each launching one kernel."""
    events, t = [], 1000
    ops = [("aten::linear", [[8, 4096], [11008, 4096], [11008]], None),
           ("aten::addmm", [[11008], [8, 4096], [4096, 11008], [], []], "gemm_kernel"),
           ("aten::_scaled_dot_product_flash_attention", [[2, 32, 512, 128], [2, 8, 512, 128], [2, 8, 512, 128]],
            "flash_kernel"),
           ("aten::rms_norm", [[16, 4096], [4096]], "rmsnorm_kernel")]
    for i, (name, dims, kernel) in enumerate(ops):
        start = t if name != "aten::addmm" else t - 40  # addmm runs inside linear
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 7, "ts": start, "dur": 30,
                       "args": {"External id": i + 1, "Input Dims": dims,
                                "Input type": ["c10::BFloat16"] * len(dims)}})
        if kernel:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
                           "ts": start + 5, "dur": 3, "args": {"correlation": 100 + i}})
            events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": start + 10,
                           "dur": 20, "args": {"correlation": 100 + i, "device": 0, "stream": 7}})
        t += 50 if name != "aten::linear" else 0
    return write_kineto(tmp_path / "shapes.json", events)


def test_wrapper_attention_and_rmsnorm_ops_from_a_written_trace(tmp_path: Path) -> None:
    tables = load(_trace(tmp_path))
    assert tables.kernels["op_id"].notna().all()
    rows = op_rooflines(tables, lookup("h100")).set_index("op")
    assert "aten::linear" not in rows.index  # its kernel is addmm's: counted once
    gemm = rows.loc["aten::addmm"]
    assert gemm["flops"] == 2 * 8 * 11008 * 4096 + 8 * 11008 and gemm["kernel_ns"] == 20_000
    assert gemm["bytes"] == 2 * (8 * 4096 + 4096 * 11008 + 8 * 11008 + 11008)
    attention = rows.loc["aten::_scaled_dot_product_flash_attention"]
    assert attention["plugin"] == "attention-prefill"
    assert attention["flops"] == 2 * 4 * 512 * 512 * 128 * 32  # QKᵀ and PV, 2 FLOPs per MAC, per batch and head
    norm = rows.loc["aten::rms_norm"]
    assert (norm["plugin"], norm["flops"], norm["bytes"]) == ("rmsnorm", 4 * 16 * 4096, 2 * (2 * 16 * 4096 + 4096))
    h100 = lookup("h100")
    assert gemm["attainable_flop_per_s"] == pytest.approx(min(h100.peak_flop_per_s("bf16_tensor"),
                                                              gemm["intensity"] * h100.bandwidth_bytes_per_s))
