"""Where kernels run: Triton on a GPU, or Triton's interpreter on the CPU.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, so the choice must be made
before any kernel module is imported (../shared/reference/env-probe.md, section 1). The plugin manager
calls :func:`prepare_triton` first; an explicit ``TRITON_INTERPRET`` always wins.
"""

from __future__ import annotations

import os

__all__ = ["device", "interpreting", "prepare_triton"]


def prepare_triton() -> None:
    """Turn the Triton interpreter on when no CUDA device is visible and the user has not chosen."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 1 keeps its default
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (numpy on the CPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device() -> str:
    """The torch device kernels run on: ``cuda`` on a GPU, ``cpu`` under the interpreter."""
    return "cpu" if interpreting() else "cuda"
