"""The model a trace ran, for its walls (:class:`iotrace.trace.reports.step_report.StepModel`), from what a user has:
a models.toml key, a GGUF, a Hugging Face config.json, plain numbers, or the manifest ``iotrace bench --profile`` keeps
beside its traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError
from iotrace.trace.reports.step_report import Machine, StepModel, StepOptions, machine_of

__all__ = ["MANIFEST", "from_gguf", "from_hf_config", "from_key", "from_manifest", "from_numbers", "step_options"]

#: The manifest ``iotrace bench --profile`` keeps beside its traces (iotrace.engines.profiling.MANIFEST).
MANIFEST = "manifest.json"

#: Bytes per value of the KV cache where nothing says: fp16/bf16, vLLM's and llama.cpp's default cache dtype.
DEFAULT_KV_BYTES = 2.0
#: config.json's torch_dtype -> bytes per weight.
_DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "float8_e4m3fn": 1.0}


def _bytes(bits: float | None, default: float, what: str) -> float:
    if bits is None:
        return default
    if not bits > 0:
        raise InvalidValueError(f"--bits {bits:g} must be positive", f"give the bits per weight of {what}")
    return bits / 8.0


def from_key(key: str, bits: float | None, active_params: float | None = None) -> StepModel:
    """A models.toml shape (``iotrace math --model`` keys), at ``bits`` per weight (16 where not given)."""
    from iotrace.model_shapes import model

    shape = model(key)
    q = _bytes(bits, 2.0, shape.name)
    return StepModel(shape.name, shape.params, q, f"models.toml: {shape.source}", active_params, shape.layers,
                     shape.kv_heads, shape.head_dim, shape.hidden, DEFAULT_KV_BYTES)


def from_gguf(path: Path, bits: float | None, active_params: float | None = None) -> StepModel:
    """A GGUF's shape, and its bytes per weight as stored (its tensors' bytes over their elements) unless ``bits``."""
    from iotrace.model.gguf_file import open_gguf

    gguf = open_gguf(path)
    config = gguf.config
    stored = sum(int(t.n_bytes) for t in gguf.tensors.values())
    elements = sum(int(t.n_elements) for t in gguf.tensors.values())
    q = _bytes(bits, stored / elements if elements else 2.0, str(path))
    return StepModel(config.name or path.stem, float(config.params), q, f"{path} ({gguf.file_type})", active_params,
                     config.layers, config.kv_heads, config.head_dim, config.hidden, DEFAULT_KV_BYTES)


def from_hf_config(folder: Path, bits: float | None, active_params: float | None = None) -> StepModel:
    """A Hugging Face folder's config.json (a Llama-shaped decoder), at its torch_dtype unless ``bits``."""
    path = folder / "config.json" if folder.is_dir() else folder
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"{path}: not a readable config.json ({exc})",
                                "give the model's Hugging Face folder (it holds config.json)") from None
    try:
        layers, hidden = int(config["num_hidden_layers"]), int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads", heads))
        head_dim = int(config.get("head_dim") or hidden // heads)
        intermediate, vocab = int(config["intermediate_size"]), int(config["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidValueError(f"{path}: no decoder shape in it ({exc} missing or not a number)",
                                "give a Llama-shaped model's config.json, or --params N --bits Q") from None
    qkv = (heads + 2 * kv_heads) * head_dim * hidden
    per_layer = qkv + heads * head_dim * hidden + 3 * hidden * intermediate + 2 * hidden
    tied = bool(config.get("tie_word_embeddings", False))
    params = vocab * hidden + layers * per_layer + hidden + (0 if tied else vocab * hidden)
    q = _bytes(bits, _DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype")), 2.0), str(path))
    return StepModel(str(config.get("_name_or_path") or folder.name), float(params), q, str(path), active_params,
                     layers, kv_heads, head_dim, hidden, DEFAULT_KV_BYTES)


def from_numbers(params: float, bits: float | None, active_params: float | None = None) -> StepModel:
    """``--params N --bits Q``: the wall without the KV cache's shape (identity 1 alone)."""
    if bits is None:
        raise InvalidValueError("--params needs --bits (the bits per weight as the engine reads them)",
                                "give --bits 16 for bf16 weights, 4.5 for Q4_0, ...")
    return StepModel(f"{params:.3g}-parameter model", params, _bytes(bits, 2.0, "the model"), "--params/--bits",
                     active_params)


def from_manifest(path: Path, trace: str | None = None) -> tuple[StepModel | None, float | None, str]:
    """The model and the machine's bandwidth (B/s) ``iotrace bench --profile`` saved in ``manifest.json`` beside its
    traces, with where they came from: the wall of the engine whose trace is named ``trace`` (``engines.<engine>``:
    each engine reads its weights at its own width), else the manifest's ``wall``; (None, None, "") where the file
    holds none."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None, ""
    if not isinstance(document, dict):
        return None, None, ""
    engines = document.get("engines") if isinstance(document.get("engines"), dict) else {}
    mine = [e.get("wall") for e in engines.values() if isinstance(e, dict) and trace and e.get("trace") == trace]
    wall = mine[0] if mine and isinstance(mine[0], dict) else document.get("wall")
    if not isinstance(wall, dict) or not wall.get("params") or not wall.get("bytes_per_weight"):
        return None, None, ""
    model = StepModel(str(wall.get("name") or "the bench's model"), float(wall["params"]),
                      float(wall["bytes_per_weight"]), f"{path}", None, wall.get("layers"), wall.get("kv_heads"),
                      wall.get("head_dim"), wall.get("hidden"), wall.get("kv_bytes_per_value"))
    bandwidth = wall.get("bandwidth_bytes_per_s")
    return model, float(bandwidth) if bandwidth else None, str(wall.get("bandwidth_source") or path)


def step_options(tables: Any, trace: Path, *, model: StepModel | None = None, card: str | None = None,
                 bandwidth_gbs: float | None = None, tp: int | None = None, pattern: str | None = None,
                 batch: int | None = None) -> StepOptions:
    """What the step report of ``trace`` (loaded as ``tables``) is given: the model given, else the one the bench
    manifest beside the trace saved for it; the machine from ``--bandwidth``, else the trace's card (or ``card``),
    else, for a CPU trace, the copy-loop bandwidth that manifest saved."""
    manifest = trace.parent / MANIFEST
    saved, saved_bandwidth, saved_source = (from_manifest(manifest, trace.name) if manifest.is_file()
                                            else (None, None, ""))
    machine = machine_of(tables, card, bandwidth_gbs, tp)
    if bandwidth_gbs is None and saved_bandwidth is not None and (machine is None or not tables.rows("kernels")):
        machine = Machine(saved_bandwidth, f"copy loop in {saved_source}", None, "", machine.tp if machine else 1,
                          measured=True)
    return StepOptions(pattern, model or saved, machine, batch)
