"""The advice on the call for each library's kernels, per topic (:data:`iotrace.trace.reports.origin.TOPICS`), on
NVIDIA and AMD GPUs: the text :func:`iotrace.trace.reports.origin.call_advice` returns. Every number in it comes with
its public source (a URL beside it).

A library kernel's author chose its code; the user changes the *call*: shapes, dtype, batching, fusion, the build, the
engine's flags. Communication libraries (:data:`iotrace.trace.reports.origin_rules.COMMUNICATION`) get advice about
the collective (its size, overlap, the ranks it waits on), never about their grid.
"""

from __future__ import annotations

from iotrace.trace.reports.origin_rules import AMD_FAMILIES, COMMUNICATION

__all__ = ["library_advice"]

_MM = "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html"
_CONV = "https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html"
_COMPILE = "https://pytorch.org/docs/stable/generated/torch.compile.html"
_TF32 = ("`torch.backends.cuda.matmul.allow_tf32 = True` or `torch.set_float32_matmul_precision('high')` "
         "(https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html; PyTorch notes, "
         "\"TensorFloat-32 (TF32) on Ampere (and later) devices\", https://pytorch.org/docs/stable/notes/cuda.html)")
_ADVICE = {
    "memory": "Move fewer bytes through the {label} call: fuse it with its neighbours (torch.compile fuses elementwise "
              f"ops and GEMM epilogues, {_COMPILE}), use a narrower dtype (bf16/fp16/fp8 halve or quarter the bytes), "
              "and batch so that each weight is read once for many rows.",
    "compute": "Give the {label} call a faster pipe: bf16/fp16 inputs, or TF32 for fp32 GEMMs and convolutions with "
               f"{_TF32}; FP8 where the library supports it (Hopper/Ada tensor cores: Transformer Engine, "
               "https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/index.html).",
    "latency": "The {label} call is too small to fill the GPU: batch calls (bmm, grouped/batched GEMM, "
               "https://docs.nvidia.com/cuda/cublas/index.html#cublasgemmgroupedbatchedex) and remove launch "
               f"overhead with CUDA graphs (torch.compile(mode='reduce-overhead'), {_COMPILE}; "
               "https://docs.nvidia.com/dl-cuda-graph/latest).",
    "occupancy": "Occupancy is not a knob here: {label} chose its own tile, registers and shared memory. Change the "
                 "shape so that a better kernel is picked: dimensions multiples of 8 (fp16/bf16; 4 for TF32, 16 for "
                 "int8) and, on A100, of 64 fp16 elements (128 bytes) - NVIDIA Deep Learning Performance Guide, "
                 f"\"Tensor Core Requirements\" ({_MM}); or let PyTorch time cuBLASLt's candidates (TunableOp, "
                 "https://pytorch.org/docs/stable/cuda.tunable.html).",
    "small-grid": "The {label} call launches fewer blocks than the GPU has SMs: make the call bigger (batch rows, "
                  "fuse small GEMMs into one grouped or batched call) or run independent calls on separate streams; "
                  f"the tile count per SM is the wave arithmetic of NVIDIA's \"Wave Quantization\" ({_MM}).",
    "tail": "The last wave of the {label} kernel is partly empty: choose shapes whose tile count is a whole number of "
            "waves (tiles divided by the SM count, e.g. 108 SMs on A100), as NVIDIA's \"Matrix Multiplication "
            f"Background User's Guide\" shows in \"Wave Quantization\" ({_MM}); batch or split so the count grows.",
    "old-build": "This {label} kernel was built for an older architecture than the device's. Use a library build that "
                 "has the device's: a newer CUDA toolkit / cuBLAS / cuDNN or a PyTorch wheel whose "
                 "torch.cuda.get_arch_list() includes it (https://pytorch.org/docs/stable/generated/torch.cuda."
                 "get_arch_list.html). If the build has it, the call asked for a path with no new kernel (e.g. fp32 "
                 "without TF32): change dtype or precision.",
    "stall": "These stalls are inside {label}'s own code: change the call (shape, dtype, layout, fusion), not the "
             "kernel; the stall mix tells which resource the chosen kernel waits on.",
}
_EXTRA = {
    "cudnn": f" For convolutions: channels multiples of 8 (fp16) or 4 (TF32), NHWC (channels_last), and "
             f"torch.backends.cudnn.benchmark = True to time the algorithms ({_CONV}).",
    "aten": " ATen's elementwise and reduction kernels are the ones torch.compile replaces with fused Triton kernels.",
}
_DDP = "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"
_NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
_NCCL = {
    "memory": "NCCL moves the bytes the collective needs: send fewer (bf16 gradients, DDP communication hooks, "
              "https://pytorch.org/docs/stable/ddp_comm_hooks.html) or overlap them with compute.",
    "compute": "An NCCL kernel's compute is its reduction; the cost is the link. Overlap it with compute (DDP "
               f"buckets gradients during backward, bucket_cap_mb defaults to 25 MiB, {_DDP}).",
    "latency": "Many small collectives pay NCCL's per-call latency: fuse them into bigger buckets (raise "
               f"bucket_cap_mb, {_DDP}) or group calls (ncclGroupStart/End).",
    "occupancy": "NCCL chooses its channels (blocks) itself; occupancy is not a knob. NCCL_MIN_NCHANNELS exists "
                 f"({_NCCL_ENV}), but NCCL's own tuning is usually right.",
    "small-grid": "NCCL runs one block per channel by design: a small grid is normal for a collective.",
    "tail": "Wave quantization does not apply to NCCL: its blocks live for the whole collective.",
    "old-build": "Use an NCCL build for the device's architecture (the one in a current PyTorch wheel).",
    "stall": "An NCCL kernel stalls while it waits for its peers: a long one usually means a slower rank (load "
             "imbalance) or unoverlapped communication, not a slow kernel. Compare ranks; forcing NCCL_ALGO/"
             f"NCCL_PROTO is a debugging setting ({_NCCL_ENV}).",
}


_TUNABLE_OP = "https://pytorch.org/docs/stable/cuda.tunable.html"
_HIPGRAPH = "https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_runtime_api/hipgraph.html"
_AMD_SPECS = "https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html"
_AMD_TUNING = "https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html"
_RCCL_ENV = "https://rocm.docs.amd.com/projects/rccl/en/latest/api-reference/env-variables.html"
#: A library kernel's advice on an AMD GPU: the same topics in ROCm's words and tools (hipBLASLt, TunableOp, HIP
#: graphs, CUs, workgroups, VGPRs, LDS), never TF32 or tensor-core advice.
_AMD_ADVICE = {
    "memory": "Move fewer bytes through the {label} call: fuse it with its neighbours (torch.compile fuses elementwise "
              f"ops and GEMM epilogues, {_COMPILE}), use a narrower dtype (bf16/fp16/fp8 halve or quarter the bytes), "
              "and batch so that each weight is read once for many rows.",
    "compute": "Give the {label} call a faster pipe: bf16/fp16 (fp8 where the GPU has it) inputs on the matrix cores "
               f"(MFMA), and let PyTorch's TunableOp time the hipBLASLt/rocBLAS candidates ({_TUNABLE_OP}; ROCm "
               f"workload tuning guide, {_AMD_TUNING}).",
    "latency": "The {label} call is too small to fill the GPU: batch calls (batched or grouped GEMM) and remove launch "
               f"overhead with HIP graphs (hipGraph, {_HIPGRAPH}; torch.compile(mode='reduce-overhead'), {_COMPILE}).",
    "occupancy": "Occupancy is not a knob here: {label} chose its own tile, VGPRs and LDS. Change the shape so that a "
                 f"better kernel is picked, or let PyTorch's TunableOp time the candidates ({_TUNABLE_OP}; ROCm "
                 f"workload tuning guide, {_AMD_TUNING}).",
    "small-grid": "The {label} call launches fewer workgroups than the GPU has CUs: make the call bigger (batch rows, "
                  "fuse small GEMMs into one grouped or batched call) or run independent calls on separate streams.",
    "tail": "The last wave of the {label} kernel is partly empty: choose shapes whose tile count is a whole number of "
            f"waves (tiles divided by the CU count, e.g. 304 CUs on MI300X, {_AMD_SPECS}); batch or split so the "
            "count grows.",
    "old-build": "This {label} kernel was not built for the device's gfx target. Use a ROCm and PyTorch build whose "
                 "targets include it (on ROCm torch.cuda.get_arch_list() lists gfx targets, "
                 "https://pytorch.org/docs/stable/generated/torch.cuda.get_arch_list.html).",
    "stall": "These waits are inside {label}'s own code: change the call (shape, dtype, layout, fusion), not the "
             "kernel; the wait mix tells which resource the chosen kernel waits on.",
}
_AMD_EXTRA = {
    # CK's tile, pipeline and workgroup size are its instance's template parameters (ROCm/composable_kernel README:
    # ckProfiler times the instances).
    "composable-kernel": " With Composable Kernel the tile, pipeline and workgroup size are the instance's template "
                         "parameters: pick another instance (ckProfiler times them, "
                         "https://github.com/ROCm/composable_kernel).",
    "miopen": " For convolutions, let MIOpen search its solutions (MIOPEN_FIND_MODE, "
              "https://rocm.docs.amd.com/projects/MIOpen/en/latest/how-to/find-and-immediate.html).",
}
#: The ROCm runtime's blit kernels (ROCm/clr, rocclr/device/blitcl.cpp) run for hipMemset/hipMemcpy: whatever the topic,
#: the runtime chose their code and grid, and only the calls can change.
_ROCCLR = ("The {label} blit kernel fills or copies memory for a hipMemset or hipMemcpy call: its code and grid are "
           "the runtime's. Issue fewer, larger fills and copies, or keep the data on the device between steps.")
_RCCL = {
    "memory": "RCCL moves the bytes the collective needs: send fewer (bf16 gradients, DDP communication hooks, "
              "https://pytorch.org/docs/stable/ddp_comm_hooks.html) or overlap them with compute.",
    "compute": "An RCCL kernel's compute is its reduction; the cost is the link. Overlap it with compute (DDP "
               f"buckets gradients during backward, bucket_cap_mb defaults to 25 MiB, {_DDP}).",
    "latency": "Many small collectives pay RCCL's per-call latency: fuse them into bigger buckets (raise "
               f"bucket_cap_mb, {_DDP}) or group calls (ncclGroupStart/End, RCCL keeps NCCL's API).",
    "occupancy": "RCCL chooses its channels (workgroups) itself; occupancy is not a knob. NCCL_MIN_NCHANNELS exists "
                 f"({_RCCL_ENV}), but RCCL's own tuning is usually right.",
    "small-grid": "RCCL runs one workgroup per channel by design: a small grid is normal for a collective.",
    "tail": "Wave quantization does not apply to RCCL: its workgroups live for the whole collective.",
    "old-build": "Use an RCCL build for the device's gfx target (the one in a current ROCm PyTorch wheel).",
    "stall": "An RCCL kernel waits for its peers: a long one usually means a slower rank (load imbalance) or "
             f"unoverlapped communication, not a slow kernel. Compare ranks; NCCL_ALGO/NCCL_PROTO ({_RCCL_ENV}) are "
             "debugging settings.",
}

_VLLM_ARGS = "https://docs.vllm.ai/en/latest/configuration/engine_args.html"
_VLLM_ENVS = "https://github.com/vllm-project/vllm/blob/main/vllm/envs.py"
#: What a communication library's call is, and the switch that replaces it: appended to every topic's advice.
_COMM_CALL = {
    "vllm-allreduce": "vLLM runs its custom all-reduce for tensors up to 8 MiB on fully peer-connected GPUs "
                      "(CustomAllreduce max_size, https://github.com/vllm-project/vllm/blob/main/vllm/distributed/"
                      f"device_communicators/custom_all_reduce.py); --disable-custom-all-reduce ({_VLLM_ARGS}) "
                      "falls back to NCCL: time the two on the same batch.",
    "trtllm-allreduce": "These are TensorRT-LLM's tensor-parallel all-reduce kernels (or FlashInfer's port of them, "
                        "which can fuse the residual add and RMSNorm into the all-reduce: the AllReduceFusionPattern "
                        "in the name); vLLM picks FlashInfer's with VLLM_ALLREDUCE_USE_FLASHINFER "
                        f"({_VLLM_ENVS}): time them against NCCL on the same batch.",
    "symm-mem": "PyTorch symmetric memory runs these all-reduces over peer memory, sizing its own grid: "
                "multimem_all_reduce_ at most 8 blocks (NVLink SHARP multicast), one- and two-shot at most 24 "
                "(https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/symm_mem/"
                "CUDASymmetricMemoryOps.cu). vLLM uses them up to a size per device and world size "
                "(SYMM_MEM_ALL_REDUCE_MAX_SIZES, https://github.com/vllm-project/vllm/blob/main/vllm/distributed/"
                "device_communicators/all_reduce_utils.py); VLLM_ALLREDUCE_USE_SYMM_MEM=0 turns them off "
                f"({_VLLM_ENVS}).",
    "nvshmem": "NVSHMEM's kernels move data between processing elements for the code that called it (a collective "
               "on a stream, a proxy for remote transfers): change that call — fewer, larger transfers, overlapped "
               "with compute — or the transport (NVSHMEM_* environment variables, "
               "https://docs.nvidia.com/nvshmem/api/gen/env.html).",
    "deepep": "DeepEP's dispatch and combine move MoE tokens between expert-parallel ranks: its high-throughput "
              "kernels take Buffer.num_sms SMs (20 unless Buffer.set_num_sms changes it, "
              "https://github.com/deepseek-ai/DeepEP/blob/main/deep_ep/buffer.py), its low-latency kernels are for "
              "decode; a long one usually waits on a rank with more tokens (expert load imbalance).",
}
_COMM_TOPIC = {
    "memory": "The {label} kernel moves the bytes the collective needs: send fewer (a narrower activation dtype, a "
              "smaller tensor-parallel degree) or hide them under compute.",
    "compute": "A {label} kernel's arithmetic is its reduction; its cost is the link and the wait for the peers.",
    "latency": "Many small collectives pay {label}'s per-call latency and the ranks' barrier: fewer, larger ones, or "
               "overlap with compute.",
    "occupancy": "{label} sizes its own grid (a few blocks that talk to the peers): occupancy is not a knob.",
    "small-grid": "{label} launches few blocks by design: a small grid is normal for a collective.",
    "tail": "Wave quantization does not apply to {label}: its blocks wait on the peers for the whole collective.",
    "old-build": "Use a {label} build for the device's architecture (the one the engine's wheel ships).",
    "stall": "A {label} kernel waits for its peers: a long one usually means a slower rank or unoverlapped "
             "communication, not a slow kernel. Compare the ranks.",
}

#: What a library's call is, for the libraries whose kernels an engine or framework launches: appended to the
#: generic advice on the topics below (the knobs that change which kernel runs and how much work it gets).
_CALL_TOPICS = ("memory", "compute", "latency", "occupancy", "small-grid", "tail")
_CALL = {
    "fbgemm": " FBGEMM's kernels run its operators (table-batched embeddings, jagged and sparse ops, quantised "
              "GEMMs): batch the tables into one table-batched embedding op, store the rows narrower (fp16 or int8 "
              "weights) and cache the hot rows (FBGEMM GPU documentation, https://pytorch.org/FBGEMM/).",
    "nvfuser": " nvFuser generated this kernel from a fusion and its scheduler chose the launch: change the fusion "
               "(NVFUSER_DUMP=segmented_fusion shows how it was cut into kernels), its dtypes and shapes "
               "(https://github.com/NVIDIA/Fuser/blob/main/csrc/options.cpp).",
    "flashinfer": " FlashInfer's attention, norm and sampling kernels are picked by the engine: the knobs are the "
                  "batch (--max-num-seqs, --max-num-batched-tokens), the KV-cache dtype (--kv-cache-dtype fp8 "
                  f"halves the bytes read) and the attention backend (--attention-backend), {_VLLM_ARGS}.",
    "apex": " Apex's fused optimizers and norms (https://github.com/NVIDIA/apex): PyTorch now ships fused "
            "equivalents (torch.optim.AdamW(fused=True), https://pytorch.org/docs/stable/generated/"
            "torch.optim.AdamW.html); fewer, larger parameter tensors mean fewer launches.",
    "tensorrt-llm": " TensorRT-LLM's kernels run the engine's plan: the knobs are max_batch_size and max_num_tokens "
                    "(in-flight batching) and the quantisation (https://nvidia.github.io/TensorRT-LLM/performance/"
                    "performance-tuning-guide/).",
    "marlin": " Marlin/Machete are weight-only quantised GEMMs (GPTQ/AWQ int4 or int8 weights, fp16/bf16 "
              "activations): the call's knobs are the checkpoint's bits and group size, and the batch — Marlin keeps "
              "its speedup up to 16-32 tokens per step (https://github.com/IST-DASLab/marlin); Machete is vLLM's "
              "Hopper kernel for the same formats (https://github.com/vllm-project/vllm/tree/main/csrc/quantization/"
              "machete).",
    "ggml-cuda": " llama.cpp's ggml-cuda kernels run the model's graph: the knobs are the weights' quantisation type "
                 "(the ggml_type in mul_mat_q / mul_mat_vec_q), the layers offloaded to the GPU (-ngl), the batch and "
                 "micro-batch (-b / -ub) and flash attention (-fa); llama-bench times them "
                 "(https://github.com/ggml-org/llama.cpp/blob/master/tools/llama-bench/README.md).",
    "aiter": " AITER's kernels are picked by the engine that calls them (vLLM and SGLang on ROCm): switch them per "
             "operator with the engine's AITER settings and time each (https://github.com/ROCm/aiter).",
    "vllm": " vLLM's own kernels run its engine: the knobs are the batch (--max-num-seqs, --max-num-batched-tokens), "
            f"the KV-cache dtype (--kv-cache-dtype) and the model's dtype and quantisation, {_VLLM_ARGS}.",
}
#: A build-time fix that is the library's own, where the generic one (a newer toolkit or wheel) does not fit.
_OLD_BUILD = {
    "ggml-cuda": "This llama.cpp ggml-cuda kernel was built for an older architecture than the device's: rebuild "
                 "with the device's in CMAKE_CUDA_ARCHITECTURES (for a HIP build, GPU_TARGETS) - llama.cpp build guide "
                 "(https://github.com/ggml-org/llama.cpp/blob/master/docs/build.md).",
}


def library_advice(family: str, label: str, topic: str, amd: bool) -> str:
    """The advice on ``topic`` for a kernel of the library ``family`` (labelled ``label``); ``amd``: it ran on an AMD
    GPU (ROCm's libraries always do)."""
    if family in COMMUNICATION and family != "nccl":
        return _COMM_TOPIC[topic].format(label=label) + " " + _COMM_CALL[family]
    call = _CALL.get(family, "") if topic in _CALL_TOPICS else ""
    if topic == "old-build" and family in _OLD_BUILD:
        return _OLD_BUILD[family]
    if amd or family in AMD_FAMILIES:
        if family == "nccl":
            return _RCCL[topic]
        if family == "rocclr":
            return _ROCCLR.format(label=label)
        extra = _AMD_EXTRA.get(family, "") if topic in ("compute", "occupancy", "small-grid") else ""
        return _AMD_ADVICE[topic].format(label=label) + extra + call
    if family == "nccl":
        return _NCCL[topic]
    extra = _EXTRA.get(family, "") if topic in ("memory", "compute", "occupancy") else ""
    return _ADVICE[topic].format(label=label) + extra + call
