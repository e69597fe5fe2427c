"""The opt-in rule for recorded launches: above the default 48 KB per block a launch had raised its limit.

Values for the CUTLASS GEMM are those Nsight Compute stored in
../shared/corpus/ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep (read with ncu_report): 256 threads,
32 registers, 0 static + 148,992 dynamic bytes, a 167,936-byte carveout, 1 KB driver reserve;
launch__occupancy_limit_shared_mem = 1, sm__maximum_warps_per_active_cycle_pct = 12.5,
launch__shared_mem_per_block_allocated = 150,016.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iotrace.occupancy import occupancy, occupancy_of_recorded_launch, recorded_launch_opted_in
from iotrace.sm_limits import sm_limits
from tests.conftest import load_corpus

CUTLASS = "ncu-rep/a100pcie_cutlass_gemm_dynsmem_ncu2024.1.ncu-rep"


@pytest.mark.parametrize("cc", ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"])
def test_the_rule_turns_at_the_default_per_block_limit(cc: str) -> None:
    default = sm_limits(cc).smem_per_block
    assert default == 48 * 1024
    assert not recorded_launch_opted_in(cc, default, 0)
    assert not recorded_launch_opted_in(cc, 16 * 1024, default - 16 * 1024)
    assert recorded_launch_opted_in(cc, 0, default + 1)
    assert recorded_launch_opted_in(cc, 1024, default)  # static and dynamic count together


def test_a_recorded_launch_above_48kb_answers_as_ncu_did() -> None:
    mine = occupancy_of_recorded_launch("8.0", 256, 32, 0, 148_992, smem_reserved=1024, smem_config=167_936)
    assert mine.smem_optin
    assert (mine.limits["shared_mem"], mine.occupancy_pct, mine.allocated_smem_per_block) == (1, 12.5, 150_016)
    # The assumption the rule replaces: without opt-in the same launch could not have run.
    plain = occupancy("8.0", 256, 32, 0, 148_992, smem_reserved=1024, smem_config=167_936, smem_optin=False)
    assert plain.limits["shared_mem"] == 0 and "without opt-in" in plain.reason


def test_a_recorded_launch_under_48kb_is_a_plain_kernel() -> None:
    mine = occupancy_of_recorded_launch("8.9", 512, 16, 12_288, 0)
    assert not mine.smem_optin
    assert mine.limits == occupancy("8.9", 512, 16, 12_288, 0, smem_optin=False).limits


def test_the_report_uses_the_rule(corpus: Path) -> None:
    from iotrace.trace.reports.report import build_report

    (kernel,) = build_report(load_corpus(corpus / CUTLASS)).kernels
    occ = kernel.occupancy
    assert occ is not None and occ.result is not None
    assert occ.result.smem_optin and occ.result.limits["shared_mem"] == 1
    assert occ.theoretical_pct == occ.theoretical_pct_file == 12.5
