"""The memory bandwidth of a device as a copy loop reaches it, measured in the run that uses it.

A decode step streams every weight once, so its wall is bytes per step over the memory bandwidth (identity 1). The
bandwidth a datasheet states is a peak; what a step can reach on this device today (clocks, ECC and driver on a GPU;
torch's threads, the memory channels populated and whatever else runs on a CPU) is what a large copy reaches: read +
write bytes over its time. The copy is far larger than the last-level cache, so it streams memory, not cache.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from iotrace.errors import InvalidValueError

__all__ = ["copy_bandwidth_bytes_per_s"]

#: The GPU copy: 1 GiB, four times the largest last-level cache in the CardBook (data/cards.toml: the MI300 family's
#: 256 MB Infinity Cache; B200's 126 MB L2 is the largest L2), so every copy streams device memory.
_GPU_COPY_BYTES = 1 << 30
#: The CPU copy, at least: 256 MiB (issue 32, item 8), 8x this project's 32 MiB L3 (sysfs) and twice the largest
#: desktop L3 (AMD Ryzen 9 7950X3D: 128 MB, amd.com product page); a larger last-level cache (a server's) raises it to
#: twice the cache (:func:`_cpu_copy_bytes`).
_CPU_COPY_MIN_BYTES = 256 << 20


def copy_bandwidth_bytes_per_s(device: str = "cuda", nbytes: int | None = None, reps: int = 5) -> float:
    """The memory bandwidth of ``device`` ("cuda", "cuda:1", "cpu") as a copy reaches it: read + write bytes over the
    median time of ``reps`` copies of ``nbytes`` (None: 1 GiB on a GPU, :func:`_cpu_copy_bytes` on a CPU), after one
    untimed copy. What a decode step can reach on this device today: clocks, ECC and driver on a GPU, torch's threads
    and whatever else runs on a CPU. A GPU copy is timed with CUDA events, a CPU copy with ``time.perf_counter``."""
    if reps < 1 or (nbytes is not None and nbytes < 1):
        raise InvalidValueError(f"a copy bandwidth of {nbytes} bytes over {reps} copies", "give nbytes >= 1, reps >= 1")
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    size = nbytes if nbytes is not None else (_GPU_COPY_BYTES if gpu else _cpu_copy_bytes())
    with torch.cuda.device(dev) if gpu else nullcontext():
        src = torch.empty(size, dtype=torch.uint8, device=dev)
        # Written, so its pages are real memory: an untouched CPU buffer reads as the kernel's one shared zero page,
        # which stays in cache and gives a copy many times the DRAM's bandwidth.
        src.fill_(1)
        dst = torch.empty_like(src)
        dst.copy_(src)  # untimed: dst's first touch (page faults on a CPU) and the copy kernel's first launch
        times = []
        for _ in range(reps):
            if gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                dst.copy_(src)
                times.append(time.perf_counter() - t0)
        del src, dst
    return 2 * size / statistics.median(times)


def _cpu_copy_bytes() -> int:
    """The CPU copy's size: :data:`_CPU_COPY_MIN_BYTES`, or twice the last-level cache where that is larger (src and
    dst together are then four times the cache, so neither stays in it between copies)."""
    return max(_CPU_COPY_MIN_BYTES, 2 * _llc_bytes())


def _llc_bytes() -> int:
    """The CPU's last-level cache in bytes, every instance of it summed (Linux sysfs; 0 where it is not readable)."""
    sizes: dict[tuple[int, str], int] = {}  # (level, the CPUs sharing it) -> bytes: each instance once
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level, shared = int((index / "level").read_text()), (index / "shared_cpu_list").read_text().strip()
            text = (index / "size").read_text().strip()  # "32768K"
            sizes[(level, shared)] = int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(
                text[-1:], 1)
        except (OSError, ValueError):
            continue
    top = max((level for level, _ in sizes), default=0)
    return sum(size for (level, _), size in sizes.items() if level == top)
