"""The shared-memory prune message states CUDA's per-block opt-in limit and, separately, the driver's reserve.

CUDA gives the RTX 3090 (CC 8.6) an opt-in limit of 99 KB = 101,376 bytes per block
(``cudaDevAttrMaxSharedMemoryPerBlockOptin``); the driver reserves 1 KB per block on top of it from CC 8.0
(``cudaOccSMemPerBlock`` in ``cuda_occupancy.h``). The decision counts both; the message names each once.
"""

from __future__ import annotations

from iotrace.cards import lookup
from iotrace.occupancy import occupancy


def test_rtx3090_message_gives_cudas_opt_in_limit() -> None:
    limits = lookup("rtx3090").sm_limits
    assert (limits.smem_per_block_optin, limits.smem_reserved_per_block) == (101_376, 1024)
    occ = occupancy(limits, 256, 128, 0, 147_456)  # the 4-stage 128x256x64 GEMM's staged tiles
    assert not occ.launchable
    assert occ.reason == ("148480 bytes of shared memory per block exceed the opt-in limit of 101376 bytes per block "
                          "on CC 8.6 plus the driver's reserve of 1024 bytes (the kernel asks 147456 of them)")
    assert "102400" not in occ.reason


def test_the_decision_is_unchanged_at_the_edge() -> None:
    limits = lookup("rtx3090").sm_limits
    assert occupancy(limits, 256, 32, 0, 101_376).launchable  # exactly the opt-in limit, plus the reserve
    over = occupancy(limits, 256, 32, 0, 101_377)
    assert not over.launchable and "opt-in limit of 101376 bytes per block" in over.reason


def test_h100_and_a100_messages() -> None:
    for key, limit in (("h100-sxm", 232_448), ("a100-sxm4-80gb", 166_912)):
        occ = occupancy(lookup(key).sm_limits, 256, 32, 0, limit + 1)
        assert not occ.launchable and f"opt-in limit of {limit} bytes per block" in occ.reason, occ.reason
        assert "plus the driver's reserve of 1024 bytes" in occ.reason
