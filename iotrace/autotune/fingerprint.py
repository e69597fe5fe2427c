"""The card fingerprint a measurement is valid for: name, compute capability, SM count, driver and CUDA versions.

A result measured under one driver or on a cut-down part (fewer SMs) must not answer for another, so the cache
keys on all five. Static work (no GPU) has no driver: it is keyed as ``driver=none``.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["Fingerprint", "fingerprint", "triton_version"]


@dataclass(frozen=True)
class Fingerprint:
    key: str
    name: str
    cc: str
    sm_count: int
    driver: str
    cuda: str

    def text(self) -> str:
        """One line for the cache key: ``NVIDIA H100 SXM|9.0|132|driver 560.35|cuda 12.6``."""
        return f"{self.name}|{self.cc}|{self.sm_count}|driver {self.driver}|cuda {self.cuda}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@functools.cache
def _driver_version() -> str:
    """The NVIDIA driver's version from nvidia-smi (torch does not expose it); "unknown" without the tool."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    try:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else "unknown"


def fingerprint(card: Card, on_gpu: bool) -> Fingerprint:
    """The fingerprint of ``card``; with ``on_gpu`` the local driver and the CUDA runtime torch was built with."""
    driver = cuda = "none"
    name, sm_count = card.name, card.sm_count
    if on_gpu:  # the device's own name and SM count, not the CardBook's: a cut-down part must not share entries
        import torch

        from iotrace.cards import local_device

        driver, cuda = _driver_version(), str(torch.version.cuda or "unknown")
        local = local_device()
        if local is not None:
            name, sm_count = local["name"], local["sm_count"]
    return Fingerprint(card.key, name, card.cc or "none", sm_count, driver, cuda)


@functools.cache
def triton_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        return "none"
