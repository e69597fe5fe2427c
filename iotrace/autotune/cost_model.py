"""The cost model: a predicted time for one config, from the kernel's cost, the card and the compiled resources.

Every term is modelled, never measured, and each is reported beside the prediction so a reader can check it:

* **Roofline** (identity 4; Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009): the time floor is
  ``max(FLOPs / peak, bytes / bandwidth)`` with the card's CardBook peak for the kernel's dtype.
* **Tile efficiency**: a tile that overhangs a ragged edge still computes the padded part (masked lanes issue all
  the same). ``size / (ceil(size / block) · block)`` per tiled dimension, multiplied; this is the "tile
  quantization" of NVIDIA's *Matrix Multiplication Background User's Guide* (Deep Learning Performance docs).
  Masked loads fetch nothing, so it scales compute time only.
* **SM balance** (the tail effect): blocks are handed to SMs as they free up, so the busiest SM runs
  ``ceil(blocks / SMs)`` blocks while the average runs ``blocks / SMs``; the ratio is the useful fraction of SM time.
  It is the "wave quantization" of the same NVIDIA guide, counted per SM because blocks resident together share
  the SM's throughput. Waves (``blocks / (active blocks per SM · SMs)``) are reported beside it.
* **Latency hiding** (Little's law, L = λW, Little 1961; for GPUs Volkov, "Understanding Latency Hiding on
  GPUs", PhD thesis, UC Berkeley 2016): to stream at bandwidth B across a latency W, ``B · W`` bytes must be in
  flight. A resident block can have in flight at most what lands in its shared memory (a pipelined kernel's
  staged tiles) plus what its registers can hold (threads x registers x 4 bytes), and never more than the block
  moves in all (``bytes / blocks``); the blocks resident at once (occupancy x SMs, capped by the grid) give the
  bytes in flight. An upper bound: Little's law then says whether even that is enough. Compute needs at least
  one warp per scheduler (Volkov, "Better Performance at Lower Occupancy", GTC 2010: instruction-level
  parallelism stands in for more warps).
* **Operand reuse** (a hierarchical roofline, Yang et al., "Hierarchical Roofline Analysis", arXiv:2009.05257,
  at the shared-memory level): a tensor-core tile reads its operands from shared memory, and a warp computing a
  ``w_m x w_n`` piece of a ``BLOCK_M x BLOCK_N`` output tile reads ``(w_m + w_n) · BLOCK_K`` elements per
  ``2 · w_m · w_n · BLOCK_K`` FLOPs. With square warp tiles (area ``BLOCK_M · BLOCK_N / warps``) that is an
  intensity of ``sqrt(BLOCK_M · BLOCK_N / warps) / bytes per element`` FLOP per shared-memory byte, against the
  SMs' shared-memory bandwidth of 32 banks x 4 bytes per clock each (CUDA C++ Programming Guide, "Shared Memory")
  at the card's boost clock. Small tiles starve the tensor cores this way long before DRAM does. Applied to
  kernels whose configs have a ``BLOCK_M x BLOCK_N`` dot tile (or that name theirs in ``dot_tile``) and a
  tensor-core peak.
* **Operand traffic through L2** (GEMM-shaped kernels, whose ``BLOCK_M``/``BLOCK_N``/``BLOCK_K`` tile three shape
  dimensions): every output tile streams its A row-panel and B column-panel from L2, ``tiles_m · tiles_n ·
  (BLOCK_M + BLOCK_N) · K · bytes`` in all, hits or not. L2 read bandwidth is 5120 bytes per clock on A100 for
  108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020: 2.3x V100's 2048), about 47 bytes per clock
  per SM; the same per-SM figure at each card's boost clock stands in for cards whose whitepaper gives none.
  It is one more roof (hierarchical roofline): small tiles re-read their operands many times.
* **Software pipelining** (``num_stages``; GEMM-shaped kernels, whose main loop steps over the reduction by
  ``BLOCK_K``): Triton's compiler software-pipelines the loop over ``num_stages`` buffers, issuing the loads of
  later iterations while the current one computes (the ``num_stages`` parameter of ``triton.Config`` and the
  matrix-multiplication tutorial, Triton docs; the same multi-stage scheme as the asynchronous copies of the
  CUDA C++ Programming Guide, "Asynchronous Data Copies" / ``cuda::pipeline``). By Little's law each stage
  buffer is held for at least the load latency W plus one iteration's compute t, so the R blocks resident on an
  SM consume at most ``R · stages / (W + t)`` tiles per second, against the ``1 / t`` the SM can compute: compute
  runs at ``min(1, R · stages · t / (W + t))`` of its rate, where ``t = 2 · BLOCK_M · BLOCK_N · BLOCK_K / (the
  SM's share of the compute roof)``. An upper bound (loads are assumed to start as soon as a buffer frees). More
  stages cost shared memory, which the occupancy already charges (fewer resident blocks, or a config pruned).
  Beyond the stages that cover W, more change nothing here, so such configs tie. For other kernels the model
  does not see ``num_stages`` except through shared memory (occupancy, bytes in flight) and says so
  (``Prediction.pipelining`` is None).
* **Spills**: ptxas's spill bytes per thread times the threads launched, added to the memory traffic (a lower
  bound: a spill inside a loop repeats).
* **Achievable ceilings** (:mod:`iotrace.ceilings`): compute divides by the measured share of the tensor-core peak
  that cuBLAS reaches, memory by the measured share of the bandwidth a copy reaches, never by the datasheet figures
  (the roofline floor stays the datasheet's); and no launch finishes under :data:`~iotrace.ceilings.LAUNCH_FLOOR_US`.

Ties (a compute-bound plateau) are broken in :func:`iotrace.autotune.static.rank` toward more operand reuse per
warp, as Volkov's "Better Performance at Lower Occupancy" argues, then toward higher occupancy.

Unknown to this model, and left to measurement: cache reuse between tiles (L2 hit rates), bank conflicts,
instruction mix. Recorded GPU sweeps (``--replay``) are how its ranking is judged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from iotrace.ceilings import LAUNCH_FLOOR_US, achievable

if TYPE_CHECKING:
    from iotrace.cards import Card
    from iotrace.compiler import Resources
    from iotrace.occupancy import OccupancyResult
    from iotrace.plugins.spec import Config, Cost, KernelSpec, Shape

__all__ = ["BYTES_PER_REGISTER", "DRAM_LATENCY_S", "L2_BYTES_PER_CLOCK_PER_SM", "LAUNCH_GAP_US",
           "SMEM_BYTES_PER_CLOCK", "Prediction", "dot_tile", "operand_traffic", "pipeline_step", "predict", "tile_dims",
           "tile_efficiency"]

#: A register holds 32 bits (CUDA C++ Programming Guide, "Hardware Multithreading": registers are 32-bit).
BYTES_PER_REGISTER = 4

#: DRAM load latency, a round figure: pointer-chasing microbenchmarks put global-memory misses at several hundred ns
#: on recent NVIDIA parts (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking",
#: arXiv:1804.06826; Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture",
#: arXiv:2402.13499). One figure for every card: recorded sweeps are what calibrate it.
DRAM_LATENCY_S = 600e-9

#: Shared-memory bandwidth of one SM: 32 banks of 4 bytes per clock (CUDA C++ Programming Guide, "Shared Memory",
#: compute capability 5.x and later).
SMEM_BYTES_PER_CLOCK = 32 * 4

#: L2 read bandwidth per SM per clock: A100's 5120 bytes/clock over its 108 SMs (NVIDIA A100 Tensor Core GPU
#: Architecture whitepaper, 2020), used for every card (a stand-in where the vendor states none).
L2_BYTES_PER_CLOCK_PER_SM = 5120 / 108

#: Added per launch after the first for kernels that make several (split-KV decode and its combine): a dependent
#: launch costs a few µs of launch overhead (CUDA C++ Best Practices Guide, "Concurrent Kernel Execution" and the
#: CUDA Graphs section, which exist to remove it). A round figure, like DRAM_LATENCY_S.
LAUNCH_GAP_US = 2.0


@dataclass(frozen=True)
class Prediction:
    """A modelled time and the terms that make it (all ``kind = modelled``)."""

    time_us: float
    roofline_us: float
    compute_us: float
    memory_us: float
    bound: str
    tile_efficiency: float
    sm_balance: float
    latency_hiding: float
    operand_intensity: float | None
    l2_us: float | None
    warps_per_scheduler: float
    waves: float
    spill_bytes: float
    #: The fraction of the compute rate the software pipeline sustains (1.0: its stages hide the load latency);
    #: None where the model does not see the kernel's pipelining.
    pipelining: float | None = None
    #: The achievable ceilings the time was divided by (:func:`iotrace.ceilings.achievable`): the shares of the
    #: compute peak (1.0 for a non-tensor peak, which has no measurement) and of the bandwidth.
    compute_ceiling: float = 1.0
    memory_ceiling: float = 1.0
    #: True when the time is the launch floor, not any roof.
    launch_floor: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": "modelled"}


def tile_dims(spec: KernelSpec, shape: Shape, config: Config) -> dict[str, str]:
    """Which shape dimension each block-size parameter tiles.

    A kernel may say so itself with a ``tile_dims`` class attribute (``{"BLOCK_M": "seqlen"}``); otherwise a
    parameter ``BLOCK_<D>`` tiles the shape key ``D`` (case-insensitive), as in the GEMM's BLOCK_M/N/K over M/N/K.
    """
    declared = getattr(spec, "tile_dims", None)
    if isinstance(declared, Mapping):
        return {k: v for k, v in declared.items() if k in config and v in shape}
    lower = {k.lower(): k for k in shape if k not in spec.shape_flags}
    found = {}
    for key in config:
        match = re.fullmatch(r"BLOCK_(\w+)", key)
        if match and match.group(1).lower() in lower and isinstance(config[key], int):
            found[key] = lower[match.group(1).lower()]
    return found


def tile_efficiency(spec: KernelSpec, shape: Shape, config: Config) -> float:
    """Useful over computed work: ``size / (ceil(size / block) · block)`` for every tiled dimension, multiplied."""
    efficiency = 1.0
    for param, dim in tile_dims(spec, shape, config).items():
        size, block = shape[dim], int(config[param])
        if block > 0:
            efficiency *= size / (math.ceil(size / block) * block)
    return efficiency


def dot_tile(spec: KernelSpec, config: Config) -> tuple[int, int] | None:
    """The output tile of the kernel's tensor-core dot: ``spec.dot_tile`` names its two parameters, else
    ``BLOCK_M`` x ``BLOCK_N`` when the config has both; None when there is none."""
    names = getattr(spec, "dot_tile", None) or ("BLOCK_M", "BLOCK_N")
    values = [config.get(n) for n in names]
    if len(values) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return (int(values[0]), int(values[1]))  # type: ignore[arg-type]
    return None


def pipeline_step(spec: KernelSpec, shape: Shape, config: Config) -> tuple[int, float] | None:
    """``(num_stages, FLOPs of one main-loop iteration of one block)`` for a GEMM-shaped kernel (see
    :func:`operand_traffic`): ``2 · BLOCK_M · BLOCK_N · BLOCK_K``. None for the rest, or without ``num_stages``."""
    stages = config.get("num_stages")
    tile = dot_tile(spec, config)
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1 or tile is None:
        return None
    if operand_traffic(spec, shape, config, 1) is None:
        return None
    names = getattr(spec, "dot_tile", None) or ("BLOCK_M", "BLOCK_N")
    (k_param,) = [p for p in tile_dims(spec, shape, config) if p not in names]
    return stages, 2.0 * tile[0] * tile[1] * int(config[k_param])


def operand_traffic(spec: KernelSpec, shape: Shape, config: Config, element_bytes: int) -> float | None:
    """Bytes a GEMM-shaped kernel streams from L2 into its tiles: ``tiles_m · tiles_n · (BM + BN) · K_padded · e``.

    Only for kernels whose dot tile (``BLOCK_M x BLOCK_N``) and one more block parameter (the reduction) all tile
    shape dimensions (see :func:`tile_dims`); None for the rest.
    """
    tile = dot_tile(spec, config)
    dims = tile_dims(spec, shape, config)
    names = getattr(spec, "dot_tile", None) or ("BLOCK_M", "BLOCK_N")
    rest = [p for p in dims if p not in names]
    if tile is None or not all(n in dims for n in names) or len(rest) != 1:
        return None
    (m_dim, n_dim), k_param = (dims[n] for n in names), rest[0]
    block_k = int(config[k_param])
    k_padded = math.ceil(shape[dims[k_param]] / block_k) * block_k
    tiles = math.ceil(shape[m_dim] / tile[0]) * math.ceil(shape[n_dim] / tile[1])
    return float(tiles * (tile[0] + tile[1]) * k_padded * element_bytes)


def predict(cost: Cost, card: Card, resources: Sequence[Resources], occ: OccupancyResult,
            tile_eff: float, tile: tuple[int, int] | None = None, element_bytes: int = 2,
            l2_bytes: float | None = None, pipeline: tuple[int, float] | None = None) -> Prediction:
    """The modelled time of one call: the slowest of its roofs (compute, DRAM, L2 operand traffic), each scaled
    by its terms. ``pipeline`` is :func:`pipeline_step`'s ``(num_stages, FLOPs per main-loop iteration)``."""
    main = resources[0]
    ceiling = achievable(card)
    compute_ceiling = ceiling.tensor if cost.peak.endswith("_tensor") else 1.0
    datasheet_peak, datasheet_bandwidth = card.peak_flop_per_s(cost.peak), card.bandwidth_bytes_per_s
    bandwidth = datasheet_bandwidth * ceiling.memory
    sms = card.sm_count
    blocks = max(1, math.prod(main.grid))
    per_sm = blocks / sms
    sm_balance = per_sm / math.ceil(per_sm)
    resident_blocks = min(blocks, occ.active_blocks_per_sm * sms)
    per_block = min(cost.bytes / blocks,
                    main.dynamic_smem + main.threads_per_block * max(main.registers, 1) * BYTES_PER_REGISTER)
    in_flight = resident_blocks * per_block
    latency_hiding = min(1.0, in_flight / (bandwidth * DRAM_LATENCY_S))
    # Warps a scheduler can pick from on the busiest SM: the resident blocks there, at most the occupancy allows.
    warps_on_sm = min(occ.active_blocks_per_sm, math.ceil(per_sm)) * occ.warps_per_block
    schedulers = card.sm_limits.sub_partitions
    issue = min(1.0, warps_on_sm / schedulers)
    spill_bytes = float(main.spills * main.threads_per_block * blocks)
    throughput = datasheet_peak
    intensity = None
    if tile is not None and cost.peak.endswith("_tensor") and card.boost_clock_mhz:
        warps = max(1, main.threads_per_block // 32)
        intensity = math.sqrt(tile[0] * tile[1] / warps) / element_bytes
        smem_bandwidth = sms * SMEM_BYTES_PER_CLOCK * card.boost_clock_mhz * 1e6
        throughput = min(datasheet_peak, intensity * smem_bandwidth)
    pipelining = None
    if pipeline is not None:
        stages, step_flops = pipeline
        resident_on_sm = min(occ.active_blocks_per_sm, math.ceil(per_sm))
        # One iteration of one block with the SM to itself, at the tensor cores' own rate: the achievable ceiling is
        # a whole kernel's share (prologue, epilogue, scheduling), not a slower matrix instruction. On the H200
        # sweep (bench/sweeps/gemm-h200-*) two stages of 128x256x64 ran 1.6x slower than three, as this predicts.
        step_s = step_flops / (throughput / sms)
        pipelining = min(1.0, resident_on_sm * stages * step_s / (DRAM_LATENCY_S + step_s))
    compute_s = cost.flops / tile_eff / (throughput * compute_ceiling * sm_balance * issue * (pipelining or 1.0))
    memory_s = (cost.bytes + spill_bytes) / (bandwidth * latency_hiding)
    l2_s = None
    if l2_bytes is not None and card.boost_clock_mhz:
        l2_s = l2_bytes / (sms * L2_BYTES_PER_CLOCK_PER_SM * card.boost_clock_mhz * 1e6 * sm_balance)
    roofline_s = max(cost.flops / datasheet_peak, cost.bytes / datasheet_bandwidth)
    waves = blocks / (occ.active_blocks_per_sm * sms)
    terms = {"compute": compute_s, "memory": memory_s, "l2": l2_s or 0.0}
    bound = max(terms, key=terms.__getitem__)  # the term that sets the time names the bound
    floor = terms[bound] * 1e6 < LAUNCH_FLOOR_US
    time_us = max(terms[bound] * 1e6, LAUNCH_FLOOR_US) + LAUNCH_GAP_US * (len(resources) - 1)
    return Prediction(time_us=time_us, roofline_us=roofline_s * 1e6, compute_us=compute_s * 1e6,
                      memory_us=memory_s * 1e6, bound=bound,
                      tile_efficiency=tile_eff, sm_balance=sm_balance, latency_hiding=latency_hiding,
                      operand_intensity=intensity, l2_us=None if l2_s is None else l2_s * 1e6,
                      warps_per_scheduler=warps_on_sm / schedulers, waves=waves, spill_bytes=spill_bytes,
                      pipelining=pipelining, compute_ceiling=compute_ceiling, memory_ceiling=ceiling.memory,
                      launch_floor=floor)
