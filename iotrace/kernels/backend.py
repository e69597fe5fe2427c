"""Where kernels run: Triton on a GPU, or Triton's interpreter on the CPU.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function (``triton.runtime.jit.jit`` returns an
``InterpretedFunction`` then), so the choice must be made before any kernel module is imported:
:func:`iotrace.plugins.manager.prepare_triton` makes it before the plugin manager imports any plugin; an explicit
``TRITON_INTERPRET`` always wins.
"""

from __future__ import annotations

import os

__all__ = ["device", "interpreting"]


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (numpy on the CPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device() -> str:
    """The torch device kernels run on: ``cuda`` on a GPU, ``cpu`` under the interpreter."""
    return "cpu" if interpreting() else "cuda"
