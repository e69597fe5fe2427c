"""Note 3: one note per built-in kernel. Its cost model, its predicted roofline position and compiled occupancy on an
H100, an H200 and an RTX 3090 (cross-compiled on the CPU, so modelled, not measured), its tuning space and the static
pruning of a slice of it. A GPU run's traces in ``traces/`` are listed as measured when there are any.

The slices keep the rebuild (and the staleness test) to tens of compiles: the full spaces run to hundreds of configs
(``iotrace tune KERNEL --static`` prunes a whole space).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iotrace.derivations import num
from iotrace.notes.document import Note, table

CARDS = ("h100-sxm", "h200-sxm", "rtx3090")
#: Static pruning runs on the RTX 3090: its 100 KB of shared memory per SM is where big tiles stop fitting.
PRUNE_CARD = "rtx3090"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Subject:
    kernel: str
    preset: str
    dtype: str
    fix: dict[str, Any]


#: Note name -> the kernels it covers, each on one preset from a real model and a slice of its space.
NOTES: dict[str, tuple[str, list[Subject]]] = {
    "kernel-gemm": ("Kernel note 3a: tiled GEMM", [
        Subject("gemm", "llama-3-8b-mlp-up-prefill-2k", "bf16",
                {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "USE_TMA": False})]),
    "kernel-attention": ("Kernel note 3b: FlashAttention, prefill and decode", [
        Subject("attention-prefill", "llama-3-8b-prefill-2k", "bf16",
                {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "USE_TMA": False}),
        Subject("attention-decode", "llama-3-8b-ctx8k-b32", "bf16",
                {"BLOCK_N": 128, "NUM_SPLITS": 4, "num_warps": 2})]),
    "kernel-rmsnorm": ("Kernel note 3c: fused RMSNorm", [
        Subject("rmsnorm", "llama-3-8b-prefill-2k-residual", "bf16", {})]),
    "kernel-int8-kv": ("Kernel note 3d: decode over an INT8 KV cache", [
        Subject("attention-decode-int8", "llama-3-8b-ctx8k-b32-paged", "bf16",
                {"BLOCK_N": 128, "NUM_SPLITS": 4, "num_warps": 2})]),
    "kernel-draft-verify": ("Kernel note 3e: speculative draft-verify", [
        Subject("draft-verify", "llama-3-b64-g4", "fp32", {"BLOCK_V": 1024})]),
}


def _shape_text(shape: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in shape.items())


def _config_text(config: dict[str, Any], fixed: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items() if not isinstance(fixed.get(k), (int, bool, str)))


def _roofline_table(spec, shape, dtype) -> str:
    from iotrace.cards import lookup
    from iotrace.runner import roofline_of

    cost = spec.cost(shape, dtype)
    rows = []
    for key in CARDS:
        card = lookup(key)
        roof = roofline_of(cost, card)
        rows.append([card.name, f"{num(roof.peak_flop_per_s / 1e12)} ({roof.peak})",
                     num(roof.bandwidth_bytes_per_s / 1e9), num(roof.ridge), num(roof.intensity), roof.bound,
                     num(roof.floor_us)])
    return table(["card", "peak TFLOP/s", "bandwidth GB/s", "ridge FLOP/B", "I FLOP/B", "bound", "floor µs"], rows)


def _occupancy_table(spec, shape, dtype) -> str:
    from iotrace.cards import lookup
    from iotrace.kernel_call import KernelCall
    from iotrace.runner import static_analysis

    rows = []
    for key in CARDS:
        card = lookup(key)
        config = spec.default_config(shape, dtype, card)
        resources, occ, waves = static_analysis(KernelCall(spec, shape, dtype, card), config)
        main = resources[0]
        rows.append([card.name, main.target, _config_text(config, {}), main.registers, main.shared_mem_bytes,
                     main.spills, f"{num(occ.occupancy_pct)}%", ", ".join(occ.limiters), num(waves)])
    return table(["card", "target", "default config", "registers", "shared B", "spills", "occupancy", "limiter",
                  "waves"], rows)


def _space_text(spec, shape, dtype) -> str:
    from iotrace.cards import lookup

    configs = spec.space(shape, dtype, lookup(PRUNE_CARD))
    values = {k: sorted({c[k] for c in configs if k in c}, key=lambda v: (str(type(v)), v))
              for k in dict.fromkeys(k for c in configs for k in c)}
    return (f"{len(configs)} configs on the {lookup(PRUNE_CARD).name}: "
            + "; ".join(f"`{k}` ∈ {{{', '.join(str(v) for v in vs)}}}" for k, vs in values.items()) + ".")


def _pruning_text(spec, shape, dtype, fix: dict[str, Any]) -> str:
    from iotrace.autotune.space import kernel_space
    from iotrace.autotune.static import rank, static_phase
    from iotrace.cards import lookup
    from iotrace.kernel_call import KernelCall

    card = lookup(PRUNE_CARD)
    configs = kernel_space(spec, shape, dtype, card, fix=fix)
    phase = static_phase(KernelCall(spec, shape, dtype, card), configs)
    entries = phase.entries
    pruned = [e for e in entries if e.pruned]
    ranked = rank(entries)
    slice_text = ", ".join(f"{k}={'/'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in fix.items())
    rows = []
    for position, index in enumerate(ranked[:5], 1):
        e = entries[index]
        rows.append([position, _config_text(e.config, fix), e.main.registers, e.main.shared_mem_bytes, e.spills,
                     f"{num(e.occupancy.occupancy_pct)}%", ", ".join(e.occupancy.limiters),
                     num(e.prediction.time_us), e.prediction.bound])
    major, minor = card.sm_limits.cc
    lines = [f"A slice of it, {slice_text or 'the whole space'}: {len(entries)} configs compiled for sm_{major}{minor} "
             f"({card.name}), **{len(pruned)} pruned** from their compiled resources before any launch (they cannot "
             f"run on this card), {len(ranked)} ranked by the cost model (`iotrace/autotune/cost_model.py`, modelled); "
             "spills are flagged, not pruned. `iotrace tune " + spec.name + " --static` prunes the whole space."]
    if pruned:
        from iotrace.trace.render.markdown import md  # the compiler's words may hold Markdown's special characters

        lines += ["", table(["pruned config", "why"], [[_config_text(e.config, fix), md(e.pruned)] for e in pruned])]
    lines += ["", table(["rank", "config", "registers", "shared B", "spills", "occupancy", "limiter",
                         "predicted µs", "bound"], rows)]
    return "\n".join(lines)


def _traces(kernel: str) -> list[Path]:
    return sorted((ROOT / "traces").glob(f"*{kernel}*")) if (ROOT / "traces").is_dir() else []


def _measured_text(kernel: str) -> str:
    traces = _traces(kernel)
    if not traces:
        return ("No GPU run of this kernel is in `traces/` yet, so every number above is modelled or compiled, none "
                "measured. `iotrace selfcheck` (or `bench/gpu_check.py`) on a GPU records its timings, and "
                "`iotrace run " + kernel + " --ncu` its counters; this note then lists them as measured.")
    return "Measured traces of this kernel (captured by iotrace on a GPU): " + ", ".join(
        f"`traces/{p.name}`" for p in traces) + "."


def inputs(name: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """What the note ``name`` reads beside the code ``iotrace.notes.kernel_notes`` imports, for its measurement cache
    (``iotrace.notes.measured``): its kernels' plugin modules (looked up by name, so no import reaches them), the
    non-Python files beside them (``rmsnorm.cu``), a plugin module outside the package by its sha256, the traces it
    lists, and the ptxas Triton runs (``TRITON_PTXAS_PATH``, as the compile cache's key)."""
    import hashlib
    import os
    import sys

    from iotrace.plugins import kernel
    from iotrace.source_graph import PACKAGE

    modules = sorted({kernel(s.kernel).__module__ for s in NOTES[name][1]})
    files = {Path(str(sys.modules[m].__file__)) for m in modules}
    beside = {p for f in files for p in f.parent.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")}
    outside = {f for f in files if PACKAGE not in f.parents}

    def sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    return tuple(modules), {"files": {p.name: sha(p) for p in sorted(beside | outside)},
                            "traces": [p.name for s in NOTES[name][1] for p in _traces(s.kernel)],
                            "ptxas": os.environ.get("TRITON_PTXAS_PATH", "")}


def build(name: str) -> Note:
    from iotrace.plugins import kernel

    title, subjects = NOTES[name]
    note = Note(name, title, {
        "kernels": ", ".join(f"`{s.kernel}` (`iotrace/kernels/{kernel(s.kernel).__module__.rsplit('.', 1)[-1]}.py`)"
                             for s in subjects),
        "cards": ", ".join(CARDS) + f" (static pruning on {PRUNE_CARD})",
        "kind": "modelled (cost model, roofline) and compiled (Triton cross-compilation on the CPU); not measured"})
    for s in subjects:
        spec = kernel(s.kernel)
        shape = spec.check_shape(spec.presets[s.preset])
        cost = spec.cost(shape, s.dtype)
        prefix = s.kernel
        note.add(f"{prefix}-cost", f"`{s.kernel}`: cost model",
                 f"Preset `{s.preset}` ({_shape_text(shape)}), {s.dtype}: **{num(cost.flops)} FLOPs** and "
                 f"**{num(cost.bytes)} bytes**, I = {num(cost.intensity)} FLOP/B against the `{cost.peak}` peak.",
                 f"    {cost.formula}")
        note.add(f"{prefix}-roofline", f"`{s.kernel}`: where the roofline puts it (modelled)",
                 "Identity 4 with the CardBook's peak and bandwidth: the floor is max(FLOPs / peak, bytes / B).",
                 _roofline_table(spec, shape, s.dtype))
        note.add(f"{prefix}-occupancy", f"`{s.kernel}`: compiled resources and occupancy (default config)",
                 "Triton cross-compiles the kernel's default config for each card's target on the CPU; ptxas "
                 "reports registers, shared memory and spills, and iotrace's calculator (identity 6, checked "
                 "against NVIDIA's `cuda_occupancy.h`) gives the occupancy and what limits it.",
                 _occupancy_table(spec, shape, s.dtype))
        note.add(f"{prefix}-space", f"`{s.kernel}`: tuning space and static pruning",
                 _space_text(spec, shape, s.dtype), _pruning_text(spec, shape, s.dtype, s.fix))
        note.add(f"{prefix}-measured", f"`{s.kernel}`: measured", _measured_text(s.kernel))
    return note
