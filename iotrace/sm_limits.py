"""Per-SM hardware limits by compute capability, read from ``data/sm_limits.toml``.

The table is the offline description of an SM that the occupancy calculator needs; each value's
source (NVIDIA's ``cuda_occupancy.h``, the CUDA Programming Guide, real ncu reports) is cited in the
data file itself.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from iotrace.errors import DataFileError, UnknownComputeCapabilityError

__all__ = ["SMLimits", "known_ccs", "parse_cc", "sm_limits"]

_DATA_FILE = "sm_limits.toml"


@dataclass(frozen=True)
class SMLimits:
    """What one streaming multiprocessor of a compute capability can hold."""

    cc: tuple[int, int]
    arch: str
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int
    sub_partitions: int
    smem_per_sm: int
    smem_per_block: int
    smem_per_block_optin: int
    smem_reserved_per_block: int
    smem_alloc_unit: int
    carveouts_kb: tuple[int, ...]
    barrier_slots_per_block_slot: int

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def cc_str(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


_CC_PATTERN = re.compile(r"^(?:sm_?|compute_?)?(\d+)(?:\.(\d+))?[a-z]?$")


def parse_cc(value: str | tuple[int, int]) -> tuple[int, int]:
    """Read a compute capability written as ``8.6``, ``86``, ``sm_86``, ``sm_90a`` or ``(8, 6)``."""
    if isinstance(value, tuple):
        return (int(value[0]), int(value[1]))
    text = str(value).strip().lower()
    match = _CC_PATTERN.match(text)
    if match is None:
        raise UnknownComputeCapabilityError(
            f"compute capability {value!r} is not of the form 8.6, 86 or sm_86",
            "write it as MAJOR.MINOR, e.g. --cc 8.6",
        )
    major, minor = match.group(1), match.group(2)
    if minor is None:  # "86" -> 8.6, "100" -> 10.0, "120" -> 12.0
        if len(major) < 2:
            raise UnknownComputeCapabilityError(
                f"compute capability {value!r} has no minor version", "write it as MAJOR.MINOR, e.g. 8.6"
            )
        major, minor = major[:-1], major[-1]
    return (int(major), int(minor))


@cache
def _table() -> dict[tuple[int, int], SMLimits]:
    try:
        text = resources.files("iotrace.data").joinpath(_DATA_FILE).read_text(encoding="utf-8")
        raw = tomllib.loads(text)
        defaults = raw["defaults"]
        table = {}
        for row in raw["cc"]:
            fields = {**defaults, **row}
            fields["cc"] = parse_cc(fields["cc"])
            fields["carveouts_kb"] = tuple(fields["carveouts_kb"])
            table[fields["cc"]] = SMLimits(**fields)
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise DataFileError(
            f"iotrace/data/{_DATA_FILE} cannot be read ({exc})", "reinstall iotrace or restore the file from git"
        ) from exc
    return table


def known_ccs() -> list[str]:
    """The compute capabilities iotrace has limits for, as ``MAJOR.MINOR`` strings."""
    return [f"{m}.{n}" for (m, n) in sorted(_table())]


def sm_limits(cc: str | tuple[int, int]) -> SMLimits:
    """The SM limits of compute capability ``cc``; an unknown one raises with the known list."""
    key = parse_cc(cc)
    try:
        return _table()[key]
    except KeyError:
        raise UnknownComputeCapabilityError(
            f"no SM limits for compute capability {key[0]}.{key[1]}",
            f"use one of {', '.join(known_ccs())}",
        ) from None
