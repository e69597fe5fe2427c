"""Energy and power over a timed window, and device memory, from NVML (``nvidia-ml-py``, NVIDIA's own binding).

Energy comes from the board's cumulative energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules, Volta
and newer), read at both ends of the window, so J/token needs no sampling. Mean power is energy over time. NVML's
instantaneous power reading is averaged over about one second on recent cards (NVML API reference,
``nvmlDeviceGetPowerUsage``; nvidia-smi's ``power.draw.average``), and the energy counter is updated on a similar
cadence, so a window shorter than :data:`MIN_WINDOW_S` is flagged as too short to trust instead of being reported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from iotrace.errors import IotraceError

__all__ = ["MIN_WINDOW_S", "EnergyReading", "NvmlUnavailableError", "PowerMeter", "nvml_memory_used"]

#: The shortest window whose energy is reported as a figure (NVML averages power over about a second).
MIN_WINDOW_S = 1.0


class NvmlUnavailableError(IotraceError):
    """NVML is absent or refuses the query."""


@dataclass(frozen=True)
class EnergyReading:
    joules: float | None
    seconds: float
    tokens: int
    #: why the figures are missing or flagged, "" when they stand
    note: str

    @property
    def trusted(self) -> bool:
        return self.joules is not None and not self.note

    @property
    def mean_watts(self) -> float | None:
        return self.joules / self.seconds if self.joules is not None and self.seconds > 0 else None

    @property
    def joules_per_token(self) -> float | None:
        return self.joules / self.tokens if self.joules is not None and self.tokens else None

    def to_dict(self) -> dict[str, object]:
        return {"joules": self.joules, "seconds": self.seconds, "tokens": self.tokens, "mean_w": self.mean_watts,
                "j_per_token": self.joules_per_token, "trusted": self.trusted, "note": self.note}


def _nvml():
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailableError("NVML's Python binding (nvidia-ml-py) is not installed",
                                   "pip install 'iotrace[model]', or pass --no-power") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailableError(f"NVML refused to start ({exc})",
                                   "check the driver with nvidia-smi, or pass --no-power") from None
    return pynvml


class PowerMeter:
    """Energy of GPU ``index`` over ``with meter.window(tokens) as reading`` blocks."""

    def __init__(self, index: int = 0) -> None:
        self.nvml = _nvml()
        try:
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except self.nvml.NVMLError as exc:
            raise NvmlUnavailableError(f"NVML cannot read GPU {index}'s energy counter ({exc})",
                                       "energy needs a Volta or newer board and a driver that exposes it; "
                                       "pass --no-power") from None

    def start(self) -> tuple[float, float]:
        return time.perf_counter(), float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def stop(self, started: tuple[float, float], tokens: int) -> EnergyReading:
        t0, e0 = started
        e1 = float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        seconds = time.perf_counter() - t0
        joules = (e1 - e0) / 1000.0
        note = "" if seconds >= MIN_WINDOW_S else (
            f"window {seconds:.2f} s is shorter than NVML's ~{MIN_WINDOW_S:.0f} s power averaging: raise --gen-tokens "
            "or --reps")
        return EnergyReading(joules, seconds, tokens, note)

    def memory_used(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)


def nvml_memory_used(index: int = 0) -> int | None:
    """Device memory in use on GPU ``index`` by every process (NVML), or None without NVML."""
    try:
        return PowerMeter(index).memory_used()
    except NvmlUnavailableError:
        return None
