"""The static resources one compiled kernel asks of an SM, and the ``ptxas -v`` log they are read from."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from iotrace.compiler.errors import CompileError
from iotrace.sm_limits import parse_cc

__all__ = ["Resources", "cc_number", "parse_ptxas_log"]


@dataclass(frozen=True)
class Resources:
    """What one compiled kernel asks of an SM, per the compiler for one target."""

    target: str
    kernel: str
    registers: int
    static_smem: int
    dynamic_smem: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    barriers: int
    threads_per_block: int
    grid: tuple[int, int, int]
    compiler: str

    @property
    def shared_mem_bytes(self) -> int:
        return self.static_smem + self.dynamic_smem

    @property
    def spills(self) -> int:
        """Bytes spilled to local memory per thread (stores + loads), as ptxas reports them."""
        return self.spill_stores + self.spill_loads

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(shared_mem_bytes=self.shared_mem_bytes, spills=self.spills)
        return out


_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict[str, int]:
    """Registers, barriers, static shared memory, stack and spills from ``ptxas -v`` output (its last function)."""
    used = _USED.findall(log)
    if not used:
        raise CompileError(f"no 'Used N registers' line in the ptxas log: {log.strip()[:200]!r}",
                           "check that ptxas ran with -v")
    regs, barriers = used[-1]
    spill = _SPILL.findall(log)
    stack, stores, loads = (int(v) for v in spill[-1]) if spill else (0, 0, 0)
    smem = _SMEM.findall(log)
    return {"registers": int(regs), "barriers": int(barriers or 0), "static_smem": int(smem[-1]) if smem else 0,
            "stack_bytes": stack, "spill_stores": stores, "spill_loads": loads}


def cc_number(cc: str | tuple[int, int]) -> int:
    """``"8.6"`` or ``(8, 6)`` -> 86, the number in ``sm_86`` and in Triton's ``GPUTarget``."""
    major, minor = parse_cc(cc)
    return major * 10 + minor
