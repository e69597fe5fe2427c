"""Names shared by the timeline formats (Nsight Systems SQLite, Kineto): what kind of host API call a name is, and
what direction and memory kinds a copy has.

API calls (the ``api_calls`` table): :func:`api_call_name` drops the CUPTI callback's version suffix from a name
(Nsight Systems writes ``cudaMemcpy_v3020``, ``cudaLaunchKernel_v7000``: the ``_v`` + CUDA version of CUPTI's
callback ids in ``cupti_runtime_cbid.h``, e.g. ``CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020``; Kineto writes the bare
name) and :func:`api_call_kind` sorts it into one of :data:`API_CALL_KINDS` by the names in :data:`API_CALL_NAMES`
and :data:`API_CALL_PREFIXES`, the sets the Nsight Systems expert-system rules are about (Nsight Systems User Guide,
"Expert Systems Analysis": ``cuda_memcpy_sync``, ``cuda_memset_sync``, ``cuda_api_sync``).

Copies (the ``transfers`` table): CUPTI's copy kinds and memory kinds by their enum names (the part after ``KIND_``),
as Nsight Systems' ``ENUM_CUDA_MEMCPY_OPER`` / ``ENUM_CUDA_MEM_KIND`` tables and Kineto's event names spell them, to
a direction (:data:`COPY_KINDS`) and a memory kind (:data:`MEMORY_KINDS`).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np

from iotrace.trace.tables import API_CALL_KINDS

__all__ = ["API_CALL_KINDS", "API_CALL_NAMES", "API_CALL_PREFIXES", "COPY_KINDS", "MEMORY_KINDS", "NSYS_MEMCPY_OPER",
           "NSYS_MEM_KIND", "api_call_kind", "api_call_name", "classify_calls", "copy_kind", "kineto_transfer",
           "memory_kind"]

#: Calls of these exact names (after :func:`api_call_name`, and without a per-thread-stream ``_ptsz``/``_ptds`` or
#: driver ``_v2`` suffix) are of that kind. ``sync``: the calls that block the host until the GPU (a device, stream or
#: event) catches up, and the stream waits on an event (CUDA Runtime API, "Device Management", "Stream Management",
#: "Event Management"; Driver API "Context/Stream/Event Management"); ``graph``: CUDA graph launches (CUDA Runtime
#: API "Graph Management"). The ``hip`` names are HIP's one-for-one mirrors of the CUDA runtime calls (HIP Runtime
#: API reference, rocm.docs.amd.com), which a ROCm Kineto trace records under ``cuda_runtime``.
API_CALL_NAMES: dict[str, frozenset[str]] = {
    "sync": frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
                       "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent",
                       "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipStreamWaitEvent"}),
    "graph": frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}),
    # The legacy launches: the runtime's cudaLaunch (before CUDA 7.0's cudaLaunchKernel) and the driver's cuLaunch*.
    "launch": frozenset({"cudaLaunch", "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync"}),
}
#: Calls whose name (as for :data:`API_CALL_NAMES`) starts with one of these are of that kind: every kernel launch
#: variant (``cudaLaunchKernelExC``, ``cuLaunchKernelEx``, ``cudaLaunchCooperativeKernelMultiDevice``), every copy
#: (``cudaMemcpyAsync``, ``cudaMemcpy2D``, ``cudaMemcpyToSymbol``, ``cuMemcpyHtoD_v2``) and every set.
API_CALL_PREFIXES: dict[str, tuple[str, ...]] = {
    "launch": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel",
               "hipLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipExtLaunchKernel",
               "hipLaunchCooperativeKernel"),
    "memcpy": ("cudaMemcpy", "cuMemcpy", "hipMemcpy"),
    "memset": ("cudaMemset", "cuMemset", "hipMemset"),
}

#: CUPTI's callback-id suffix: ``_v`` and the CUDA version the call appeared in (3020, 7000, 10000, 12000). Shorter
#: ``_v2`` suffixes are part of the API's own name (``cuMemcpyHtoD_v2``, ``cudaGetDeviceProperties_v2``) and stay.
_CALLBACK_SUFFIX = re.compile(r"_v\d{4,}$")
#: What :func:`api_call_kind` also ignores: the per-thread default stream variants (``cudaMemcpyAsync_ptsz``, CUDA
#: Runtime API "API synchronization behavior") and the driver's versioned entry points (``cuMemcpyHtoD_v2``).
_VARIANT_SUFFIX = re.compile(r"(_ptsz|_ptds)?(_v\d+)?$")


@cache
def api_call_name(raw: str) -> str:
    """``raw`` without CUPTI's callback-version suffix: ``cudaMemcpy_v3020`` -> ``cudaMemcpy``."""
    return _CALLBACK_SUFFIX.sub("", raw)


@cache
def api_call_kind(name: str) -> str:
    """The kind (one of :data:`API_CALL_KINDS`) of an API call named ``name`` (with or without its version suffix):
    an exact name of :data:`API_CALL_NAMES`, else a prefix of :data:`API_CALL_PREFIXES`, else "other"."""
    base = _VARIANT_SUFFIX.sub("", api_call_name(name))
    for kind, names in API_CALL_NAMES.items():
        if base in names:
            return kind
    for kind, prefixes in API_CALL_PREFIXES.items():
        if base.startswith(prefixes):
            return kind
    return "other"


def classify_calls(raw: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each call's name (:func:`api_call_name`; None where the file gives no string) and kind, as object arrays.

    Traces repeat a few dozen names over 10,000s of calls: each distinct name is looked at once."""
    try:
        distinct = set(raw)
    except TypeError:  # a damaged name (a list, an object) is no name
        raw = [value if type(value) is str else None for value in raw]
        distinct = set(raw)
    index = {value: i for i, value in enumerate(distinct)}
    names = np.array([api_call_name(v) if type(v) is str else None for v in index] or [None], dtype=object)
    kinds = np.array([api_call_kind(v) if type(v) is str else "other" for v in index] or ["other"], dtype=object)
    codes = np.fromiter(map(index.__getitem__, raw), dtype=np.int64, count=len(raw))
    return names[codes], kinds[codes]


#: CUPTI's copy kinds (``CUpti_ActivityMemcpyKind``, https://docs.nvidia.com/cupti/api/group__CUPTI__ACTIVITY__API.html,
#: the part after ``CUPTI_ACTIVITY_MEMCPY_KIND_``; Nsight Systems' ``ENUM_CUDA_MEMCPY_OPER`` names the same ones
#: ``CUDA_MEMCPY_KIND_...`` and adds the unified-memory migrations ``UVM_...``) -> (direction, label). A CUDA array
#: is device memory, so an array copy has the direction of the device copy it is (HtoA: HtoD); the label keeps the
#: file's own word for ``transfers.kind`` ("memcpy HtoA").
COPY_KINDS: dict[str, tuple[str, str]] = {
    "HTOD": ("HtoD", "HtoD"), "DTOH": ("DtoH", "DtoH"), "HTOA": ("HtoD", "HtoA"), "ATOH": ("DtoH", "AtoH"),
    "ATOA": ("DtoD", "AtoA"), "ATOD": ("DtoD", "AtoD"), "DTOA": ("DtoD", "DtoA"), "DTOD": ("DtoD", "DtoD"),
    "HTOH": ("HtoH", "HtoH"), "PTOP": ("PtoP", "PtoP"),
    # Unified Memory page migrations (nsys labels "Unified Host-to-Device" etc.; its stats reports call them "CUDA
    # Unified Memory memcpy HtoD"): the driver moving a managed allocation's pages, not a cudaMemcpy call.
    "UVM_HTOD": ("HtoD", "HtoD (unified memory)"), "UVM_DTOH": ("DtoH", "DtoH (unified memory)"),
    "UVM_DTOD": ("DtoD", "DtoD (unified memory)"),
}
#: CUPTI's memory kinds (``CUpti_ActivityMemoryKind``, same page, after ``CUPTI_ACTIVITY_MEMORY_KIND_``; Kineto's
#: words upper-cased with "_" for " ": "Device Static" -> DEVICE_STATIC) -> ``src_kind``/``dst_kind``. Static device
#: and managed memory (``__device__``/``__managed__`` variables) are device and managed memory; UNKNOWN, and
#: ROCm's plain "Host", say nothing of pinning and read as missing.
MEMORY_KINDS: dict[str, str] = {"PAGEABLE": "pageable", "PINNED": "pinned", "DEVICE": "device", "ARRAY": "array",
                                "MANAGED": "managed", "DEVICE_STATIC": "device", "MANAGED_STATIC": "managed"}

#: Nsight Systems' own numbering of copy kinds and memory kinds, for an export without its ENUM tables (2022.2): the
#: ``ENUM_CUDA_MEMCPY_OPER`` and ``ENUM_CUDA_MEM_KIND`` rows, by id, of every corpus export that has them (2023.1 to
#: 2025.3, identical). Copy kinds 0-10 are CUPTI's values; memory kinds are NOT: nsys stores CUPTI's value minus
#: one and moves UNKNOWN to 7 (CUPTI: 0 UNKNOWN, 1 PAGEABLE, 2 PINNED, 3 DEVICE, ...). The 2022.2 export uses nsys's
#: numbering too: its host-to-device copies are srcKind 0, dstKind 2, a device destination only in nsys's numbers.
NSYS_MEMCPY_OPER: tuple[str, ...] = ("UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH",
                                     "PTOP", "UVM_HTOD", "UVM_DTOH", "UVM_DTOD")
NSYS_MEM_KIND: tuple[str, ...] = ("PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC",
                                  "MANAGED_STATIC", "UNKNOWN")


def copy_kind(word: str | None) -> tuple[str | None, str | None]:
    """(direction, label) of a copy-kind enum word ("HTOD", "UVM_DTOH"; Kineto's "HtoD" too); (None, None) for
    UNKNOWN and anything else."""
    return COPY_KINDS.get(str(word).upper(), (None, None)) if word is not None else (None, None)


def memory_kind(word: str | None) -> str | None:
    """``src_kind``/``dst_kind`` of a memory-kind enum word ("PAGEABLE"; Kineto's "Device Static" too), or None."""
    return MEMORY_KINDS.get(str(word).upper().replace(" ", "_")) if word is not None else None


#: Kineto's copy and set names (libkineto ``CuptiActivity.cpp`` ``memcpyName``: "Memcpy {kind} ({src} -> {dst})" with
#: ``cupti_strings.cpp`` ``memcpyKindString``/``memoryKindString``; sets "Memset ({kind})"; roctracer's "Memcpy HtoD
#: (Host -> Device)" alike).
_KINETO_MEMCPY = re.compile(r"Memcpy (\S+) \((.+?) -> (.+?)\)")
_KINETO_MEMSET = re.compile(r"Memset \((.+)\)")


@cache
def kineto_transfer(name: str) -> tuple[str | None, str | None, str | None]:
    """(copy_kind, src_kind, dst_kind) of a Kineto copy or set event named ``name``; a set has no copy kind and
    its memory as the destination."""
    copy = _KINETO_MEMCPY.fullmatch(name)
    if copy:
        return copy_kind(copy[1])[0], memory_kind(copy[2]), memory_kind(copy[3])
    memset = _KINETO_MEMSET.fullmatch(name)
    return (None, None, memory_kind(memset[1])) if memset else (None, None, None)
