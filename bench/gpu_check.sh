#!/usr/bin/env bash
# The CUDA suites and the GPU MLP bench's figures, on a machine with a GPU:
# the CUDA kernel, runtime and NCCL suites (bench/gpu_suites.sh), one wide-MLP
# run's figures, then bench/gpu_mlp_bench.sh with its RUNS (3) alternating
# runs and torch.compile (COMPILE=0 leaves it out): the figures of
# docs/STATUS_GPU.md. Every GPU check once: bench/gpu_all_check.sh (whose
# head says how a build made elsewhere runs: the same serves here). Each step runs under its own timeout (budgets: gpu 10,
# kernels 40, runtime 105, nccl 40, wide 15, bench 270; 480 s in all); the
# script ends with the summary and exits 1 naming the failed steps when any
# failed. Results go under OUT.
#   bench/gpu_check.sh [OUT=/tmp/rill-gpu-check] [RUN]
# RUN prefixes every program (empty: run build/ as built here; for a build
# made elsewhere, `bash .gpu/run`).
set -u
cd "$(dirname "$0")/.." || exit
out=${1:-/tmp/rill-gpu-check}
run=${2:-}
# shellcheck source=bench/gpu_suites.sh
. bench/gpu_suites.sh
gpu_info
gpu_suites
gpu_wide
timed bench 270 "$out/bench.txt" bash bench/gpu_mlp_bench.sh "${RUNS:-3}" "$rill"
cat "$out/bench.txt"
finish
