"""The decoder's tensors: read from a GGUF (dequantised to the run's dtype) or random in a ``models.toml`` shape.

Weights keep the nn.Linear layout (out, in), row-major, which both GEMMs take (the decode GEMM reads rows along K;
the tiled GEMM takes the transposed view). Q, K and V are fused into one (q + 2·kv, hidden) matrix and gate and up
into one (2·ffn, hidden) matrix, so a layer makes one QKV and one gate/up launch (as vLLM's QKVParallelLinear and
MergedColumnParallelLinear do).

Random weights: speed does not depend on weight values, so production shapes are benched with random weights, as
vLLM's ``--load-format dummy`` does; their quality figures are n/a. Before anything is allocated the weights and
the KV cache the run needs are sized with identity 3 against the memory there is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from iotrace.errors import InvalidValueError
from iotrace.model.gguf_file import GGUFModel, LlamaConfig
from iotrace.model_shapes import model as model_shape

__all__ = ["LayerWeights", "LlamaWeights", "check_fits", "from_gguf", "prefill_activation_bytes", "random_config",
           "random_weights"]

#: RoPE base of the Llama 3 family (config.json rope_theta); the other models.toml shapes use 10000 or their own.
_ROPE_THETA = {"llama-3-8b": 500000.0, "llama-3-70b": 500000.0, "mistral-7b": 10000.0, "gemma-2-27b": 10000.0,
               "smollm2-135m": 100000.0}


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


@dataclass
class LlamaWeights:
    config: LlamaConfig
    embed: torch.Tensor
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor
    #: "gguf PATH (Q4_1+Q8_0 dequantised to bf16)" or "random (llama-3-8b shape)"
    source: str
    #: False for random weights: their text and quality figures mean nothing.
    real: bool

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def weight_bytes(self) -> int:
        """Bytes a decode step streams: every layer's matrices and norms, the final norm and the LM head (the
        embedding rows a step gathers are a few kilobytes; a tied head is the embedding, counted once)."""
        tensors = [t for layer in self.layers for t in vars(layer).values()] + [self.norm, self.lm_head]
        return sum(t.numel() * t.element_size() for t in tensors)


def _tensor(gguf: GGUFModel, name: str, dtype: torch.dtype, device: str) -> torch.Tensor:
    array = gguf.tensor(name)
    # F32 tensors come back as read-only views of the memory map; torch wants memory it may write.
    array = array if array.flags.writeable else array.copy()
    return torch.from_numpy(array).to(device=device, dtype=dtype).contiguous()


def from_gguf(gguf: GGUFModel, dtype: torch.dtype, device: str) -> LlamaWeights:
    """Every tensor of a Llama GGUF, dequantised to fp32 by the ``gguf`` package and cast to ``dtype``."""
    c = gguf.config
    layers = []
    for i in range(c.layers):
        def t(name: str, i: int = i) -> torch.Tensor:
            return _tensor(gguf, f"blk.{i}.{name}.weight", dtype, device)

        layers.append(LayerWeights(
            attn_norm=t("attn_norm"), wqkv=torch.cat([t("attn_q"), t("attn_k"), t("attn_v")]).contiguous(),
            wo=t("attn_output"), ffn_norm=t("ffn_norm"),
            w_gate_up=torch.cat([t("ffn_gate"), t("ffn_up")]).contiguous(), w_down=t("ffn_down")))
    embed = _tensor(gguf, "token_embd.weight", dtype, device)
    lm_head = embed if c.tied_embeddings else _tensor(gguf, "output.weight", dtype, device)
    expect = {"wqkv": ((c.heads + 2 * c.kv_heads) * c.head_dim, c.hidden), "w_down": (c.hidden, c.intermediate)}
    for name, shape in expect.items():
        if tuple(getattr(layers[0], name).shape) != shape:
            raise InvalidValueError(f"{gguf.path}: {name} is {tuple(getattr(layers[0], name).shape)}, the metadata "
                                    f"says {shape}", "the file's tensors and metadata disagree: convert it again")
    name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    return LlamaWeights(c, embed, layers, _tensor(gguf, "output_norm.weight", dtype, device), lm_head,
                        f"gguf {Path(gguf.path).name} ({gguf.file_type} dequantised to {name})", real=True)


def random_config(key: str) -> LlamaConfig:
    """A ``models.toml`` shape as a Llama config (Hugging Face row order, so rotate-half RoPE)."""
    m = model_shape(key)
    return LlamaConfig(name=f"{m.name} (random weights)", layers=m.layers, hidden=m.hidden, heads=m.heads,
                       kv_heads=m.kv_heads, head_dim=m.head_dim, intermediate=m.intermediate, vocab=m.vocab,
                       rope_theta=_ROPE_THETA.get(m.key, 10000.0), rms_eps=1e-5, context_length=131072,
                       tied_embeddings=False, rope_interleaved=False)


def random_weights(config: LlamaConfig, dtype: torch.dtype, device: str, seed: int = 0) -> LlamaWeights:
    """Weights of ``config``'s shape, N(0, 1/in) so activations stay O(1) through the layers; norms are ones."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def w(rows: int, cols: int) -> torch.Tensor:
        out = torch.empty(rows, cols, device=device, dtype=dtype)
        return out.normal_(0.0, cols ** -0.5, generator=gen)

    c = config
    ones = torch.ones(c.hidden, device=device, dtype=dtype)
    qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
    layers = [LayerWeights(ones, w(qkv, c.hidden), w(c.hidden, c.heads * c.head_dim), ones,
                           w(2 * c.intermediate, c.hidden), w(c.hidden, c.intermediate)) for _ in range(c.layers)]
    embed = w(c.vocab, c.hidden)
    return LlamaWeights(c, embed, layers, ones, w(c.vocab, c.hidden), f"random ({c.name.split(' (')[0]} shape)",
                        real=False)


def _available_bytes(device: str) -> tuple[float, str]:
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return float(free), "free device memory (torch.cuda.mem_get_info)"
    pages, page = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return float(pages * page), "available host memory"


def prefill_activation_bytes(config: LlamaConfig, rows: int, element_bytes: int) -> float:
    """The largest activations a prefill of ``rows`` tokens holds at once: the residual stream, its norm, the QKV
    product, the attention output, the gate/up product and the SwiGLU output (the last two at 3 · FFN)."""
    qkv = (config.heads + 2 * config.kv_heads) * config.head_dim
    return float(rows) * (3 * config.hidden + qkv + config.heads * config.head_dim + 3 * config.intermediate) \
        * element_bytes


def check_fits(config: LlamaConfig, element_bytes: int, kv_bytes: float, device: str,
               activation_bytes: float = 0.0) -> None:
    """Refuse a run whose weights, KV cache (identity 3) and largest prefill activations, computed before allocating,
    exceed the memory there is; a GGUF run also holds fp32 copies while dequantising, which the 10% headroom covers
    for small models."""
    weights = config.params * element_bytes
    need = weights + kv_bytes + activation_bytes
    have, what = _available_bytes(device)
    if need > 0.9 * have:
        raise InvalidValueError(
            f"{config.name}: weights {weights / 1e9:.1f} GB + KV cache {kv_bytes / 1e9:.1f} GB + prefill activations "
            f"{activation_bytes / 1e9:.1f} GB = {need / 1e9:.1f} GB "
            f"exceeds 90% of the {have / 1e9:.1f} GB of {what}",
            "lower --depth, --batch or --gen-tokens, use --kv int8, or pick a smaller model")
