"""Kernel origin from the name (iotrace.trace.reports.origin): real names land in the right family, with the compute
capability the name says the binary was built for; every kernel name of every corpus export classifies; the advice
fits the origin (a library kernel's advice is about the call, with a public source for each number).

Names come from two places: the corpus (../shared/corpus, loaded with iotrace.trace.load, cached per module) and
public GitHub threads, each cited with its URL. Every corpus export is read: the largest is 3.5 MB (no file over the
10 MB cap this module would skip), and loading them all takes a few seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from iotrace.trace.reports.origin import (
    COMMUNICATION,
    FAMILIES,
    LABELS,
    TOPICS,
    Origin,
    call_advice,
    classify,
    older_build,
)

from .conftest import corpus_exports, load_corpus

#: Files larger than this are not loaded here (none in the corpus today); say so if one appears.
MAX_BYTES = 10 * 1024 * 1024
LIBRARIES = tuple(f for f in FAMILIES if f not in ("triton", "user"))
PACKAGE = Path(__file__).resolve().parents[1] / "iotrace"

# (name as a profiler printed it, family, built_for, where it came from). Truncated names are as printed.
PUBLIC: list[tuple[str, str, str | None, str]] = [
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x"
     "_cublas", "cublas", "9.0", "https://github.com/NVIDIA/TensorRT-LLM/issues/1541"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma", "cublas", "8.0",
     "https://github.com/pytorch/pytorch/pull/167503"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1", "cutlass", "8.0",
     "https://github.com/pytorch/pytorch/pull/167503"),
    ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn", "cublas", "8.0",
     "https://github.com/karpathy/nanochat/pull/105"),
    ("nvjet_tst_192x176_64x4_1x2_h_bz_coopB_T", "cublas", None, "https://github.com/sgl-project/sglang/issues/10109"),
    ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_NTN", "cublas", None, "https://github.com/NVIDIA/Fuser/pull/4873"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)", "nccl", None,
     "https://github.com/NVIDIA/Fuser/pull/4873"),
    ("nvf::nvfuser_reduction_f0_c1_r0_g21(nvf::Tensor<nvf::__bfloat, (int)3, (int)4>, nvf::Tensor<nvf::__",
     "nvfuser", None, "https://github.com/NVIDIA/Fuser/pull/4873"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_par", "flash-attention", None,
     "https://github.com/NVIDIA/Fuser/pull/4873"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
     "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<192>, cute::C<64> >, 64, "
     "cutlass::bfloat16_t, float, cutlass::arch::Sm90, false, true", "flash-attention", "9.0",
     "https://github.com/sgl-project/sglang/pull/22440"),
    ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213_..."
     "_0", "flash-attention", "10.0", "https://github.com/Dao-AILab/flash-attention/pull/2564"),
    ("fmha_cutlassB_f32_aligned_64x64_k32_sm80(AttentionBa", "flash-attention", "8.0",
     "https://github.com/facebookresearch/xformers/issues/1176"),
    ("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm10<cutlass::gemm::kernel::GemmUniversal<"
     "cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int>>, cutlass::gemm::collective::CollectiveMma<cutlass::"
     "gemm::MainloopSm100ArrayTmaUmmaWarpSpecialized<(int)3", "cutlass", "10.0",
     "https://github.com/pytorch/pytorch/pull/156203"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute"
     "_segment_k_off_kernel__5x_cudnn", "cudnn", "9.0", "https://github.com/pytorch/kineto/issues/1041"),
    ("void nchwToNhwcKernel<__half, __half, float, true, true, (cudnnKernelDataType_t)0>(int, int, int, i",
     "cudnn", None, "https://github.com/pytorch/pytorch/issues/54324"),
    ("void genericReformat::copyPackedKernel<float, float, true, true, genericReformat::IdentityCoordMapper<4>, 4>("
     "unsigned int, unsigned int, void const*, genericReformat::ArrayN<4>", "tensorrt", None,
     "https://github.com/NVIDIA/TensorRT/issues/1117"),
    ("_ZN6thrust8cuda_cub4core13_kernel_agentINS0_6__scan9ScanAgentINS_6detail15normal_iteratorINS_10device_ptrIaEEEE"
     "S9_NS_4plusIaEEiaNS5_17integral_constantIbLb1EEEEES9_S9_SB_iN3cub13ScanTileStateIaLb1EEENS3_9DoNothingIaEEEEvT0_"
     "T1_T2_T3_T4_T5_", "thrust-cub", None, "https://github.com/NVIDIA/thrust/issues/1287"),
    ("void cub::CUB_200400_890_NS::detail::for_each::static_kernel<cub::CUB_200400_890_NS::detail::for_ea",
     "thrust-cub", None, "https://github.com/NVIDIA/cccl/issues/2451"),
    ("triton_red_fused_add_bmm_mm_mul_16", "triton", None, "https://github.com/pytorch/pytorch/issues/125524"),
    ("original_kernel_0d1d2d3de4de5de6de7c8de9c10de11c", "triton", None,
     "https://github.com/pytorch/pytorch/issues/120478"),
]

# Issue 45 item 2: communication libraries besides NCCL, and the libraries the last round left as "user". None of their
# kernels but vLLM's, ggml-cuda's, FBGEMM's, Apex's and nvFuser's is in the corpus (those are in CORPUS_CASES): each
# name here is written as a profiler prints the kernel declared in the cited source file (demangled as Kineto and
# Nsight Systems show it; truncated where profiles seen in public notes truncate it).
FROM_SOURCE: list[tuple[str, str, str | None, str]] = [
    # PyTorch symmetric memory: the kernels of torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu as
    # Kineto demangles a kernel of an anonymous namespace; multimem_all_reduce_kernel is the one a B200 vLLM trace
    # showed with 8 blocks (vLLM uses it by default since vllm-project/vllm#24111).
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
     "unsigned int**, unsigned long, unsigned long)", "symm-mem", None,
     "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu"),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 4, false, false>(c10::BFloat16**, "
     "c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long, unsigned long)",
     "symm-mem", None,
     "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu"),
    # vLLM's custom all-reduce, two-stage variant (csrc/custom_all_reduce.cuh; the one-stage one is in the corpus).
    ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "__nv_bfloat16*, int, int)", "vllm-allreduce", None,
     "https://github.com/vllm-project/vllm/blob/main/csrc/custom_all_reduce.cuh"),
    # FlashInfer's port of TensorRT-LLM's fused all-reduce, as SGLang B200 profiles list it (flashinfer-ai/flashinfer
    # include/flashinfer/comm/trtllm_allreduce_fusion.cuh); TensorRT-LLM's own one-shot kernel.
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(flashinfer::"
     "trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, fal", "trtllm-allreduce", None,
     "https://github.com/flashinfer-ai/flashinfer/blob/main/include/flashinfer/comm/trtllm_allreduce_fusion.cuh"),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, true, false>(tensorrt_llm::kernels::"
     "AllReduceParams)", "trtllm-allreduce", None,
     "https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/tensorrt_llm/kernels/customAllReduceKernels.cu"),
    # NVSHMEM's on-stream barrier and its proxy kernel (src/include/internal/non_abi/nvshmemi_h_to_d_coll_defs.cuh).
    ("void barrier_on_stream_kernel_threadgroup<(threadgroup_t)1>(int, int)", "nvshmem", None,
     "https://github.com/NVIDIA/nvshmem/blob/main/src/include/internal/non_abi/nvshmemi_h_to_d_coll_defs.cuh"),
    ("nvshmemi_proxy_rma_entrypoint_blocking", "nvshmem", None, "https://github.com/NVIDIA/nvshmem"),
    # DeepEP (csrc/kernels/intranode.cu: namespace deep_ep::intranode).
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, "
     "float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, int, int, "
     "void**, int, int, ", "deepep", None,
     "https://github.com/deepseek-ai/DeepEP/blob/main/csrc/kernels/intranode.cu"),
    ("void deep_ep::intranode::combine<__nv_bfloat16, (int)8, (int)768, (int)4096>(T1 *, float *", "deepep", None,
     "https://github.com/deepseek-ai/DeepEP/blob/main/csrc/kernels/intranode.cu"),
    # FlashInfer's own kernels (include/flashinfer/norm.cuh, attention/decode.cuh) and a CuTe DSL one.
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
     "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", "flashinfer", None,
     "https://github.com/flashinfer-ai/flashinfer/blob/main/include/flashinfer/norm.cuh"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>", "flashinfer", None,
     "https://github.com/flashinfer-ai/flashinfer/blob/main/include/flashinfer/attention/decode.cuh"),
    ("kernel_cutlass_kernel_flashinfernormkernelsrmsnormRMSNormKernel_object_at__tensorptrbf16gm", "flashinfer", None,
     "https://github.com/flashinfer-ai/flashinfer"),
    # Marlin as vLLM names it (csrc/quantization/gptq_marlin/: namespace marlin) and the original (IST-DASLab).
    ("void marlin::Marlin<(long)1125899906909960>", "marlin", None,
     "https://github.com/vllm-project/vllm/tree/main/csrc/quantization/gptq_marlin"),
    ("void Marlin<256, 1, 8, 8, 4, 8>(int4 const*, int4 const*, int4*, int4 const*, int, int, int, int*)", "marlin",
     None, "https://github.com/IST-DASLab/marlin/blob/master/marlin/marlin_cuda_kernel.cu"),
    # TensorRT-LLM's own kernels (cpp/tensorrt_llm/kernels/: namespace tensorrt_llm::kernels).
    ("void tensorrt_llm::kernels::mmha::masked_multihead_attention_kernel<unsigned short, unsigned short, 128>(",
     "tensorrt-llm", None, "https://github.com/NVIDIA/TensorRT-LLM/tree/main/cpp/tensorrt_llm/kernels"),
    # Apex's layer norm (csrc/layer_norm_cuda_kernel.cu).
    ("void cuApplyLayerNorm<c10::Half, float, c10::Half>(c10::Half*, float*, float*, c10::Half const*, int, int, "
     "float, c10::Half const*, c10::Half const*)", "apex", None,
     "https://github.com/NVIDIA/apex/blob/master/csrc/layer_norm_cuda_kernel.cu"),
    # nvFuser's TorchScript-era name, from an nvprof log (NVIDIA/Fuser's tests compile "CudaCodeGen::kernel1").
    ("CudaCodeGen::kernel1(CudaCodeGen::Tensor<float, int=2>, CudaCodeGen::Tensor<float, int=2>, "
     "CudaCodeGen::Tensor<float, int=2>, CudaCodeGen::Tensor<float, int=2>)", "nvfuser", None,
     "https://github.com/NVIDIA/Fuser/blob/main/csrc/options.cpp"),
    # AITER (ROCm/aiter, csrc/: namespace aiter), demangled and mangled.
    ("void aiter::grouped_topk_kernel<c10::BFloat16, float __vector(4), true>(c10::BFloat1", "aiter", None,
     "https://github.com/ROCm/aiter"),
    ("_ZN5aiter23mhc_pre_big_fuse_kernelIDF16bLi320ELi4ELi", "aiter", None, "https://github.com/ROCm/aiter"),
    # ggml-cuda's flash attention (ggml/src/ggml-cuda/fattn-mma-f16.cuh, fattn-common.cuh).
    ("void flash_attn_ext_f16<128, 128, 8, 1, 4, false, false>(char const*, char const*, char const*, char const*, "
     "char const*, int const*, float*, float2*, float, float, float, float, unsigned int, float, int)", "ggml-cuda",
     None, "https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-cuda/fattn-mma-f16.cuh"),
    ("void flash_attn_combine_results<128>(float const*, float2 const*, float*, int)", "ggml-cuda", None,
     "https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-cuda/fattn-common.cuh"),
    # A user's extern "C" rms_norm_f32 (no ggml template arguments) stays user CUDA.
    ("rms_norm_f32(float*, float const*, float const*, int)", "user", None,
     "extern \"C\" rms_norm_f32 kernels of user projects (find_string over public code)"),
]

H100_VLLM = "kineto/h100sxm_x4tp_vllm_v1_llama3-70b_prefill1049_decode9_rank0_kineto.json.gz"
R9700_LLAMACPP = "rocprof/r9700_gfx1201_llamacpp_q4_0_rocprof-v1_results.stats.csv"
# (corpus file, a substring of its kernel names, family, built_for): every name of the file holding the substring.
CORPUS_CASES: list[tuple[str, str, str, str | None]] = [
    ("kineto/a100_pg509_triton_kernel_kineto.json.gz", "triton_poi_fused_add_cos_sin_0", "triton", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "ncclKernel_AllReduce_RING_LL_Sum_float", "nccl", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "ncclKernel_Broadcast_RING_LL_Sum_int8_t", "nccl", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "cutlass::Kernel<cutlass_80_tensorop_s1688gemm", "cutlass", "8.0"),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "cutlass::Kernel<cutlass_80_simt_sgemm", "cutlass", "8.0"),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "cutlass_cudnn_infer::Kernel<", "cudnn", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "_ZN19cutlass_cudnn_train6Kernel", "cudnn", None),  # mangled
    ("kineto/a100_pg509_nccl_kineto.json.gz", "sm80_xmma_", "cudnn", "8.0"),  # *_execute_kernel_cudnn_infer/_train
    ("kineto/a100_pg509_nccl_kineto.json.gz", "ampere_sgemm_", "cublas", "8.0"),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "cublasLt::splitKreduce_kernel", "cublas", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "at::native::vectorized_elementwise_kernel", "aten", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "CatArrayBatchedCopy", "aten", None),
    ("kineto/a100_pg509_nccl_kineto.json.gz", "softmax_warp_forward", "aten", None),
    ("kineto/a100_pg509_backward_thread_callstack_kineto.json", "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4",
     "cutlass", "8.0"),
    ("kineto/a100_pg509_alexnet_kineto_trace.json.gz", "ampere_gcgemm_64x64_nt", "cublas", "8.0"),
    ("kineto/a100_pg509_alexnet_kineto_trace.json.gz", "cudnn_ampere_scudnn_128x64", "cudnn", "8.0"),
    ("kineto/a100_pg509_alexnet_kineto_trace.json.gz", "epilogue::impl::globalKernel", "cublas", None),  # cublasLt
    ("kineto/a100_pg509_alexnet_kineto_trace.json.gz", "fft2d_r2c_32x32", "cudnn", None),
    ("kineto/a100_pg509_cupti_range_profiler_flops_kineto.json.gz", "xmma_new::gemm::kernel<", "cudnn", "8.0"),
    ("kineto/a100_pg509_cupti_range_profiler_flops_kineto.json.gz", "implicit_convolve_sgemm", "cudnn", None),
    ("kineto/old_schema_theoretical_occupancy_gpu_metrics_input.json", "gemmSN_", "cublas", None),
    ("kineto/old_schema_theoretical_occupancy_gpu_metrics_input.json", "volta_sgemm_128x32_nt", "cublas", "7.0"),
    ("kineto/old_schema_theoretical_occupancy_gpu_metrics_input.json", "unrolled_elementwise_kernel", "aten", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "gemv2T_kernel_val", "cublas", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "gemv2N_kernel", "cublas", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "magma_sgemmEx_kernel", "cublas", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "cub::DeviceRadixSort", "thrust-cub", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
     "nccl", None),
    ("kineto/v100_dgxs_resnet50_tbplugin_kineto.json.gz", "volta_scudnn_", "cudnn", "7.0"),
    ("kineto/v100_dgxs_resnet50_tbplugin_kineto.json.gz", "explicit_convolve_sgemm", "cudnn", None),
    ("kineto/v100_dgxs_resnet50_tbplugin_kineto.json.gz", "cunn_ClassNLLCriterion", "aten", None),
    ("kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz", "cudnn_infer_volta_scudnn_", "cudnn", "7.0"),
    ("kineto/v100_sxm2_32gb_ns_resolution_kineto.json.gz", "wgrad_alg0_engine", "cudnn", None),
    ("kineto-ranks/rank-0.json.gz", "gemvNSP_kernel", "cublas", None),
    ("kineto-ranks/rank-0.json.gz", "scal_kernel<", "cublas", None),
    ("kineto-ranks/rank-0.json.gz", "sgemm_largek_lds64", "cublas", None),
    ("kineto-ranks/rank-0.json.gz", "internal::gemvx::kernel", "cublas", None),
    ("kineto-ranks/rank-0.json.gz", "at_cuda_detail::cub::DeviceScan", "thrust-cub", None),  # CUB inside ATen
    ("kineto-ranks/rank-0.json.gz", "ncclKernel_SendRecv", "nccl", None),
    ("ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv", "ampere_sgemm_128x64_nn", "cublas", "8.0"),
    ("ncu-csv/a10g_sgemm_roofline_counters_ncu2023.1_csv.csv", "warptiling", "user", None),
    ("ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep", "cutlass::Kernel<cutlass::gemm::kernel::B2bGemm",
     "cutlass", None),
    ("nsys/a40_a100pcie_cutlass_gemm_nsys2023.2.sqlite", "cutlass::Kernel<cutlass::gemm::kernel::Gemm<", "cutlass",
     None),
    ("nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite", "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", "cublas", None),
    ("nsys/h200_nvfuser_nvtx_nsys2024.6.sqlite", "nvfuser_", "nvfuser", None),  # nvFuser's generated kernel
    # *_execute_kernel_trt: TensorRT's tactic, though the sm80_xmma_fprop_ prefix is cuDNN's too.
    ("nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite", "sm80_xmma_fprop_", "tensorrt", "8.0"),
    ("nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite", "sm50_xmma_pooling_", "tensorrt", "5.0"),
    ("nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite", "trt_ampere_h16816gemm_", "tensorrt", "8.0"),
    ("nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite", "CUTENSOR_NAMESPACE::permutationKernel", "tensorrt", None),
    ("nsys/rtx3090_tensorrt_memfusion_nsys2023.1.sqlite", "genericReformat::copyVectorizedKernel", "tensorrt", None),
    ("kineto/mi250_rocm6.2_kineto_NONNVIDIA.json.gz", "Cijk_", "tensile", None),  # rocBLAS/Tensile solutions
    ("rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db", "ck_tile::", "composable-kernel", None),
    ("rocprof/mi300x_ck_tile_batched_gemm_rocpd_rocprofv3-rocm7.1.1.db", "__amd_rocclr_", "rocclr", None),
    # Issue 45 item 2: the vLLM V1 H100 trace's communication kernels and vLLM's own kernels.
    (H100_VLLM, "vllm::cross_device_reduce_1stage", "vllm-allreduce", None),
    (H100_VLLM, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nccl", None),
    (H100_VLLM, "ncclDevKernel_AllGather_RING_LL", "nccl", None),
    (H100_VLLM, "vllm::reshape_and_cache_flash_kernel", "vllm", None),
    (H100_VLLM, "triton_poi_fused_add_all_reduce", "triton", None),  # Inductor's name for a fused op, not a collective
    # llama.cpp's ggml-cuda kernels on an RDNA 4 GPU (HIP keeps the names), and the rocBLAS/hipBLASLt GEMMs beside.
    (R9700_LLAMACPP, "mul_mat_q<", "ggml-cuda", None),
    (R9700_LLAMACPP, "mul_mat_vec_q<", "ggml-cuda", None),
    (R9700_LLAMACPP, "quantize_q8_1(", "ggml-cuda", None),
    (R9700_LLAMACPP, "quantize_mmq_q8_1<", "ggml-cuda", None),
    (R9700_LLAMACPP, "k_get_rows", "ggml-cuda", None),
    (R9700_LLAMACPP, "k_set_rows", "ggml-cuda", None),
    (R9700_LLAMACPP, "rms_norm_f32<", "ggml-cuda", None),
    (R9700_LLAMACPP, "soft_max_f32<", "ggml-cuda", None),
    (R9700_LLAMACPP, "rope_norm<", "ggml-cuda", None),
    (R9700_LLAMACPP, "k_bin_bcast<", "ggml-cuda", None),
    (R9700_LLAMACPP, "convert_unary<", "ggml-cuda", None),
    (R9700_LLAMACPP, "cpy_scalar<", "ggml-cuda", None),
    (R9700_LLAMACPP, "unary_gated_op_kernel<", "ggml-cuda", None),
    (R9700_LLAMACPP, "Cijk_", "tensile", None),
    # FBGEMM's table-batched embeddings and sparse ops, and Apex's FusedAdam (AdamFunctor, adamMode_t), in a V100
    # trace and the two-rank recommendation model traces.
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "fbgemm_gpu::", "fbgemm", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "split_embedding_", "fbgemm", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "bounds_check_indices_kernel", "fbgemm", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "linearize_index_kernel", "fbgemm", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "permute_pooled_embs_kernel", "fbgemm", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "recat_copy_async_kernel", "fbgemm", None),
    ("kineto/v100_sxm2_16gb_trace_diff_test_kineto.json.gz", "multi_tensor_apply_kernel<TensorListMetadata<4>, "
     "AdamFunctor", "apex", None),
    ("kineto-ranks/rank-0.json.gz", "fbgemm_gpu::(anonymous namespace)::_FP8rowwise", "fbgemm", None),
]


@pytest.fixture(scope="module")
def corpus_names(corpus: Path) -> dict[str, set[str]]:
    """Corpus file (relative path) -> its distinct kernel names, each export loaded once for the module."""
    names: dict[str, set[str]] = {}
    for path in corpus_exports(corpus):
        if path.stat().st_size > MAX_BYTES:
            continue
        kernels = load_corpus(path).kernels
        names[path.relative_to(corpus).as_posix()] = set(kernels["name"]) if len(kernels) else set()
    return names


@pytest.mark.parametrize(("name", "family", "built_for", "source"), PUBLIC + FROM_SOURCE,
                         ids=[p[0][:40] for p in PUBLIC + FROM_SOURCE])
def test_public_names(name: str, family: str, built_for: str | None, source: str) -> None:
    origin = classify(name)
    assert (origin.family, origin.built_for) == (family, built_for), f"{name} ({source}): {origin}"
    assert origin.evidence


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_every_corpus_name_classifies(corpus_names: dict[str, set[str]]) -> None:
    seen = {f for names in corpus_names.values() for f in (classify(n).family for n in names)}
    assert sum(map(len, corpus_names.values())) > 500
    # The corpus holds every family but these: no attention kernel of FlashAttention's or FlashInfer's, no MIOpen,
    # no engine kernel of TensorRT-LLM, Marlin or AITER, no collective but NCCL's and vLLM's (their names are in
    # PUBLIC, each with its source).
    absent = {"flash-attention", "miopen", "flashinfer", "tensorrt-llm", "marlin", "aiter", "trtllm-allreduce",
              "symm-mem", "nvshmem", "deepep"}
    assert seen >= set(FAMILIES) - absent, seen
    for names in corpus_names.values():
        for name in names:
            origin = classify(name)
            assert origin.family in FAMILIES and origin.label == LABELS[origin.family] and origin.evidence
            assert origin.library == (origin.tunable == ()) == (origin.family not in ("triton", "user"))
            assert origin.communication == (origin.family in COMMUNICATION)


@pytest.mark.parametrize(("file", "part", "family", "built_for"), CORPUS_CASES,
                         ids=[f"{c[0].split('/')[-1][:24]}:{c[1][:30]}" for c in CORPUS_CASES])
def test_corpus_names_land_right(corpus_names: dict[str, set[str]], file: str, part: str, family: str,
                                 built_for: str | None) -> None:
    matching = sorted(n for n in corpus_names[file] if part in n)
    assert matching, f"no kernel name with {part!r} in {file}"
    for name in matching:
        origin = classify(name)
        assert (origin.family, origin.built_for) == (family, built_for), f"{name[:200]}: {origin}"


def test_gemv2t_is_cublas_wherever_it_appears(corpus_names: dict[str, set[str]]) -> None:
    gemv = [n for names in corpus_names.values() for n in names if "gemv2T" in n]
    assert gemv
    assert {classify(n).family for n in gemv} == {"cublas"}


def test_iotrace_own_kernels() -> None:
    """iotrace's @triton.jit kernels (_<op>_kernel, a bare name in a profile) are Triton; its extern "C" CUDA kernels
    (rmsnorm.cu) are user CUDA. Read from the source: iotrace.trace may not import iotrace.kernels."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in sorted((PACKAGE / "kernels").glob("*.py")))
    jitted = [n for n in re.findall(r"@triton\.jit\s*\ndef (\w+)", source) if n.endswith("_kernel")]
    assert "_rmsnorm_kernel" in jitted and len(jitted) >= 10
    for name in jitted:
        origin = classify(name)
        assert origin.family == "triton" and "num_warps" in origin.tunable, (name, origin)
    cuda = re.findall(r'extern "C" __global__ void (\w+)', (PACKAGE / "kernels" / "rmsnorm.cu").read_text())
    assert cuda
    assert {classify(n).family for n in cuda} == {"user"}


def test_names_in_every_spelling() -> None:
    # Kineto demangles (void ...<...>(...)); Nsight Compute may keep the mangled name; both read the same.
    demangled = classify("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                         "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
                         "at::detail::Array<char*, 1>)")
    mangled = classify("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1"
                       "EEEEEviT0_T1_")
    assert demangled.family == mangled.family == "aten"
    assert classify("_Z8dot_prodPfS_S_i").family == "user"
    assert classify("").family == classify("__missing__").family == "user"


def test_older_build() -> None:
    sm80 = classify("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma")
    assert older_build(sm80, "9.0") and older_build(sm80, "10.0")
    assert not older_build(sm80, "8.6")  # same major: the sm_80 cubin is the device's own family
    assert not older_build(sm80, "8.0") and not older_build(sm80, None)
    assert older_build(classify("ampere_sgemm_128x64_nn"), "10.0")
    nvjet = classify("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT")
    assert nvjet.built_for is None and not older_build(nvjet, "10.0")
    assert not older_build(Origin("user", "user CUDA", False, None, "x"), "9.0")


def _numbers_outside_urls(text: str) -> bool:
    return re.search(r"\d", re.sub(r"https?://\S+", "", text)) is not None


@pytest.mark.parametrize("family", LIBRARIES)
def test_call_advice_is_about_the_call(family: str) -> None:
    origin = Origin(family, LABELS[family], True, None, "test")
    for topic in TOPICS:
        text = call_advice(origin, topic)
        assert text and (LABELS[family] in text or family == "nccl")
        # Never the author's knobs: those are for Triton and user CUDA kernels.
        for knob in ("num_warps", "num_stages", "BLOCK_", "__launch_bounds__", "maxrregcount"):
            assert knob not in text, (family, topic, text)
        if _numbers_outside_urls(text):
            assert "https://" in text, f"{family}/{topic} states a number without a source: {text}"


def test_call_advice_says_what_the_brief_asks() -> None:
    gemm = classify("ampere_sgemm_128x64_nn")
    occupancy = call_advice(gemm, "occupancy")
    assert "multiples of 8" in occupancy and "Tensor Core Requirements" in occupancy
    assert "dl-performance-matrix-multiplication" in occupancy
    tail = call_advice(gemm, "tail")
    assert "Wave Quantization" in tail and "Matrix Multiplication Background User's Guide" in tail
    compute = call_advice(gemm, "compute")
    assert "allow_tf32" in compute and "set_float32_matmul_precision('high')" in compute and "FP8" in compute
    assert "CUDA graphs" in call_advice(gemm, "latency")
    assert "torch.compile" in call_advice(gemm, "memory")
    assert "get_arch_list" in call_advice(gemm, "old-build")
    assert "channels_last" in call_advice(classify("volta_scudnn_128x64_relu_interior_nn_v1"), "occupancy")
    nccl = classify("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)")
    assert "bucket_cap_mb" in call_advice(nccl, "latency") and "Overlap" in call_advice(nccl, "compute")
    assert "slower rank" in call_advice(nccl, "stall")


def test_call_advice_refuses_knob_kernels_and_unknown_topics() -> None:
    for name in ("triton_poi_fused_add_cos_sin_0", "_rmsnorm_kernel", "matrix_addition2D(float *, float *, int)"):
        with pytest.raises(ValueError, match="knobs"):
            call_advice(classify(name), "memory")
    with pytest.raises(ValueError, match="unknown topic"):
        call_advice(classify("ampere_sgemm_128x64_nn"), "registers")


@pytest.mark.parametrize("family", sorted(COMMUNICATION))
def test_communication_advice_is_about_the_collective(family: str) -> None:
    """Issue 45 item 2: a collective's advice never tells it to launch more blocks or split the work (GEMM advice):
    its grid is the library's by design, and its cost is the link and the peers."""
    origin = Origin(family, LABELS[family], True, None, "test", communication=True)
    for topic in TOPICS:
        text = call_advice(origin, topic)
        assert "split-K" not in text and "Launch more" not in text and "smaller blocks" not in text, (family, text)
    assert "by design" in call_advice(origin, "small-grid")
    assert "not a knob" in call_advice(origin, "occupancy")
    assert "Wave quantization does not apply" in call_advice(origin, "tail")
    assert "slower rank" in call_advice(origin, "stall")


def test_call_advice_names_each_librarys_own_knobs() -> None:
    def advice(name: str, topic: str = "memory", amd: bool = False) -> str:
        return call_advice(classify(name), topic, amd)

    vllm_ar = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, int, int)"
    assert "--disable-custom-all-reduce" in advice(vllm_ar) and "8 MiB" in advice(vllm_ar)
    multimem = "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)"
    assert "at most 8 blocks" in advice(multimem, "small-grid") and "VLLM_ALLREDUCE_USE_SYMM_MEM" in advice(multimem)
    assert "Buffer.set_num_sms" in advice("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(float*)")
    ggml = "void mul_mat_vec_q<(ggml_type)14, 1, false, false>(void const*, ggml_cuda_mm_fusion_args_device)"
    for knob in ("-ngl", "-fa", "-ub", "ggml_type"):
        assert knob in advice(ggml, "latency") and knob in advice(ggml, "compute", amd=True), knob
    assert "CMAKE_CUDA_ARCHITECTURES" in advice(ggml, "old-build")
    marlin = advice("void marlin::Marlin<(long)1125899906909960>", "small-grid")
    assert "group size" in marlin and "16-32 tokens" in marlin and "Machete" in marlin
    assert "max_num_tokens" in advice("void tensorrt_llm::kernels::mmha::masked_multihead_attention_kernel<128>(")
    assert "--kv-cache-dtype" in advice("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>")
    assert "NVFUSER_DUMP=segmented_fusion" in advice("<unnamed>::nvfuser_none_f0_c0_r0_g0(<unnamed>::Tensor<float>)")
    assert "fused=True" in advice("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>(int)")
    assert "table-batched" in advice("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*)")
