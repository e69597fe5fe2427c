"""Where a kernel comes from, read from its name alone, so that the advice fits what the user can change.

A kernel from cuBLAS, CUTLASS, cuDNN, NCCL, PyTorch's ATen, FlashAttention, TensorRT or CUB/Thrust runs a library's
source: the user changes the *call* (shapes, dtype, TF32, batching, fusion, the library build), never block sizes or
Triton knobs in it. A Triton or user CUDA kernel has knobs. :func:`classify` reads the family, and the compute
capability the binary was built for where the name says it (``sm80_xmma_*``, ``ampere_*``, ``cutlass_80_*``,
``...Sm90``); :func:`older_build` says when that is an older architecture than the device's; :func:`call_advice` is the
advice on the call for a library kernel, per topic (:data:`TOPICS`), each number in it with its public source.

Names come demangled (Kineto, Nsight Systems: ``void at::native::...<...>(...)``) or mangled (Nsight Compute may show
``_ZN2at6native...``): a mangled name is read by the identifiers it spells (``<length><identifier>``), no demangler.
Families are decided by content, first rule wins (FlashAttention and cuDNN before CUTLASS, whose types they name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["AMD_FAMILIES", "FAMILIES", "LABELS", "TOPICS", "Origin", "built_for", "call_advice", "classify",
           "older_build"]

LABELS = {"cublas": "cuBLAS", "cutlass": "CUTLASS", "cudnn": "cuDNN", "nccl": "NCCL", "aten": "PyTorch ATen",
          "triton": "Triton", "flash-attention": "FlashAttention", "tensorrt": "TensorRT", "thrust-cub": "CUB/Thrust",
          "user": "user CUDA", "tensile": "Tensile (rocBLAS/hipBLASLt)", "composable-kernel": "Composable Kernel",
          "miopen": "MIOpen", "rocclr": "ROCm runtime (ROCclr)"}
#: The libraries that run only on AMD GPUs: their advice is AMD's whatever the trace's vocabulary.
AMD_FAMILIES = frozenset({"tensile", "composable-kernel", "miopen", "rocclr"})
FAMILIES = tuple(LABELS)
TOPICS = ("memory", "compute", "latency", "occupancy", "small-grid", "tail", "old-build", "stall")
_KNOBS = {"triton": ("BLOCK sizes", "num_warps", "num_stages"),
          "user": ("block size", "launch bounds / maxrregcount", "shared memory tiling")}


@dataclass(frozen=True)
class Origin:
    family: str
    label: str
    library: bool
    built_for: str | None
    evidence: str
    tunable: tuple[str, ...] = ()


# (family, where, how, pattern, note). where: "head" = the function's qualified name (return type, template arguments
# and parameters cut off), "name" = the whole name, "bare" = the whole name when it is one identifier (no parameter
# list: Triton kernels and extern "C" CUDA kernels). Real names each rule was written from are in
# tests/test_kernel_origin.py, with their corpus file or public source.
_RULES: tuple[tuple[str, str, str, str, str], ...] = (
    # ncclKernel_AllReduce_RING_LL_Sum_float (NCCL <= 2.18), ncclDevKernel_AllReduce_Sum_bf16_RING_LL (2.19+); RCCL
    # keeps NCCL's kernel names (ROCm/rccl, src/device/), and its own helpers start rccl (ROCm/rccl, src/misc/).
    ("nccl", "head", "prefix", r"^nccl[A-Za-z]*", ""),
    ("nccl", "head", "prefix", r"^rccl[A-Za-z]*", " (RCCL)"),
    # The ROCm runtime's blit kernels, __amd_rocclr_fillBufferAligned / copyBuffer / ... (ROCm/clr,
    # rocclr/device/blitcl.cpp): hipMemset and hipMemcpy run them; their grid is the runtime's choice.
    ("rocclr", "head", "prefix", r"^__amd_rocclr_\w+", ""),
    # Composable Kernel: ck_tile::kentry<...> (ck_tile, ROCm/composable_kernel include/ck_tile/host/kernel_launch.hpp)
    # and ck::kernel_* (ROCm/composable_kernel include/ck/tensor_operation/gpu/device/); before ATen, which
    # instantiates CK for some of its GEMMs.
    ("composable-kernel", "head", "namespace", r"^(?:ck_tile|ck)::", ""),
    # Tensile's solution names, Cijk_<A><B>_<types>_..._MT64x16x32_MI16x16x1_... (ROCm/Tensile, Tensile/
    # SolutionStructs.py: "Cijk" + the index assignments): rocBLAS and hipBLASLt GEMMs.
    ("tensile", "head", "prefix", r"^Cijk_[A-Za-z]+", ""),
    # MIOpen's kernels: naive_conv_* (ROCm/MIOpen src/kernels/gpu_reference_kernel/naive_conv.cpp) and MIOpen*
    # (src/kernels/MIOpen*.cl, e.g. MIOpenBatchNormFwdTrainSpatial).
    ("miopen", "head", "prefix", r"^(?:naive_conv_\w+|MIOpen\w*|miopen\w*)", ""),
    # FA2 flash_fwd_kernel / pytorch_flash::, FA3 flash::FlashAttnFwdSm90 inside cutlass::device_kernel, PyTorch's
    # memory-efficient attention fmha_cutlassF_* (xFormers): before CUTLASS, whose types their names carry.
    ("flash-attention", "name", "contains", r"(?:pytorch_)?flash::|FlashAttn|flash_attn", ""),
    ("flash-attention", "head", "prefix", r"^flash_(?:fwd|bwd)\w*|^fmha", ""),
    # TensorRT tactics trt_* / *_trt / cask_trt::, Myelin (__myl_*, __mye*, gemm_mha_v2), its layer kernels and the
    # cuTENSOR it links (the unexpanded CUTENSOR_NAMESPACE macro in the name).
    ("tensorrt", "name", "token", r"(?<![A-Za-z0-9])trt(?![A-Za-z0-9])", ""),
    ("tensorrt", "name", "contains", r"(?i)myelin|__my[le]|gemm_mha_v2|CUTENSOR_NAMESPACE", ""),
    ("tensorrt", "head", "prefix", r"^(?:genericReformat|cu[A-Z]\w*Layer|cuEltwise|cuInt8)::|^generatedNativePointwise",
     ""),
    # cuDNN: cudnn::, cask_cudnn, cutlass_cudnn_*, *scudnn* tactics, *_cudnn_infer; its legacy engines; xmma convs.
    ("cudnn", "name", "contains", r"(?i)cudnn", ""),
    ("cudnn", "head", "name", r"^(?:implicit|explicit|precomputed)_convolve_\w+|^(?:wgrad_alg\d+|dgrad\w*)_engine"
     r"|^(?:nchwToNhwc|nhwcToNchw)Kernel", ""),
    ("cudnn", "name", "contains", r"xmma\w*?_(?:fprop|dgrad|wgrad|conv|pooling)|xmma_new::implicit_gemm", ""),
    # cuBLAS/cuBLASLt: nvjet (Hopper/Blackwell), sm90_xmma_gemm_*, <arch>_*gemm_*, the gemv/split-K helpers.
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
    ("aten", "head", "namespace", r"^(?:at|c10)::(?:native::|cuda::)?", ""),
    ("aten", "name", "contains", r"at::native::", ""),
    ("aten", "head", "name", r"(?:^|::)(?:softmax_warp_(?:forward|backward)|cunn_\w+|CatArrayBatchedCopy\w*"
     r"|indexSelect(?:Small|Large)Index|index_select\w*|(?:vectorized|unrolled)_elementwise_kernel)", ""),
    ("aten", "body", "name", r"^(?:elementwise|reduce)_kernel<\d+, ?\d+", ""),
    # torch.compile/Inductor names its kernels triton_<category[:3]>_<fused ops>_<n> (poi, red, per, tem, for ...).
    ("triton", "head", "prefix", r"^triton_(?:poi|red|per|tem|for|spl|unk)_", " (torch.compile/Inductor)"),
    ("triton", "head", "prefix", r"^triton_", ""),
    # A @triton.jit function keeps its Python name: iotrace's are _<op>_kernel (leading underscore, private); Triton
    # <= 2.1 also appended a signature suffix such as _0d1d2d3c. An extern "C" CUDA kernel named so would land here.
    ("triton", "bare", "name", r"^_[a-z][a-z0-9_]*$", " (a @triton.jit function's name, as iotrace's kernels)"),
    ("triton", "bare", "suffix", r"_(?:\d+[cde]{1,2}){2,}$", " (Triton signature suffix)"),
)
_COMPILED = tuple((fam, where, how, re.compile(pat), note) for fam, where, how, pat, note in _RULES)

_ARCH_WORDS = {"maxwell": "5.0", "pascal": "6.0", "volta": "7.0", "turing": "7.5", "ampere": "8.0", "hopper": "9.0",
               "blackwell": "10.0"}
# sm80_ / _sm90_ / cutlass::arch::Sm80 / FlashAttnFwdSm90 / nvjet_sm100_; cutlass_80_ (CUTLASS 2 profiler names);
# the architecture's name (ampere_sgemm, volta_scudnn, xmma_new::Ampere). "sm_32x32"-like tile sizes are not arches.
_BUILT_FOR = re.compile(r"(?:(?<![A-Za-z0-9])[sS][mM]_?|(?<=[a-z])Sm)(?P<sm>\d{2,3})(?![\dx])"
                        r"|(?<![A-Za-z0-9])cutlass_(?P<cutlass>\d{2,3})_"
                        r"|(?<![A-Za-z0-9])(?P<word>(?i:maxwell|pascal|volta|turing|ampere|hopper|blackwell))(?![a-z])")
_DIGITS = re.compile(r"\d+")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _mangled(name: str) -> tuple[str, str]:
    """(head, text) of an Itanium-mangled name: the identifiers it spells joined by ``::``; the head is the leading run
    (the function's nested name). Literals (``Li128E``), substitutions (``S4_``), template parameters (``T0_``) and
    arrays (``A16_``) are skipped by the character before their digits."""
    ids: list[str] = []
    head = 0
    i = 2 + (name[2:3] == "N")
    leading = True
    while i < len(name):
        m = _DIGITS.match(name, i)
        if m is None:
            leading, i = False, i + 1
            continue
        n, end = int(m.group()), m.end()
        ident = name[end:end + n]
        literal = name[i - 1] in "STAv" or re.match(r"L[a-z]", name[i - 2:i]) is not None
        if not literal and n and len(ident) == n and _IDENT.fullmatch(ident):
            ids.append(ident)
            head += leading
            i = end + n
        else:
            leading, i = False, end
    return "::".join(ids[:head]), "::".join(ids)


def _parts(name: str) -> tuple[str, str, str]:
    """(text, body, head): the name with anonymous namespaces spelled ``anon``; without a leading ``void``; the
    qualified function name."""
    text = str(name).strip()
    if text.startswith("_Z"):
        head, text = _mangled(text)
        return text, text, head or text
    text = text.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    body = re.sub(r'^(?:(?:static|__global__|extern "C")\s+)*void\s+', "", text)
    return text, body, re.split(r"[<(\s]", body, maxsplit=1)[0]


def built_for(name: str) -> str | None:
    """The compute capability the name says its binary was built for (``"8.0"`` for ``sm80_xmma_*``), else None."""
    m = _BUILT_FOR.search(_parts(name)[0])
    if m is None:
        return None
    if m.group("word"):
        return _ARCH_WORDS[m.group("word").lower()]
    digits = m.group("sm") or m.group("cutlass")
    if len(digits) == 2 and digits[0] == "1":  # "for_sm10" means the sm_10x family: no 1.x kernel is profiled today
        return f"{digits}.0"
    return f"{int(digits[:-1])}.{digits[-1]}"


def classify(name: str) -> Origin:
    """The origin of the kernel ``name`` (any profiler's spelling); ``user`` when no library pattern matches."""
    text, body, head = _parts(name)
    bare = _IDENT.fullmatch(text) is not None
    for family, where, how, pattern, note in _COMPILED:
        subject = {"head": head, "name": text, "body": body, "bare": text if bare else ""}[where]
        m = pattern.search(subject)
        if m is not None:
            return Origin(family, LABELS[family], family not in _KNOBS, built_for(name),
                          f"{how} {m.group(0)!r}{note}", _KNOBS.get(family, ()))
    return Origin("user", LABELS["user"], False, built_for(name), "no library pattern in the name", _KNOBS["user"])


def _major(cc: str | None) -> int | None:
    try:
        return int(str(cc).split(".")[0])
    except ValueError:
        return None


def older_build(origin: Origin, device_cc: str | None) -> bool:
    """True when the binary was built for an older major architecture than the device's (an sm80 cuBLAS kernel on
    sm_90). A cubin runs only on its own major (NVIDIA, "Hopper Compatibility Guide", section 1.2,
    https://docs.nvidia.com/cuda/hopper-compatibility-guide): the kernel was JIT-compiled from PTX or is an older
    architecture's design, without the newer one's tensor-core instructions. Same major (sm80 on 8.6) is not older."""
    built, device = _major(origin.built_for), _major(device_cc)
    return built is not None and device is not None and built < device


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


def call_advice(origin: Origin, topic: str, amd: bool = False) -> str:
    """The advice on the call for a library kernel on ``topic`` (one of :data:`TOPICS`); ``amd``: the kernel ran on
    an AMD GPU (ROCm's libraries always do). Raises ValueError for a Triton or user CUDA kernel (its advice is about
    knobs, which the caller writes) and for an unknown topic."""
    if not origin.library:
        raise ValueError(f"{origin.label} kernels have knobs ({', '.join(origin.tunable)}): no call advice")
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}: one of {', '.join(TOPICS)}")
    if amd or origin.family in AMD_FAMILIES:
        if origin.family == "nccl":
            return _RCCL[topic]
        if origin.family == "rocclr":
            return _ROCCLR.format(label=origin.label)
        extra = _AMD_EXTRA.get(origin.family, "") if topic in ("compute", "occupancy", "small-grid") else ""
        return _AMD_ADVICE[topic].format(label=origin.label) + extra
    if origin.family == "nccl":
        return _NCCL[topic]
    extra = _EXTRA.get(origin.family, "") if topic in ("memory", "compute", "occupancy") else ""
    return _ADVICE[topic].format(label=origin.label) + extra
