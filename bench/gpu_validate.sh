#!/usr/bin/env bash
# GPU validation: everything marked `gpu` (skipped on CPU machines) and the benchmarks, on a real NVIDIA GPU
# with the Triton interpreter off. Writes the reports and the device's identity under ${OUT:-out/gpu}.
# Fails when no GPU is visible or when any GPU test was skipped, so it cannot pass without testing.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu}"
mkdir -p "$out"
make setup >/dev/null
py=.venv/bin/python
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv | tee "$out/device.csv"
if ! $py -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_validate: torch.cuda sees no GPU (is a CPU-only torch installed in .venv?)" >&2
  exit 1
fi
export TRITON_INTERPRET=0
$py -m pytest -m gpu -v -rs --junitxml="$out/gpu-tests.xml" tests | tee "$out/gpu-tests.txt"
if grep -q "SKIPPED" "$out/gpu-tests.txt"; then
  echo "gpu_validate: some GPU tests were skipped (see $out/gpu-tests.txt)" >&2
  exit 1
fi
$py -m pytest bench -v --benchmark-json="$out/bench.json" | tee "$out/bench.txt"
