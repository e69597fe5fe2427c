"""Step 1's identity half: the card, driver, CUDA, clocks and library versions this run used."""

from __future__ import annotations

import platform
import shutil
import subprocess
from typing import Any

from iotrace.cards import Card
from iotrace.checkout import git_info

#: nvidia-smi's query fields for what the run depends on (``nvidia-smi --help-query-gpu`` lists them).
_SMI_FIELDS = ("name", "driver_version", "compute_cap", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit",
               "memory.total")


def _nvidia_smi() -> dict[str, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        found = subprocess.run([smi, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    first = found.stdout.strip().splitlines()[:1]
    values = [v.strip() for v in first[0].split(",")] if first else []
    return dict(zip(_SMI_FIELDS, values, strict=False)) if len(values) == len(_SMI_FIELDS) else {}


def collect(card: Card, gpu: bool) -> dict[str, Any]:
    """Everything someone needs to compare or rerun this self-check."""
    import torch
    import triton

    from iotrace import __version__

    env: dict[str, Any] = {
        "card": card.key, "card_name": card.name, "card_origin": getattr(card, "origin", "cardbook"),
        "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
        "iotrace": __version__, "git": git_info(), "machine": platform.machine(),
        "cuda_runtime": torch.version.cuda, "gpu": gpu,
    }
    if gpu:
        props = torch.cuda.get_device_properties(0)
        env.update({"device": props.name, "cc": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
                    "memory_gib": round(props.total_memory / 2**30, 1)})
        env.update({f"smi_{key.replace('.', '_')}": value for key, value in _nvidia_smi().items()})
    return env
