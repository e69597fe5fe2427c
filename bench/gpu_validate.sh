#!/usr/bin/env bash
# GPU validation: everything marked `gpu` (skipped on CPU machines), run on a real NVIDIA GPU with the
# Triton interpreter off. Writes the pytest report and the device's identity under ${OUT:-out/gpu}.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu}"
mkdir -p "$out"
make setup >/dev/null
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv | tee "$out/device.csv"
TRITON_INTERPRET=0 .venv/bin/python -m pytest -m gpu -v --junitxml="$out/gpu-tests.xml" | tee "$out/gpu-tests.txt"
