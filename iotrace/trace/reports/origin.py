"""Where a kernel comes from, read from its name alone, so that the advice fits what the user can change.

A kernel from cuBLAS, CUTLASS, cuDNN, NCCL, PyTorch's ATen, FlashAttention, TensorRT, CUB/Thrust, an inference
engine's library (vLLM, FlashInfer, TensorRT-LLM, Marlin, llama.cpp's ggml-cuda, AITER ...) runs a library's source:
the user changes the *call* (shapes, dtype, TF32, batching, fusion, the library build, the engine's flags), never block
sizes or Triton knobs in it. A Triton or user CUDA kernel has knobs. A communication library's kernel (NCCL/RCCL,
vLLM's custom all-reduce, PyTorch symmetric memory, NVSHMEM, DeepEP, TensorRT-LLM's all-reduce) is
:attr:`Origin.communication`: its findings are exposed time and overlap, never grid or occupancy advice.

:func:`classify` reads the family (the table is :mod:`iotrace.trace.reports.origin_rules`), and the compute
capability the binary was built for where the name says it (``sm80_xmma_*``, ``ampere_*``, ``cutlass_80_*``,
``...Sm90``); :func:`older_build` says when that is an older architecture than the device's; :func:`call_advice` is the
advice on the call for a library kernel, per topic (:data:`TOPICS`), each number in it with its public source (the
text is :mod:`iotrace.trace.reports.origin_advice`).

Names come demangled (Kineto, Nsight Systems: ``void at::native::...<...>(...)``) or mangled (Nsight Compute may show
``_ZN2at6native...``): a mangled name is read by the identifiers it spells (``<length><identifier>``), no demangler.
Families are decided by content, first rule wins (FlashAttention and cuDNN before CUTLASS, whose types they name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from iotrace.trace.reports.origin_advice import library_advice
from iotrace.trace.reports.origin_rules import AMD_FAMILIES, COMMUNICATION, KNOBS, LABELS, RULES

__all__ = ["AMD_FAMILIES", "COMMUNICATION", "FAMILIES", "LABELS", "TOPICS", "Origin", "built_for", "call_advice",
           "classify", "is_communication", "older_build"]

FAMILIES = tuple(LABELS)
TOPICS = ("memory", "compute", "latency", "occupancy", "small-grid", "tail", "old-build", "stall")


@dataclass(frozen=True)
class Origin:
    family: str
    label: str
    library: bool
    built_for: str | None
    evidence: str
    tunable: tuple[str, ...] = ()
    #: The kernel moves data between GPUs (:data:`COMMUNICATION`): its findings are exposed time and overlap, not
    #: grid, occupancy or stall advice.
    communication: bool = False


_COMPILED = tuple((fam, where, how, re.compile(pat), note) for fam, where, how, pat, note in RULES)

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


@lru_cache(maxsize=65536)
def classify(name: str) -> Origin:
    """The origin of the kernel ``name`` (any profiler's spelling); ``user`` when no library pattern matches.
    Cached: a trace repeats its names thousands of times, and the time split asks once per launch."""
    text, body, head = _parts(name)
    bare = _IDENT.fullmatch(text) is not None
    for family, where, how, pattern, note in _COMPILED:
        subject = {"head": head, "name": text, "body": body, "bare": text if bare else ""}[where]
        m = pattern.search(subject)
        if m is not None:
            return Origin(family, LABELS[family], family not in KNOBS, built_for(name),
                          f"{how} {m.group(0)!r}{note}", KNOBS.get(family, ()), family in COMMUNICATION)
    return Origin("user", LABELS["user"], False, built_for(name), "no library pattern in the name", KNOBS["user"])


def is_communication(name: object) -> bool:
    """True where the kernel ``name`` is a communication library's (NCCL/RCCL, vLLM's custom all-reduce, PyTorch
    symmetric memory, NVSHMEM, DeepEP, TensorRT-LLM's all-reduce): what the time split counts as communication."""
    return classify(str(name)).communication


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


def call_advice(origin: Origin, topic: str, amd: bool = False) -> str:
    """The advice on the call for a library kernel on ``topic`` (one of :data:`TOPICS`); ``amd``: the kernel ran on
    an AMD GPU (ROCm's libraries always do). Raises ValueError for a Triton or user CUDA kernel (its advice is about
    knobs, which the caller writes) and for an unknown topic."""
    if not origin.library:
        raise ValueError(f"{origin.label} kernels have knobs ({', '.join(origin.tunable)}): no call advice")
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}: one of {', '.join(TOPICS)}")
    return library_advice(origin.family, origin.label, topic, amd)
