"""Exact theoretical occupancy (identity 6), following NVIDIA's rules per compute capability.

occupancy = active warps per SM / max warps per SM, where the active blocks per SM are the minimum
of what each resource allows: warps, registers, shared memory, the block slots, and (from CC 9.0 on)
barriers. The rules are those of NVIDIA's ``cuda_occupancy.h`` (``cudaOccMaxActiveBlocksPerMultiprocessor``
and the ``cudaOccMaxBlocksPerSM*Limit`` helpers it calls); iotrace re-derives them here and
``tests/test_occupancy_header.py`` compares every answer with that header compiled by g++.

Shared memory depends on the carveout the driver picks for a launch. Nsight Compute stores it as
``launch__shared_mem_config_size``; pass it as ``smem_config`` to reproduce ncu exactly. Without it the
calculator assumes the largest carveout (the driver's default preference), or ``carveout_pct`` as a
``cudaFuncAttributePreferredSharedMemoryCarveout`` would set it.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass

from iotrace.errors import InvalidValueError
from iotrace.sm_limits import SMLimits, sm_limits

__all__ = [
    "LIMIT_NAMES",
    "MAX_BARRIERS_PER_BLOCK",
    "CurvePoint",
    "OccupancyResult",
    "curve_block_size",
    "curve_registers",
    "curve_shared_mem",
    "occupancy",
    "occupancy_of_recorded_launch",
    "recorded_launch_opted_in",
]

#: The resources that can bound active blocks per SM, in the order ncu's Occupancy section lists them.
LIMIT_NAMES = ("warps", "registers", "shared_mem", "blocks", "barriers")

#: Named barriers per block: PTX ``bar.sync`` takes barrier ids 0..15 (PTX ISA, "Parallel Synchronization
#: and Communication Instructions: bar").
MAX_BARRIERS_PER_BLOCK = 16


@dataclass(frozen=True)
class OccupancyResult:
    """The occupancy of one launch configuration on one compute capability.

    ``limits`` holds, per resource, the blocks per SM that resource alone allows. A resource the launch
    does not use (no shared memory, no registers, no barrier limit on this CC) allows as many blocks as the
    SM has slots; that is how Nsight Compute reports it (``launch__occupancy_limit_*``), and ``unlimited``
    names those resources. ``limiters`` are the used resources whose limit equals the result.
    """

    cc: str
    threads_per_block: int
    registers_per_thread: int
    smem_static: int
    smem_dynamic: int
    smem_reserved: int
    smem_config: int
    barriers: int
    smem_optin: bool
    warps_per_block: int
    max_warps_per_sm: int
    active_blocks_per_sm: int
    active_warps_per_sm: int
    occupancy_pct: float
    limits: dict[str, int]
    limiters: tuple[str, ...]
    unlimited: tuple[str, ...]
    allocated_registers_per_block: int
    allocated_smem_per_block: int
    reason: str
    steps: tuple[str, ...] = ()

    @property
    def launchable(self) -> bool:
        return self.active_blocks_per_sm > 0

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["limiters"] = list(self.limiters)
        out["unlimited"] = list(self.unlimited)
        out["steps"] = list(self.steps)
        out["launchable"] = self.launchable
        return out


@dataclass(frozen=True)
class CurvePoint:
    """One point of a what-if curve: the swept value and the occupancy it gives."""

    x: int
    active_blocks_per_sm: int
    active_warps_per_sm: int
    occupancy_pct: float


def _as_int(name: str, value: object, low: int, high: int | None, hint: str) -> int:
    if isinstance(value, bool):
        raise InvalidValueError(f"{name}={value!r} is not a whole number", hint)
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidValueError(f"{name}={value!r} is not a whole number", hint) from None
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidValueError(f"{name}={number} is out of range: it must be {bound}", hint)
    return number


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _align_to_carveout(limits: SMLimits, size: int) -> int:
    """The smallest supported shared-memory carveout that holds ``size`` bytes (cudaOccAlignUpShmemSizeVoltaPlus)."""
    for kb in limits.carveouts_kb:
        if size <= kb * 1024:
            return kb * 1024
    raise InvalidValueError(
        f"shared memory per SM of {size} bytes exceeds the largest carveout of CC {limits.cc_str} "
        f"({limits.carveouts_kb[-1]} KB)",
        f"use at most {limits.carveouts_kb[-1] * 1024} bytes",
    )


def _preferred_smem_per_sm(limits: SMLimits, carveout_pct: int | None, smem_config: int | None) -> int:
    if smem_config is not None:
        # ncu 2019 stores 48 KB on Turing, which can only be 32 or 64 KB: the hardware rounds up.
        return _align_to_carveout(limits, smem_config)
    if carveout_pct is None or carveout_pct == -1:
        return _align_to_carveout(limits, limits.smem_per_sm)
    return _align_to_carveout(limits, carveout_pct * limits.smem_per_sm // 100)


def _smem_reason(limits: SMLimits, requested: int, reserved: int, allocated: int, optin: bool, largest: int) -> str:
    """Why a block's shared memory cannot launch, in CUDA's terms: the per-block limit as CUDA states it
    (``cudaDevAttrMaxSharedMemoryPerBlockOptin``, 99 KB = 101,376 bytes on CC 8.6) and, separately, the driver's
    reserve that comes on top of it from CC 8.0 (counted once, not folded into the limit)."""
    limit = limits.smem_per_block_optin if optin else limits.smem_per_block
    kind = "opt-in limit" if optin else "limit"
    tail = "" if optin else " without opt-in"
    on_top = limits.cc[0] >= 8
    if allocated > largest and largest < limit + (reserved if on_top else 0):
        return (f"{allocated} bytes of shared memory per block (the driver's {reserved}-byte reserve included) "
                f"exceed the largest carveout of {largest} bytes per SM on CC {limits.cc_str}")
    if on_top:
        return (f"{allocated} bytes of shared memory per block exceed the {kind} of {limit} bytes per block on CC "
                f"{limits.cc_str}{tail} plus the driver's reserve of {reserved} bytes (the kernel asks {requested} "
                "of them)")
    held = f" (the driver's reserve of {reserved} bytes included)" if reserved else ""
    return (f"{allocated} bytes of shared memory per block{held} exceed the {kind} of {limit} bytes per block on "
            f"CC {limits.cc_str}{tail}")


def occupancy(
    cc: str | tuple[int, int] | SMLimits,
    threads_per_block: int,
    registers_per_thread: int,
    smem_static: int = 0,
    smem_dynamic: int = 0,
    *,
    smem_reserved: int | None = None,
    carveout_pct: int | None = None,
    smem_config: int | None = None,
    barriers: int = 1,
    smem_optin: bool = True,
) -> OccupancyResult:
    """Theoretical occupancy of a launch, with every per-resource limit and the ones that bind.

    :param cc: compute capability (``"8.6"``, ``(8, 6)``) or an :class:`SMLimits`.
    :param threads_per_block: 1 to 1024.
    :param registers_per_thread: 0 to 255, as ptxas reports it (``launch__registers_per_thread``).
    :param smem_static: static shared memory per block in bytes.
    :param smem_dynamic: dynamic shared memory per block in bytes.
    :param smem_reserved: shared memory the driver reserves per block (``launch__shared_mem_per_block_driver``);
        defaults to the CC's value (1 KB from CC 8.0 on).
    :param carveout_pct: the preferred shared-memory carveout in percent of the maximum (-1 or None: default,
        the largest); ignored when ``smem_config`` is given.
    :param smem_config: the shared memory per SM the driver configured for the launch, in bytes
        (``launch__shared_mem_config_size``).
    :param barriers: block barriers the kernel uses (the header counts 1 for an ordinary kernel); limits
        occupancy from CC 9.0 on.
    :param smem_optin: the kernel opted in to more than 48 KB per block
        (``cudaFuncAttributeMaxDynamicSharedMemorySize``), as Triton does for every kernel that needs it; plain
        CUDA kernels that did not are limited to 48 KB.
    :raises InvalidValueError: a value the hardware cannot take (e.g. 1025 threads, 256 registers).
    """
    limits = cc if isinstance(cc, SMLimits) else sm_limits(cc)
    hint = "see `iotrace occupancy --help`"
    threads = _as_int("threads_per_block", threads_per_block, 1, limits.max_threads_per_block, hint)
    regs = _as_int("registers_per_thread", registers_per_thread, 0, limits.max_regs_per_thread, hint)
    static = _as_int("smem_static", smem_static, 0, None, hint)
    dynamic = _as_int("smem_dynamic", smem_dynamic, 0, None, hint)
    reserved = limits.smem_reserved_per_block if smem_reserved is None else _as_int(
        "smem_reserved", smem_reserved, 0, limits.smem_per_sm, hint)
    barriers = _as_int("barriers", barriers, 0, MAX_BARRIERS_PER_BLOCK, hint)
    if carveout_pct is not None and smem_config is not None:
        raise InvalidValueError("both carveout_pct and smem_config were given", "pass one of them")
    if carveout_pct is not None:
        carveout_pct = _as_int("carveout_pct", carveout_pct, -1, 100, hint)
    if smem_config is not None:
        smem_config = _as_int("smem_config", smem_config, 0, limits.carveouts_kb[-1] * 1024, hint)

    warps_per_block = -(-threads // limits.warp_size)
    block_slots = limits.max_blocks_per_sm
    raw: dict[str, int | None] = {}
    reason = ""

    # Warps: whole warps are allocated per block.
    raw["warps"] = limits.max_warps_per_sm // warps_per_block

    # Registers: allocated per warp in units of reg_alloc_unit, from one of sub_partitions register files.
    regs_per_warp = _round_up(regs * limits.warp_size, limits.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps_per_block
    # The hardware check assumes warps are spread over every sub-partition at once (cuda_occupancy.h).
    regs_assumed = regs_per_warp * _round_up(warps_per_block, limits.sub_partitions)
    if regs_assumed > limits.regs_per_block or regs_per_block > limits.regs_per_block:
        raw["registers"] = 0
        reason = (f"{regs} registers x {threads} threads needs {regs_assumed} registers per block; "
                  f"the limit is {limits.regs_per_block}")
    elif regs_per_warp == 0:
        raw["registers"] = None
    else:
        warps_per_partition = (limits.regs_per_sm // limits.sub_partitions) // regs_per_warp
        raw["registers"] = warps_per_partition * limits.sub_partitions // warps_per_block

    # Shared memory: the driver's reserve is part of every block's allocation.
    smem_block = _round_up(static + reserved + dynamic, limits.smem_alloc_unit)
    # From CC 8.0 the driver's reserve comes on top of the per-block limit (cudaOccSMemPerBlock).
    smem_block_limit = ((limits.smem_per_block_optin if smem_optin else limits.smem_per_block)
                        + (reserved if limits.cc[0] >= 8 else 0))
    preferred = _preferred_smem_per_sm(limits, carveout_pct, smem_config)
    largest = limits.carveouts_kb[-1] * 1024
    if smem_block > smem_block_limit or smem_block > largest:
        raw["shared_mem"] = 0
        smem_sm = preferred
        reason = reason or _smem_reason(limits, static + dynamic, reserved, smem_block, smem_optin, largest)
    else:
        # A carveout too small for one block is raised to the next size that fits (Volta and later).
        smem_sm = preferred if preferred >= smem_block else _align_to_carveout(limits, smem_block)
        raw["shared_mem"] = smem_sm // smem_block if smem_block > 0 else None

    raw["blocks"] = block_slots
    active = min(v for v in raw.values() if v is not None)

    # Barriers are counted against block slots from CC 9.0 on only, and only for kernels that use one.
    if limits.cc[0] >= 9 and barriers > 0:
        raw["barriers"] = limits.barrier_slots_per_block_slot * block_slots // barriers
        active = min(active, raw["barriers"])
    else:
        raw["barriers"] = None

    if threads > 0 and active == 0 and not reason:
        reason = "no block fits on an SM"
    active_warps = active * warps_per_block
    unlimited = tuple(name for name in LIMIT_NAMES if raw[name] is None)
    steps = [
        f"warps: ceil({threads} / {limits.warp_size}) = {warps_per_block} warps per block; "
        f"{limits.max_warps_per_sm} // {warps_per_block} = {raw['warps']} blocks",
        f"registers: ceil({regs} × {limits.warp_size} / {limits.reg_alloc_unit}) × {limits.reg_alloc_unit} = "
        f"{regs_per_warp} per warp; " + (
            "none used: no limit" if raw["registers"] is None else
            "over the per-block file: 0 blocks" if raw["registers"] == 0 else
            f"({limits.regs_per_sm} / {limits.sub_partitions}) // {regs_per_warp} = "
            f"{(limits.regs_per_sm // limits.sub_partitions) // regs_per_warp} warps per sub-partition × "
            f"{limits.sub_partitions} // {warps_per_block} = {raw['registers']} blocks"),
        f"shared memory: ceil(({static} + {reserved} + {dynamic}) / {limits.smem_alloc_unit}) × "
        f"{limits.smem_alloc_unit} = {smem_block} B per block; " + (
            "none used: no limit" if raw["shared_mem"] is None else
            f"over the limit of {min(smem_block_limit, largest)} B: 0 blocks" if raw["shared_mem"] == 0 else
            f"{smem_sm} B carveout // {smem_block} = {raw['shared_mem']} blocks"),
        f"blocks: {block_slots} slots per SM (CC {limits.cc_str})",
        "barriers: " + ("no limit before CC 9.0 or without barriers" if raw["barriers"] is None else
                        f"{limits.barrier_slots_per_block_slot} × {block_slots} // {barriers} = {raw['barriers']} "
                        "blocks"),
        f"active = min(...) = {active} blocks × {warps_per_block} warps = {active_warps} of "
        f"{limits.max_warps_per_sm} warps = {100.0 * active_warps / limits.max_warps_per_sm:.4g} %",
    ]
    return OccupancyResult(
        cc=limits.cc_str,
        threads_per_block=threads,
        registers_per_thread=regs,
        smem_static=static,
        smem_dynamic=dynamic,
        smem_reserved=reserved,
        smem_config=smem_sm,
        barriers=barriers,
        smem_optin=smem_optin,
        warps_per_block=warps_per_block,
        max_warps_per_sm=limits.max_warps_per_sm,
        active_blocks_per_sm=active,
        active_warps_per_sm=active_warps,
        occupancy_pct=100.0 * active_warps / limits.max_warps_per_sm,
        limits={name: block_slots if raw[name] is None else raw[name] for name in LIMIT_NAMES},
        limiters=tuple(name for name in LIMIT_NAMES if raw[name] is not None and raw[name] == active),
        unlimited=unlimited,
        allocated_registers_per_block=regs_per_block,
        allocated_smem_per_block=smem_block,
        reason=reason,
        steps=tuple(steps),
    )


def recorded_launch_opted_in(cc: str | tuple[int, int] | SMLimits, smem_static: int, smem_dynamic: int) -> bool:
    """Whether a launch a profiler recorded had raised its shared-memory limit above the default per block.

    A block may use more than the default per-block limit (48 KB on every CC so far,
    ``cudaDevAttrMaxSharedMemoryPerBlock``) only after ``cudaFuncSetAttribute(kernel,
    cudaFuncAttributeMaxDynamicSharedMemorySize, ...)`` (CUDA C++ Programming Guide, "Shared Memory" under each
    compute capability), so a recorded launch above it had opted in, or it could not have run. At or below the
    limit a trace cannot tell; such a launch is taken as a plain CUDA kernel that did not, which changes only the
    shared-memory what-if curve beyond 48 KB.

    >>> recorded_launch_opted_in("8.0", 0, 148_992), recorded_launch_opted_in("8.0", 12_288, 0)
    (True, False)
    """
    limits = cc if isinstance(cc, SMLimits) else sm_limits(cc)
    return smem_static + smem_dynamic > limits.smem_per_block


def occupancy_of_recorded_launch(
    cc: str | tuple[int, int] | SMLimits,
    threads_per_block: int,
    registers_per_thread: int,
    smem_static: int = 0,
    smem_dynamic: int = 0,
    *,
    smem_reserved: int | None = None,
    smem_config: int | None = None,
) -> OccupancyResult:
    """Theoretical occupancy of a launch as a profiler recorded it (ncu, nsys, Kineto): the one place that turns a
    recorded launch into :func:`occupancy` inputs, opt-in decided by :func:`recorded_launch_opted_in`.

    Parameters as for :func:`occupancy`; ``smem_reserved`` and ``smem_config`` are the file's
    ``launch__shared_mem_per_block_driver`` and ``launch__shared_mem_config_size`` where it stores them.
    """
    return occupancy(cc, threads_per_block, registers_per_thread, smem_static, smem_dynamic,
                     smem_reserved=smem_reserved, smem_config=smem_config,
                     smem_optin=recorded_launch_opted_in(cc, smem_static, smem_dynamic))


def _point(x: int, result: OccupancyResult) -> CurvePoint:
    return CurvePoint(x, result.active_blocks_per_sm, result.active_warps_per_sm, result.occupancy_pct)


def curve_block_size(base: OccupancyResult, step: int = 16) -> list[CurvePoint]:
    """Occupancy against threads per block (1, then every ``step`` up to the CC's maximum), other inputs as in ``base``.

    Matches Nsight Compute's ``launch__occupancy_per_block_size`` (x = 1, 16, 32, ... 1024).
    """
    sizes = [1, *range(step, sm_limits(base.cc).max_threads_per_block + 1, step)]
    return [_point(n, _rerun(base, threads_per_block=n)) for n in sizes]


def curve_registers(base: OccupancyResult) -> list[CurvePoint]:
    """Occupancy against registers per thread (0 to 255), other inputs as in ``base``.

    Matches Nsight Compute's ``launch__occupancy_per_register_count``.
    """
    top = sm_limits(base.cc).max_regs_per_thread
    return [_point(r, _rerun(base, registers_per_thread=r)) for r in range(0, top + 1)]


def curve_shared_mem(base: OccupancyResult, step: int | None = None) -> list[CurvePoint]:
    """Occupancy against shared memory per block (from 0 in ``step`` bytes up to the opt-in limit).

    x is the whole allocation of a block, the driver's reserve included, as on Nsight Compute's
    ``launch__occupancy_per_shared_mem_size`` (checked against real reports). The carveout stays as in
    ``base`` while a block fits in it, as the driver keeps it for the launch.
    """
    limits = sm_limits(base.cc)
    step = step or limits.smem_alloc_unit * 4
    top = min(limits.smem_per_block_optin + base.smem_reserved, limits.carveouts_kb[-1] * 1024)
    return [_point(s, _rerun(base, smem_static=max(s - base.smem_reserved, 0), smem_dynamic=0))
            for s in range(0, top + 1, step)]


def _rerun(base: OccupancyResult, **change: int) -> OccupancyResult:
    args = {
        "threads_per_block": base.threads_per_block,
        "registers_per_thread": base.registers_per_thread,
        "smem_static": base.smem_static,
        "smem_dynamic": base.smem_dynamic,
        "smem_reserved": base.smem_reserved,
        **change,
    }
    return occupancy(base.cc, smem_config=base.smem_config, barriers=base.barriers, smem_optin=base.smem_optin,
                     **args)
