#!/usr/bin/env bash
# Every GPU check in one go, on a machine with a GPU: the CUDA kernel suite,
# the CUDA runtime suite (each mode's sample on agents sharing the GPU, the
# stream-wait count, the overlap, a plan too big for the GPU), one wide-MLP
# run's figures, then bench/gpu_mlp_bench.sh. Results go under OUT.
#   bench/gpu_check.sh [OUT=/tmp/rill-gpu-check] [RUN]
# RUN prefixes every program (empty: run build/ as built). Where the build
# was made on another machine, RUN is a wrapper that starts a build/ program
# (or `rill`) with its shared libraries; build/kernels/librill_cuda.so must
# travel with it (the programs load it from beside themselves or the
# folders above). Set COMPILE=0 to leave torch.compile out of the bench,
# RUNS for its alternating runs (3).
set -u
cd "$(dirname "$0")/.."
out=${1:-/tmp/rill-gpu-check}
run=${2:-}
. bench/gpu_suites.sh
gpu_suites
$rill run bench/mlp_wide_synthetic.json --devices cuda:1 --result "$out/wide.json" > "$out/wide.txt" 2>&1; step wide $?
grep -o '"steady_samples_per_sec": [0-9.]*\|"peak_device_bytes": [0-9]*\|"device_synchronizes": [0-9]*' "$out/wide.json"
timeout 300 bash bench/gpu_mlp_bench.sh "${RUNS:-3}" "$rill" > "$out/bench.txt" 2>&1; step bench $?
cat "$out/bench.txt"
