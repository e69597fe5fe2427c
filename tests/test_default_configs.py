"""No built-in kernel's default config spills on sm_80, sm_86, sm_89 or sm_90 (one card per CC, each kernel's
default shape and first dtype): a default must be a config the static phase would keep.

Each case is one real cross-compile (cached on disk for the session).
"""

from __future__ import annotations

import pytest

from iotrace.cards import lookup
from iotrace.kernel_call import KernelCall
from iotrace.plugins import kernels
from iotrace.runner import static_analysis

# make test-fast leaves these out: 24 cold cross-compiles, about 2 minutes on two cores.
pytestmark = pytest.mark.slow

CARDS = ("a100-sxm4-80gb", "rtx3090", "rtx4090", "h100-sxm")  # sm_80, sm_86, sm_89, sm_90
BUILT_IN = ("gemm", "rmsnorm", "attention-prefill", "attention-decode", "attention-decode-int8", "draft-verify")


@pytest.mark.parametrize("card_key", CARDS)
@pytest.mark.parametrize("name", BUILT_IN)
def test_default_config_does_not_spill(name: str, card_key: str) -> None:
    spec = kernels()[name]
    card = lookup(card_key)
    shape, dtype = spec.shape_for(), spec.dtypes[0]
    config = spec.default_config(shape, dtype, card)
    resources, occ, _ = static_analysis(KernelCall(spec, shape, dtype, card), config)
    spilled = {r.kernel: r.spills for r in resources if r.spills}
    assert not spilled, f"{name} default {config} spills on {card.name} ({resources[0].target}): {spilled} B/thread"
    assert occ.launchable
