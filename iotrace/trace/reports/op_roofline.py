"""Op-level rooflines from a plain PyTorch profiler trace: FLOPs and bytes of each GEMM, attention and RMSNorm op from
its recorded input shapes (``record_shapes=True``), its kernels' time, and achieved against attainable on the card.

The cost of an op is the cost model of the iotrace kernel plugin that does the same work, so the formula is the one
``iotrace kernels`` states: ``gemm`` for ``aten::mm``/``addmm``/``bmm``/``baddbmm``/``matmul``/``linear`` (a batch is
that many GEMMs), ``attention-prefill`` for scaled-dot-product attention with queries as long as keys, ``rmsnorm`` for
``aten::rms_norm``. An op's kernels are those launched while it was the innermost shaped op on the launching thread
(``kernels.op_id``), so a wrapper (``linear`` around ``addmm``) is not counted twice: the kernels belong to the inner
op. Attainable is identity 4 on the card's dense peak for the op's dtype (fp32 on CUDA cores, as torch runs fp32
matmuls without TF32 by default: ``torch.backends.cuda.matmul.allow_tf32`` is False since PyTorch 1.12) and its DRAM
bandwidth; below 60% of it an op is latency bound, as in the kernel roofline.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from iotrace.trace.reports.plugin_costs import KernelModel
from iotrace.trace.reports.roofline import LATENCY_PCT

if TYPE_CHECKING:
    import pandas as pd

    from iotrace.cards import Card
    from iotrace.trace.tables import TraceTables

__all__ = ["OP_COLUMNS", "op_cost", "op_rooflines"]

#: PyTorch's scalar type names as the profiler writes them ("Input type"), to iotrace dtypes.
TORCH_DTYPES = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16"}
#: The CardBook peak an op of each dtype runs against (tensor cores for 16-bit; CUDA cores for fp32, see above).
PEAKS = {"fp32": "fp32", "fp16": "fp16_tensor", "bf16": "bf16_tensor"}
GEMMS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"})
ATTENTION = frozenset({"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                       "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention"})
NORMS = frozenset({"aten::rms_norm", "aten::_fused_rms_norm"})
OP_COLUMNS = ["op", "shapes", "dtype", "plugin", "calls", "kernels", "kernel_ns", "flops", "bytes", "intensity",
              "achieved_flop_per_s", "attainable_flop_per_s", "pct_of_attainable", "bound", "formula"]


def _dims(dims: Any) -> list[list[int]] | None:
    if not isinstance(dims, list) or not all(isinstance(d, list) and all(type(x) is int for x in d) for d in dims):
        return None
    return dims


def _gemm_shape(name: str, dims: list[list[int]]) -> tuple[dict[str, int], int] | None:
    """(M, N, K, bias) and the batch count of a GEMM op's inputs, or None for shapes it does not cover."""
    shapes = [d for d in dims if d]
    if name == "aten::mm" and len(shapes) >= 2 and len(shapes[0]) == len(shapes[1]) == 2:
        (m, k), (_, n) = shapes[:2]
        return {"M": m, "N": n, "K": k, "bias": 0}, 1
    if name == "aten::addmm" and len(shapes) >= 3 and len(shapes[1]) == len(shapes[2]) == 2:
        (m, k), (_, n) = shapes[1:3]
        return {"M": m, "N": n, "K": k, "bias": 1}, 1
    if name in ("aten::bmm", "aten::matmul") and len(shapes) >= 2 and len(shapes[0]) == len(shapes[1]) == 3:
        (b, m, k), (_, _, n) = shapes[:2]
        return {"M": m, "N": n, "K": k, "bias": 0}, b
    if name == "aten::matmul" and len(shapes) >= 2 and len(shapes[0]) == len(shapes[1]) == 2:
        (m, k), (_, n) = shapes[:2]
        return {"M": m, "N": n, "K": k, "bias": 0}, 1
    if name == "aten::baddbmm" and len(shapes) >= 3 and len(shapes[1]) == len(shapes[2]) == 3:
        (b, m, k), (_, _, n) = shapes[1:3]
        return {"M": m, "N": n, "K": k, "bias": 1}, b
    if name == "aten::linear" and len(shapes) >= 2 and len(shapes[1]) == 2 and shapes[0]:
        k = shapes[0][-1]
        n, k_w = shapes[1]
        if k_w != k:
            return None
        return {"M": math.prod(shapes[0][:-1]), "N": n, "K": k, "bias": int(len(shapes) > 2)}, 1
    return None


def op_cost(name: str, dims: Any, types: Any) -> KernelModel | None:
    """The cost of one call of op ``name`` with input ``dims`` and ``types`` (as the profiler wrote them), or None
    when no plugin covers the op, its shapes or its dtype. A batched op's cost is all its GEMMs; its ``peak`` is the
    op dtype's (:data:`PEAKS`)."""
    from iotrace.plugins import kernel as plugin_kernel
    from iotrace.plugins.spec import DTYPE_BYTES, Cost

    dims = _dims(dims)
    if dims is None or not isinstance(types, list) or not types:
        return None
    dtype = TORCH_DTYPES.get(types[0]) if isinstance(types[0], str) else None
    if dtype is None:
        return None
    if name in GEMMS:
        found = _gemm_shape(name, dims)
        if found is None:
            return None
        shape, count = found
        plugin = "gemm"
    elif name in ATTENTION:
        if len(dims) < 3 or not all(len(d) == 4 for d in dims[:3]):
            return None
        (b, h, lq, d), (_, hkv, lk, _), _ = dims[:3]
        if lq != lk:
            return None  # the plugin models self-attention (queries as long as keys)
        shape, count, plugin = ({"batch": b, "heads": h, "kv_heads": hkv, "head_dim": d, "seqlen": lq,
                                 "causal": 0, "varlen": 0}, 1, "attention-prefill")
    elif name in NORMS:
        if not dims[0]:
            return None
        shape, count, plugin = ({"rows": math.prod(dims[0][:-1]), "hidden": dims[0][-1], "residual": 0}, 1,
                                "rmsnorm")
    else:
        return None
    spec = plugin_kernel(plugin)
    # A plugin may not run the op's dtype (the gemm plugin has no fp32): its FLOPs do not depend on the dtype and
    # every byte term scales with the element size, so the cost at the plugin's first dtype is rescaled.
    base = dtype if dtype in spec.dtypes else spec.dtypes[0]
    cost = spec.cost(spec.check_shape(shape), base)
    scale = DTYPE_BYTES[dtype] / DTYPE_BYTES[base]
    batch = f"{count} × " if count > 1 else ""
    rescaled = "" if base == dtype else f", bytes at {DTYPE_BYTES[dtype]} B per element ({dtype})"
    return KernelModel(plugin, shape, dtype, Cost(count * cost.flops, count * cost.bytes * scale, PEAKS[dtype],
                                                  f"{batch}{plugin}: {cost.formula}{rescaled}"))


def op_rooflines(tables: TraceTables, card: Card | None) -> pd.DataFrame:
    """One row per distinct (op, input shapes, dtype) the plugins cover: calls, kernels, kernel time, FLOPs and bytes
    of all its calls, intensity, achieved and attainable FLOP/s, % of attainable and the bound; largest kernel time
    first. Without a card (or its peak for the dtype) the attainable columns are missing."""
    import pandas as pd

    ops = tables.ops
    kernels = tables.kernels.dropna(subset=["op_id"])
    if ops.empty or kernels.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    timed = kernels.dropna(subset=["duration_ns"])
    per_op = timed.groupby("op_id")["duration_ns"].agg(["sum", "count"])
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for op_id, name, dims, types in zip(ops["id"], ops["name"], ops["input_dims"], ops["input_types"], strict=True):
        if op_id not in per_op.index:
            continue  # a wrapper whose kernels belong to an inner op, or an op that launched none
        model = op_cost(name, dims, types)
        if model is None:
            continue
        cost = model.cost
        key = (name, str(dims), model.dtype)
        row = groups.setdefault(key, {"op": name, "shapes": str(dims), "dtype": model.dtype, "plugin": model.plugin,
                                      "calls": 0, "kernels": 0, "kernel_ns": 0.0, "flops": 0.0, "bytes": 0.0,
                                      "formula": cost.formula})
        row["calls"] += 1
        row["kernels"] += int(per_op.at[op_id, "count"])
        row["kernel_ns"] += float(per_op.at[op_id, "sum"])
        row["flops"] += cost.flops
        row["bytes"] += cost.bytes
    rows = [_judged(row, card) for row in groups.values()]
    frame = pd.DataFrame(rows, columns=OP_COLUMNS)
    return frame.sort_values("kernel_ns", ascending=False, kind="stable").reset_index(drop=True)


def _judged(row: dict[str, Any], card: Card | None) -> dict[str, Any]:
    """Identity 4 on one op row: intensity, achieved, attainable, % of attainable and the bound."""
    from iotrace import identities as ident

    seconds = row["kernel_ns"] / 1e9
    intensity = row["flops"] / row["bytes"] if row["bytes"] else None
    achieved = row["flops"] / seconds if seconds else None
    attainable = pct = bound = None
    peak_key = PEAKS[row["dtype"]]
    if card is not None and intensity is not None and peak_key in card.peak_tflops \
            and card.memory_bandwidth_gbs is not None:
        peak, bandwidth = card.peak_flop_per_s(peak_key), card.bandwidth_bytes_per_s
        attainable = ident.attainable_flop_per_s(intensity, peak, bandwidth)
        if achieved is not None:
            pct = 100.0 * achieved / attainable
            bound = "latency" if pct < LATENCY_PCT else ident.roofline_bound(intensity, peak, bandwidth)
    return {**row, "intensity": intensity, "achieved_flop_per_s": achieved, "attainable_flop_per_s": attainable,
            "pct_of_attainable": pct, "bound": bound}
