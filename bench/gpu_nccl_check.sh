#!/usr/bin/env bash
# The GPU checks of device collectives (issue "Several GPUs") in one go, on
# a machine with a GPU: the CUDA kernel, runtime and NCCL suites
# (tests/runtime/cuda_nccl_test.cc: one-rank NCCL communicators; agents
# sharing the GPU staged, bitwise the boxing tasks' losses), the plan of
# the MLP on 2 agents sharing cuda:1 with train.nccl, and
# bench/gpu_shared_bench.sh. Results go under OUT.
#   bench/gpu_nccl_check.sh [OUT=/tmp/rill-nccl-check] [RUN]
# RUN prefixes every program, as in bench/gpu_check.sh (a wrapper for a
# build made elsewhere). RUNS: the bench's alternating runs (2).
set -u
cd "$(dirname "$0")/.."
out=${1:-/tmp/rill-nccl-check}
run=${2:-}
. bench/gpu_suites.sh
gpu_suites
$rill plan bench/mlp_synthetic.json --nodes 2 --devices cuda:1 --set train.nccl=true --stats > "$out/plan.txt" 2>&1
step plan $?
cat "$out/plan.txt"
NCCL_DEBUG=WARN timeout 300 bash bench/gpu_shared_bench.sh "${RUNS:-2}" "$rill" > "$out/bench.txt" 2>&1; step bench $?
cat "$out/bench.txt"
