"""The kernel origin table's data: each family's label, which families only run on AMD GPUs or move data between GPUs,
and the name rules :func:`iotrace.trace.reports.origin.classify` tries in order, each with the public source its
pattern was written from. Real names each rule matches are in tests/test_kernel_origin.py, with their corpus file or
public source.

A rule is (family, where, how, pattern, note). where: "head" = the function's qualified name (return type, template
arguments and parameters cut off), "name" = the whole name, "body" = the whole name without a leading ``void``,
"bare" = the whole name when it is one identifier (no parameter list: Triton kernels and extern "C" CUDA kernels).
First rule wins, so a library whose names carry another library's types comes first: the communication libraries
(their kernels live inside FlashInfer's and TensorRT-LLM's namespaces too), ggml-cuda and FlashInfer before
FlashAttention (``flash_attn_ext``), Machete before CUTLASS (it runs in ``cutlass::device_kernel``), FBGEMM before
ATen, ATen before Apex (PyTorch carries copies of Apex's kernels in ``at::native``).
"""

from __future__ import annotations

__all__ = ["AMD_FAMILIES", "COMMUNICATION", "KNOBS", "LABELS", "RULES"]

LABELS = {"cublas": "cuBLAS", "cutlass": "CUTLASS", "cudnn": "cuDNN", "nccl": "NCCL", "aten": "PyTorch ATen",
          "triton": "Triton", "flash-attention": "FlashAttention", "tensorrt": "TensorRT", "thrust-cub": "CUB/Thrust",
          "user": "user CUDA", "tensile": "Tensile (rocBLAS/hipBLASLt)", "composable-kernel": "Composable Kernel",
          "miopen": "MIOpen", "rocclr": "ROCm runtime (ROCclr)",
          "vllm-allreduce": "vLLM custom all-reduce", "trtllm-allreduce": "TensorRT-LLM all-reduce",
          "symm-mem": "PyTorch symmetric memory", "nvshmem": "NVSHMEM", "deepep": "DeepEP",
          "fbgemm": "FBGEMM", "nvfuser": "nvFuser", "flashinfer": "FlashInfer", "apex": "Apex",
          "tensorrt-llm": "TensorRT-LLM", "marlin": "Marlin/Machete", "ggml-cuda": "llama.cpp ggml-cuda",
          "aiter": "AITER", "vllm": "vLLM"}
#: The libraries that run only on AMD GPUs: their advice is AMD's whatever the trace's vocabulary.
AMD_FAMILIES = frozenset({"tensile", "composable-kernel", "miopen", "rocclr", "aiter"})
#: The libraries whose kernels move data between GPUs: their findings are exposed time and overlap, never grid,
#: occupancy, register or stall advice (their blocks wait on the peers by design).
COMMUNICATION = frozenset({"nccl", "vllm-allreduce", "trtllm-allreduce", "symm-mem", "nvshmem", "deepep"})
#: What the author of a Triton or user CUDA kernel tunes; every other family is a library changed through its call.
KNOBS = {"triton": ("BLOCK sizes", "num_warps", "num_stages"),
         "user": ("block size", "launch bounds / maxrregcount", "shared memory tiling")}

RULES: tuple[tuple[str, str, str, str, str], ...] = (
    # ncclKernel_AllReduce_RING_LL_Sum_float (NCCL <= 2.18), ncclDevKernel_AllReduce_Sum_bf16_RING_LL (2.19+); RCCL
    # keeps NCCL's kernel names (ROCm/rccl, src/device/), and its own helpers start rccl (ROCm/rccl, src/misc/).
    ("nccl", "head", "prefix", r"^nccl[A-Za-z]*", ""),
    ("nccl", "head", "prefix", r"^rccl[A-Za-z]*", " (RCCL)"),
    # vLLM's custom all-reduce, vllm::cross_device_reduce_1stage / _2stage (vllm-project/vllm,
    # csrc/custom_all_reduce.cuh); SGLang's sgl-kernel copy keeps the names.
    ("vllm-allreduce", "head", "name", r"(?:^|::)cross_device_reduce_[12]stage\w*$", ""),
    # TensorRT-LLM's all-reduce kernels, tensorrt_llm::kernels::oneShotAllReduceKernel / twoShotAllReduceKernel
    # (NVIDIA/TensorRT-LLM, cpp/tensorrt_llm/kernels/customAllReduceKernels.cu), and FlashInfer's port of its fused
    # ones, flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport (flashinfer-ai/flashinfer,
    # include/flashinfer/comm/): before the TensorRT-LLM and FlashInfer families, whose namespaces they share.
    ("trtllm-allreduce", "head", "name",
     r"^(?:tensorrt_llm|flashinfer)::\S*?(?i:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)", ""),
    # PyTorch symmetric memory's collectives, (anonymous namespace)::multimem_all_reduce_kernel,
    # multimem_one_shot_all_reduce_kernel, multimem_all_gather_kernel, one_shot_all_reduce_kernel,
    # two_shot_all_reduce_kernel(_inplace) (pytorch/pytorch, torch/csrc/distributed/c10d/symm_mem/
    # CUDASymmetricMemoryOps.cu).
    ("symm-mem", "head", "name", r"(?:^|::)(?:multimem_(?:one_shot_)?all_(?:reduce|gather)_kernel"
     r"|(?:one|two)_shot_all_reduce_kernel\w*)$", ""),
    # NVSHMEM: its internal nvshmemi_* kernels (nvshmemi_proxy_rma_entrypoint_blocking) and the *_on_stream kernels
    # of its host collectives, barrier_on_stream_kernel_threadgroup, alltoall_on_stream_kernel, rdxn_on_stream_kernel
    # ... (NVIDIA/nvshmem, src/include/internal/non_abi/nvshmemi_h_to_d_coll_defs.cuh).
    ("nvshmem", "head", "name", r"^nvshmemi?x?_\w+$|(?:^|::)(?:alltoall|barrier|broadcast|fcollect|rdxn"
     r"|reducescatter|sync)(?:_all)?_on_stream_kernel\w*$", ""),
    # DeepEP's expert-parallel dispatch and combine, deep_ep::intranode::dispatch, deep_ep::internode_ll::combine ...
    # (deepseek-ai/DeepEP, csrc/kernels/intranode.cu, internode_ll.cu: namespace deep_ep).
    ("deepep", "head", "namespace", r"(?:^|::)deep_ep::", ""),
    # The ROCm runtime's blit kernels, __amd_rocclr_fillBufferAligned / copyBuffer / ... (ROCm/clr,
    # rocclr/device/blitcl.cpp): hipMemset and hipMemcpy run them; their grid is the runtime's choice.
    ("rocclr", "head", "prefix", r"^__amd_rocclr_\w+", ""),
    # AITER's kernels live in namespace aiter (ROCm/aiter, csrc/): aiter::grouped_topk_kernel, and its assembly
    # kernels mangled as _ZN5aiter... (read by the identifiers they spell).
    ("aiter", "head", "namespace", r"^aiter::", ""),
    # Composable Kernel: ck_tile::kentry<...> (ck_tile, ROCm/composable_kernel include/ck_tile/host/kernel_launch.hpp)
    # and ck::kernel_* (ROCm/composable_kernel include/ck/tensor_operation/gpu/device/); before ATen, which
    # instantiates CK for some of its GEMMs.
    ("composable-kernel", "head", "namespace", r"^(?:ck_tile|ck)::", ""),
    # Tensile's solution names, Cijk_<A><B>_<types>_..._MT64x16x32_MI16x16x1_... (ROCm/Tensile, Tensile/
    # SolutionStructs.py: "Cijk" + the index assignments): rocBLAS's GEMMs, and hipBLASLt's, whose TensileLite
    # (ROCm/hipBLASLt, tensilelite/) names its kernels the same way.
    ("tensile", "head", "prefix", r"^Cijk_[A-Za-z]+", ""),
    # MIOpen's kernels: naive_conv_* (ROCm/MIOpen src/kernels/gpu_reference_kernel/naive_conv.cpp) and MIOpen*
    # (src/kernels/MIOpen*.cl, e.g. MIOpenBatchNormFwdTrainSpatial).
    ("miopen", "head", "prefix", r"^(?:naive_conv_\w+|MIOpen\w*|miopen\w*)", ""),
    # llama.cpp's ggml-cuda (ggml-org/llama.cpp, ggml/src/ggml-cuda/; HIP builds keep the names): its own types in
    # the name (mul_mat_q<(ggml_type)2, ...>, ggml_cuda_mm_fusion_args_device, (mmq_q8_1_ds_layout)1,
    # soft_max_params, rope_corr_dims); its kernels by name (fattn-*.cuh flash_attn_ext_f16 / _vec / tile,
    # flash_attn_combine_results, flash_attn_stream_k_fixup; getrows.cu k_get_rows*; set-rows.cu k_set_rows;
    # binbcast.cu k_bin_bcast; quantize.cu quantize_q8_1, quantize_mmq_q8_1; mmq mul_mat_q, mmvq.cu mul_mat_vec_q);
    # and generic names only with ggml's template arguments (norm.cu rms_norm_f32<1024, ...>, softmax.cu soft_max_f32,
    # rope.cu rope_norm / rope_neox, convert.cu convert_unary, cpy.cu cpy_scalar, unary.cu unary_gated_op_kernel).
    # Before FlashAttention, whose rule reads flash_attn.
    ("ggml-cuda", "name", "contains", r"\(ggml_type\)|ggml_cuda_\w+|mmq_q8_1_ds_layout|soft_max_params"
     r"|rope_corr_dims", ""),
    ("ggml-cuda", "head", "name", r"^(?:flash_attn_(?:ext_\w+|tile\w*|combine_results|stream_k_fixup)"
     r"|k_(?:get|set)_rows\w*|k_bin_bcast\w*|quantize_(?:mmq_)?q8_1|mul_mat_(?:vec_)?q)$", ""),
    ("ggml-cuda", "body", "name", r"^(?:rms_norm_f32|norm_f32|soft_max_f32|rope_(?:norm|neox|multi|vision)"
     r"|convert_unary|cpy_scalar|unary_(?:gated_)?op_kernel)<", ""),
    # FlashInfer: namespace flashinfer (flashinfer-ai/flashinfer, include/flashinfer/: flashinfer::norm::RMSNormKernel,
    # flashinfer::BatchDecodeWithPagedKVCacheKernel, flashinfer::sampling::...), and its CuTe DSL kernels, whose
    # generated names spell the module (kernel_cutlass_kernel_flashinfernormkernels...RMSNormKernel...).
    ("flashinfer", "head", "namespace", r"^flashinfer::", ""),
    ("flashinfer", "name", "contains", r"(?<![A-Za-z0-9])flashinfer", ""),
    # FA2 flash_fwd_kernel / pytorch_flash::, FA3 flash::FlashAttnFwdSm90 inside cutlass::device_kernel, PyTorch's
    # memory-efficient attention fmha_cutlassF_* (xFormers): before CUTLASS, whose types their names carry.
    ("flash-attention", "name", "contains", r"(?:pytorch_)?flash::|FlashAttn|flash_attn", ""),
    ("flash-attention", "head", "prefix", r"^flash_(?:fwd|bwd)\w*|^fmha", ""),
    # TensorRT-LLM's kernels, namespace tensorrt_llm (NVIDIA/TensorRT-LLM, cpp/tensorrt_llm/kernels/): before
    # TensorRT's rules.
    ("tensorrt-llm", "head", "namespace", r"^tensorrt_llm::", ""),
    # TensorRT tactics trt_* / *_trt / cask_trt::, Myelin (__myl_*, __mye*, gemm_mha_v2), its layer kernels and the
    # cuTENSOR it links (the unexpanded CUTENSOR_NAMESPACE macro in the name).
    ("tensorrt", "name", "token", r"(?<![A-Za-z0-9])trt(?![A-Za-z0-9])", ""),
    ("tensorrt", "name", "contains", r"(?i)myelin|__my[le]|gemm_mha_v2|CUTENSOR_NAMESPACE", ""),
    ("tensorrt", "head", "prefix", r"^(?:genericReformat|cu[A-Z]\w*Layer|cuEltwise|cuInt8)::|^generatedNativePointwise",
     ""),
    # Marlin: IST-DASLab/marlin's Marlin<...> (marlin/marlin_cuda_kernel.cu) and vLLM's marlin::Marlin,
    # marlin_moe_wna16::Marlin (vllm-project/vllm, csrc/quantization/gptq_marlin/, csrc/moe/marlin_moe_wna16/);
    # Machete, vLLM's Hopper mixed-input GEMM, runs in cutlass::device_kernel<machete::...> (csrc/quantization/
    # machete/): before cuDNN and CUTLASS.
    ("marlin", "head", "name", r"(?:^|::)Marlin$|^marlin\w*::", ""),
    ("marlin", "name", "contains", r"(?<![A-Za-z0-9_])machete::", " (Machete)"),
    # cuDNN: cudnn::, cask_cudnn, cutlass_cudnn_*, *scudnn* tactics, *_cudnn_infer; its legacy engines; xmma convs.
    ("cudnn", "name", "contains", r"(?i)cudnn", ""),
    ("cudnn", "head", "name", r"^(?:implicit|explicit|precomputed)_convolve_\w+|^(?:wgrad_alg\d+|dgrad\w*)_engine"
     r"|^(?:nchwToNhwc|nhwcToNchw)Kernel", ""),
    ("cudnn", "name", "contains", r"xmma\w*?_(?:fprop|dgrad|wgrad|conv|pooling)|xmma_new::implicit_gemm", ""),
    # cuBLAS/cuBLASLt: nvjet (cuBLASLt's Hopper/Blackwell kernels), sm90_xmma_gemm_*, <arch>_*gemm_*, the gemv/split-K
    # helpers.
    ("cublas", "head", "prefix", r"^nvjet_|^sm\d+_xmma_gemm|^(?:maxwell|pascal|volta|turing|ampere|hopper)_\w*?gemm",
     ""),
    ("cublas", "head", "name", r"^(?:gemv2[TN]_kernel\w*|gemvNSP_kernel|gemmk1_kernel|gemmSN_[NT]{2}_kernel\w*"
     r"|(?:cublasLt::)?splitKreduce_kernel|sgemm_largek_lds\d+)$", ""),
    ("cublas", "name", "name", r"gemvx::kernel", ""),
    ("cublas", "body", "name", r"^(?:dot|scal)_kernel<", ""),
    ("cublas", "name", "contains", r"(?i)cublas", ""),
    ("cutlass", "head", "prefix", r"^cutlass(?:3x_sm\d+|_\d+|::\w+)?", ""),
    ("cutlass", "name", "contains", r"cutlass::(?:Kernel2?|device_kernel)<", ""),
    # CUB also inside ATen (at_cuda_detail::cub::): the head decides, not a template argument.
    ("thrust-cub", "head", "namespace", r"(?:^|::)(?:cub|thrust)::", ""),
    ("thrust-cub", "head", "name", r"^Device(?:Reduce|Scan|RadixSort|Select|Segmented|Histogram|Merge)\w*Kernel", ""),
    # FBGEMM (pytorch/FBGEMM, fbgemm_gpu/): namespace fbgemm_gpu (fbgemm_gpu::permute_2D_data_kernel), the
    # table-batched embedding kernels its codegen writes (split_embedding_codegen_forward_unweighted_kernel,
    # split_embedding_backward_codegen_rowwise_adagrad_*), and its global helpers bounds_check_indices_kernel
    # (codegen/embedding_bounds_check.cu), linearize_index_kernel, permute_pooled_embs_kernel, recat_copy_async_kernel.
    # Before ATen, whose accessor types their parameters carry.
    ("fbgemm", "head", "namespace", r"^fbgemm_gpu::", ""),
    ("fbgemm", "head", "name", r"^(?:split|dense)_embedding\w*codegen\w*$|^(?:bounds_check_indices|linearize_index"
     r"|permute_pooled_embs|recat_copy_async)_kernel$", ""),
    ("aten", "head", "namespace", r"^(?:at|c10)::(?:native::|cuda::)?", ""),
    ("aten", "name", "contains", r"at::native::", ""),
    ("aten", "head", "name", r"(?:^|::)(?:softmax_warp_(?:forward|backward)|cunn_\w+|CatArrayBatchedCopy\w*"
     r"|indexSelect(?:Small|Large)Index|index_select\w*|(?:vectorized|unrolled)_elementwise_kernel)", ""),
    ("aten", "body", "name", r"^(?:elementwise|reduce)_kernel<\d+, ?\d+", ""),
    # Apex (NVIDIA/apex, csrc/): the global multi_tensor_apply_kernel of its fused optimizers (multi_tensor_adam.cu:
    # AdamFunctor, adamMode_t) and its layer norm kernels (layer_norm_cuda_kernel.cu: cuApplyLayerNorm,
    # cuApplyRMSNorm, cuComputeGradInput, cuComputePartGradGammaBeta). After ATen: PyTorch's copies are in at::native.
    ("apex", "head", "name", r"^(?:multi_tensor_apply_kernel|cuApply(?:LayerNorm|RMSNorm)|cuComputeGradInput"
     r"|cuComputePartGradGammaBeta|cuComputeGradGammaBeta)$", ""),
    # nvFuser's generated kernels, nvfuser_<scheduler>_f<n>_c<n>_r<n>_g<n>: nvf::nvfuser_reduction_f0_c1_r0_g21
    # (NVIDIA/Fuser#4873's profile), <unnamed>::nvfuser_none_f0_c0_r0_g0 (the corpus's nsys/h200_nvfuser trace); and
    # the TorchScript-era CudaCodeGen::kernel1 (NVIDIA/Fuser's tests compile "CudaCodeGen::kernel1").
    ("nvfuser", "head", "name", r"(?:^|::)nvfuser_\w+$|^CudaCodeGen::kernel\d*$", ""),
    # vLLM's own kernels, namespace vllm (vllm-project/vllm, csrc/: vllm::reshape_and_cache_flash_kernel in the
    # corpus's H100 vLLM trace): after its all-reduce, which has its own family.
    ("vllm", "head", "namespace", r"^vllm::", ""),
    # torch.compile/Inductor names its kernels triton_<category[:3]>_<fused ops>_<n> (poi, red, per, tem, for ...).
    ("triton", "head", "prefix", r"^triton_(?:poi|red|per|tem|for|spl|unk)_", " (torch.compile/Inductor)"),
    ("triton", "head", "prefix", r"^triton_", ""),
    # A @triton.jit function keeps its Python name: iotrace's are _<op>_kernel (leading underscore, private); Triton
    # <= 2.1 also appended a signature suffix such as _0d1d2d3c. An extern "C" CUDA kernel named so would land here.
    ("triton", "bare", "name", r"^_[a-z][a-z0-9_]*$", " (a @triton.jit function's name, as iotrace's kernels)"),
    ("triton", "bare", "suffix", r"_(?:\d+[cde]{1,2}){2,}$", " (Triton signature suffix)"),
)
