#!/usr/bin/env bash
# GPU validation: everything marked `gpu` (skipped on CPU machines) and the benchmarks, on a real NVIDIA GPU
# with the Triton interpreter off. Writes the reports and the device's identity under ${OUT:-out/gpu}.
# Fails when no GPU is visible or when any GPU test was skipped, so it cannot pass without testing. On a lent machine
# with no network and a time limit, run gpu_validate_offline.sh instead (its steps under their own limits, one archive).
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

# Profiled runs (iotrace run --nsys | --ncu | --cupti): one capture each with its run manifest, under $out/traces.
# --cupti needs only the GPU; nsys and ncu run where iotrace finds them (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin,
# /opt/nvidia), and their absence is recorded in tools-missing.txt.
# Counters refused to ncu (ERR_NVGPUCTRPERM, common on rented GPUs) is recorded, not failed: it is the machine's policy.
profiled=(rmsnorm --shape rows=4096,hidden=4096,residual=1 --dtype fp16 --seed 1 --out "$out/traces")
$py -m iotrace run "${profiled[@]}" --cupti | tee "$out/run-cupti.txt"
for tool in nsys ncu; do
  if $py -m iotrace run "${profiled[@]}" "--$tool" >"$out/run-$tool.txt" 2>&1; then
    cat "$out/run-$tool.txt"
    continue
  fi
  cat "$out/run-$tool.txt"
  if grep -q "is not installed" "$out/run-$tool.txt"; then  # iotrace's own search (tools.py) found no $tool
    echo "gpu_validate: $tool is not installed; its profiled run was not exercised" | tee -a "$out/tools-missing.txt"
  elif grep -q ERR_NVGPUCTRPERM "$out/run-$tool.txt"; then
    echo "gpu_validate: $tool was refused the performance counters here (see $out/run-$tool.txt)" >&2
  else
    echo "gpu_validate: iotrace run --$tool failed (see $out/run-$tool.txt and $out/traces/*.log)" >&2
    exit 1
  fi
done

# The one-call self-check (card ceilings, kernels against their baselines, occupancy against the driver, tuner
# sweeps recorded under $out/selfcheck/sweeps, profiler captures), then the standing sweeps in bench/sweeps/ that
# the strategy tests replay. On a time-limited machine run only `python bench/gpu_check.py OUT` (at most 8 minutes).
$py bench/gpu_check.py "$out/selfcheck"
bash bench/record_sweeps.sh | tee "$out/record-sweeps.txt"

# Engines side by side on the GPU (issue 32): the CUDA builds of vLLM and llama.cpp in their own venvs, then the pinned
# model through the four engines (iotrace and vLLM at bf16 as on any GPU; llama.cpp's Q4_1 as stored), with the
# card's wall. Building llama.cpp with CUDA takes minutes: a time-limited machine skips it with ENGINES=0.
if [ "${ENGINES:-1}" != 0 ]; then
  make engines ENGINES_DIR=.engines-gpu VLLM_PKG=vllm LLAMA_CMAKE_ARGS=-DGGML_CUDA=on | tee "$out/engines-build.txt"
  IOTRACE_ENGINES=.engines-gpu $py -m iotrace bench --engine iotrace --engine transformers --engine vllm \
    --engine llama.cpp --gen-tokens 128 --reps 3 --json > "$out/engines.json"
  $py -c 'import json, sys; from iotrace.render.engines import engines_text; print(engines_text(json.load(open(sys.argv[1]))))' \
    "$out/engines.json" | tee "$out/engines.txt"
fi

# Where the tok/s went (issue 43): one profiled run per engine that can be traced, each trace read step by step;
# every step found and every waterfall summing to its step (bench/check_waterfalls.py). The pinned model, not yet an
# 8B-class shape: the runners load real weights only (random weights / vLLM load_format="dummy" are still to come).
if [ "${ENGINES:-1}" != 0 ]; then
  IOTRACE_ENGINES=.engines-gpu $py -m iotrace bench --engine iotrace --engine transformers --engine vllm \
    --gen-tokens 32 --reps 1 --profile "$out/engine-traces" --json > "$out/engines-profiled.json"
  $py bench/check_waterfalls.py "$out/engine-traces" | tee "$out/waterfalls.txt"
fi

# Concurrent streams (issue 44): vLLM's CUDA server (bf16, CUDA graphs: the CPU defaults overridden by the later
# flags) with the pinned model, swept at 1, 4, 16 and 64 streams beside the card's batched wall; the Pareto chart as a
# PNG. An 8B-class shape with --load-format dummy needs bench serve to take a shape other than the GGUF's (not yet).
if [ "${ENGINES:-1}" != 0 ]; then
  IOTRACE_ENGINES=.engines-gpu $py -m iotrace bench serve --engine vllm --concurrency 1,4,16,64 --output-tokens 128 \
    --server-args "--dtype bfloat16 --no-enforce-eager" --json -o "$out/serve-pareto.png" > "$out/serve.json"
  $py -c 'import json, sys; from iotrace.render.serve import serve_text; print(serve_text(json.load(open(sys.argv[1]))))' \
    "$out/serve.json" | tee "$out/serve.txt"
fi
