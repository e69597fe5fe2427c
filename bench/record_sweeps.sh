#!/usr/bin/env bash
# Record real autotuning sweeps on this machine's GPU (exhaustive, every config checked and timed), for the
# strategy comparisons: bench/sweeps/<kernel>-<card>-<shape>.json, replayed by tests/test_autotune_strategies.py
# and `iotrace tune KERNEL --replay FILE`. Then prints the strategy comparison (fraction of the brute-force best
# against evaluations) and the static-pruning figures on the recorded sweeps.
# Run from bench/gpu_validate.sh or by hand on a GPU machine; takes minutes per sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
card=$($py -c 'from iotrace.cards import detect; print(detect().key)')
out=bench/sweeps
mkdir -p "$out"
export TRITON_INTERPRET=0
mkdir -p "$out/tune-output"
record() {  # kernel dtype preset; the tune's own JSON goes aside, so the glob below sees sweeps only
  .venv/bin/iotrace tune "$1" --dtype "$2" --preset "$3" --strategy exhaustive --no-cache \
    --record "$out/$1-$card-$3.json" --json > "$out/tune-output/$1-$card-$3.json"
  echo "recorded $out/$1-$card-$3.json"
}
record gemm fp16 square-4096
record gemm bf16 llama-3-8b-mlp-up-prefill-2k
record attention-prefill bf16 llama-3-8b-prefill-2k
$py bench/strategy_replay.py "$out"/*-"$card"-*.json | tee "$out/strategy-replay-$card.txt"
