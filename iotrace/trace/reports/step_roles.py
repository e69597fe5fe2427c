"""What each kernel or CPU op does in an inference step, from its name: the rows of the step waterfall.

Roles, in the order a device instant is charged when kernels of several roles overlap (on several streams): a weight
matrix product hides the all-reduce that runs beside it, so communication is charged only where nothing else runs
("communication not hidden under compute"):

- ``gemm``: weight matrix products (GEMM and GEMV): cuBLAS (``sm90_xmma_gemm_*``, ``nvjet_*``, ``ampere_sgemm_*``,
  ``gemv``, ``splitKreduce``), CUTLASS GEMMs, Marlin/Machete, Triton matmuls, llama.cpp's ``mul_mat_vec``/``mul_mat_q``,
  rocBLAS/Tensile ``Cijk_*``, hipBLASLt; on a CPU ``aten::linear``/``mm``/``addmm``/``matmul``/``bmm`` and oneDNN;
- ``attention``: FlashAttention (``flash_fwd``, ``flash::``), FMHA, paged attention, FlashInfer, llama.cpp's
  ``flash_attn_ext``; on a CPU ``scaled_dot_product_attention`` and vLLM's attention ops;
- ``elementwise``: normalisation, rotary embedding, activation, sampling and KV-cache writes (``rms_norm``,
  ``rotary``, ``silu_and_mul``, ``reshape_and_cache``, ``argmax``/``topk``/``softmax``, Inductor's fused pointwise
  ``triton_poi_``/``triton_red_``/``triton_per_`` and ATen's elementwise kernels);
- ``other``: every kernel or op not recognised, shown with its name, never dropped;
- ``copy``: copies and fills (``direct_copy_kernel``, ``CatArrayBatchedCopy``, ``aten::copy_``/``to``/``cat``);
- ``communication``: what the origin table calls a communication library's kernel (:func:`origin.is_communication`:
  NCCL/RCCL, vLLM's custom all-reduce, PyTorch symmetric memory, NVSHMEM, DeepEP, TensorRT-LLM's all-reduce).

Patterns were written from kernel names in the corpus (the vLLM V1 H100 trace: ``sm90_xmma_gemm_bf16bf16_*``,
``flash_fwd_splitkv_kernel``, ``cross_device_reduce_1stage``, ``ncclDevKernel_AllGather_RING_LL``,
``triton_poi_fused_*``) and from the engines' sources (vLLM csrc/, llama.cpp ggml/src/ggml-cuda/).
"""

from __future__ import annotations

import re
from functools import cache

from iotrace.trace.reports.origin import is_communication

__all__ = ["CATEGORIES", "DEVICE_ROLES", "LABELS", "kernel_role", "op_role"]

#: Device roles, highest charge priority first (see the module docstring).
DEVICE_ROLES = ("gemm", "attention", "elementwise", "other", "copy", "communication")
#: Every row of a waterfall: the roles, then the time no kernel (or, on a CPU, no op) ran.
CATEGORIES = (*DEVICE_ROLES, "idle", "host_between")
LABELS = {
    "gemm": "weight matrix products (GEMM/GEMV)",
    "attention": "attention",
    "elementwise": "norm, rotary, activation, sampling, KV writes",
    "other": "other kernels",
    "copy": "copies and fills",
    "communication": "communication not hidden under compute",
    "idle": "device idle inside the step (launch overhead)",
    "host_between": "host between steps (scheduler, sampling, Python)",
}
#: The same rows on a CPU trace, where an "op" runs on the host and the idle time is the framework's.
CPU_LABELS = {**LABELS, "other": "other ops", "idle": "Python and framework time outside any op",
              "communication": "communication"}

_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    # First: names whose words would read as another role. Inductor's fused pointwise/reduction kernels name the ops
    # they fuse ("triton_poi_fused_add_all_reduce_..._embedding" is a masked embedding, not communication); a KV-cache
    # write names the attention backend it writes for ("reshape_and_cache_flash_kernel").
    ("elementwise", r"^triton_(?:poi|red|per)_|reshape_and_cache|concat_and_cache"),
    ("attention", r"flash|fmha|attention|attn|paged_attention|mha_|_fwd_kernel|BatchDecodeWithPagedKVCache"
                  r"|BatchPrefillWith|SinglePrefillWith|SingleDecodeWith|xformers|cudnn_generated_fort_native_sdpa"),
    ("gemm", r"gemm|gemv|xmma|nvjet|cublas|splitKreduce|marlin|machete|mul_mat|mmq|mmvq|matmul|_mm_|Cijk_|wgmma"
             r"|hipblaslt|dot_kernel|ck_tile.*gemm|cutlass.*(?:gemm|Gemm)|triton_tem_fused.*mm|bmm_|fp8_gemm"),
    ("copy", r"direct_copy|copy_kernel|memcpy|memset|fill_kernel|FillFunctor|CatArrayBatched|cat_array"),
    ("elementwise", r"rms_?norm|layer_?norm|norm_kernel|rotary|rope|silu|gelu|act_and_mul|swiglu|mul_and_silu"
                    r"|reshape_and_cache|concat_and_cache|kv_cache|cache_kernel|argmax|topk|top_k|softmax|sampl"
                    r"|multinomial|triton_poi_|triton_red_|triton_per_|elementwise|reduce_kernel|index_select"
                    r"|indexSelect|embedding|gather|scatter|where_kernel|compare|cumsum|sort"),
)
_OP_PATTERNS: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|all_reduce|all_gather|reduce_scatter|broadcast|c10d::|alltoall"),
    ("attention", r"attention|attn|sdpa|paged_attention|flash"),
    ("gemm", r"^aten::(?:linear|mm|addmm|matmul|bmm|baddbmm|_addmm_activation|einsum)$|onednn_mm|mkldnn_linear"
             r"|_linear|gemm|gemv|mul_mat|cutlass_scaled_mm|int8_scaled_mm|_C::\w*mm\b|fused_matmul"),
    ("elementwise", r"norm|rotary|rope|silu|gelu|act_and_mul|swiglu|softmax|argmax|topk|top_k|sampl|multinomial"
                    r"|reshape_and_cache|concat_and_cache|cache|embedding|^aten::(?:add|add_|mul|mul_|sub|div|pow|rsqrt"
                    r"|mean|neg|exp|sigmoid|tanh|sum|max|min|where|gather|index_select|index|cos|sin|sqrt|rsub"
                    r"|masked_fill|masked_fill_|triu|tril|cumsum|sort|argsort|lt|gt|eq|ne|ge|le|clamp|float)$"),
    ("copy", r"^aten::(?:copy_|to|_to_copy|clone|contiguous|cat|stack|fill_|zero_|zeros|empty_like|ones|full"
             r"|index_copy_|index_put_|_index_put_impl_|narrow_copy|new_zeros|new_empty|empty|empty_strided)$"),
)


@cache
def _compiled(which: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    table = _KERNEL_PATTERNS if which == "kernel" else _OP_PATTERNS
    return tuple((role, re.compile(pattern, re.IGNORECASE if which == "kernel" else 0)) for role, pattern in table)


@cache
def kernel_role(name: str) -> str:
    """The role (:data:`DEVICE_ROLES`) of a GPU kernel, from its name; ``other`` where none is recognised."""
    if is_communication(name):  # the origin table's communication libraries (NCCL, custom all-reduce, ...)
        return "communication"
    head = name.split("(", 1)[0] if not name.startswith("void ") else name[5:].split("(", 1)[0]
    for role, pattern in _compiled("kernel"):
        if pattern.search(head):
            return role
    return "other"


@cache
def op_role(name: str) -> str:
    """The role of a CPU op (``aten::linear``, vLLM's ``_C::`` and ``vllm::`` ops), ``other`` where none is
    recognised."""
    for role, pattern in _compiled("op"):
        if pattern.search(name):
            return role
    return "other"
