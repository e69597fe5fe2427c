#!/usr/bin/env bash
# GPU validation in one call on a time-limited machine with no network and its own torch and Triton (a lent H100/H200
# whose python3 already holds torch, Triton, pandas, pluggy, pytest). What iotrace needs beyond those travels as
# wheels in .whl/ (nvtx, msgspec, plotly, gguf: see docs/contributing/gpu.md); ncu_report comes from the machine's own
# Nsight Compute. The steps run in order of what they prove, each under its own time limit, so one that hangs or fails
# costs only its share: the gpu-marked tests, the self-check (card ceilings, kernels against their baselines, the
# tuner, profiler captures), the kernel benchmarks, and one profiled run per tool. Everything lands in one archive,
# ${OUT}/results.tgz, written even when the call is cut short. The full script with engine builds is gpu_validate.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu}"
logs="$out/gpu"
mkdir -p "$logs"
trap 'tar czf "$out/results.tgz" -C "$out" gpu 2>/dev/null' EXIT
step() {  # step NAME SECONDS COMMAND...: run under a limit, keep its log and status, never stop the script
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$logs/steps.txt"
  tail -5 "$logs/$name.log"
}

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
ncu_python=$(ls -d /opt/nvidia/nsight-compute/*/extras/python 2>/dev/null | tail -1)
[ -n "$ncu_python" ] && export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ncu_python"
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$logs/install.log" 2>&1 \
  || { echo "editable install failed (see install.log): iotrace from the source tree"
       export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTEST_ADDOPTS="-p iotrace.pytest_plugin"; }
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1

{ nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name())'
  ls -d /opt/nvidia/nsight-compute/* 2>/dev/null; command -v ncu nsys; } >"$logs/device.txt" 2>&1
cat "$logs/device.txt"

limits=(${GPU_STEP_LIMITS:-200 120 45 25})  # seconds for: tests, self-check, benchmarks, each profiled run
step gpu-tests "${limits[0]}" python3 -m pytest -m gpu -p no:cacheprovider -rs -v --tb=short --durations=15 \
  --junitxml="$logs/gpu-tests.xml" tests
step selfcheck "${limits[1]}" python3 -m iotrace selfcheck "$logs/selfcheck" --quick --budget $((${limits[1]} - 15))
step bench-kernels "${limits[2]}" python3 -m pytest bench/test_bench_kernels.py -p no:cacheprovider -q \
  --benchmark-json="$logs/bench-kernels.json"
profiled=(rmsnorm --shape rows=4096,hidden=4096,residual=1 --dtype fp16 --seed 1 --out "$logs/traces")
for tool in cupti ncu; do
  step "run-$tool" "${limits[3]}" python3 -m iotrace run "${profiled[@]}" "--$tool"
done
