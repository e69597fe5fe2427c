"""``iotrace tune --ray`` on a real GPU: the measuring actor (``num_gpus=1``) runs the GPU backend with verification,
and the sweep finds what the single-process tuner finds. Skipped without a GPU; bench/gpu_validate.sh runs it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.gpu

RMSNORM = ("tune", "rmsnorm", "--preset", "llama-3-8b-decode-b32", "--dtype", "fp16", "--strategy", "exhaustive",
           "--no-cache", "--json")
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_IMPORT_WARNING": "1"}


def test_a_ray_sweep_on_this_gpu_measures_what_the_single_process_sweep_measures() -> None:
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'iotrace[ray]'")
    here = run_cli(*RMSNORM, env=QUIET)
    there = run_cli(*RMSNORM, "--ray", env=QUIET)  # alone: a local cluster on this machine, one actor on its GPU
    assert here.returncode == 0, here.stderr
    assert there.returncode == 0, there.stderr
    single, cluster = json.loads(here.stdout), json.loads(there.stdout)
    assert cluster["best"]["config"] is not None and cluster["best"]["measured_us"] > 0
    # Timings of two runs differ by noise; the best of either is within 25% of the other's.
    assert cluster["best"]["measured_us"] == pytest.approx(single["best"]["measured_us"], rel=0.25)
