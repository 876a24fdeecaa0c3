#!/usr/bin/env bash
# Every GPU check, once each, within 8 minutes in all: the CUDA kernel, runtime and NCCL
# suites; the wide MLP's figures and bench/gpu_mlp_bench.sh; GPT-2 124M's
# planned bf16 memory and bench/gpt2_amp_bench.sh; the MLP's plan on 2
# agents sharing cuda:1 with train.nccl, two agents taking the shared path,
# bench/device_collective_bench.cc (NCCL one rank; 2 and 3 ranks shared; 2
# staged; all-to-all), a launched program's device collectives (NCCL one
# rank; two processes staged), the GPT tensor-parallel sample on 2 agents
# sharing the GPU, and bench/gpu_shared_bench.sh. The benches run once
# (RUNS=1) without torch.compile (COMPILE=0 unless set) and with fewer
# steps (the amp bench 20, the shared bench 40); no profiler (the bf16
# step's kernels by time: bench/gpu_profile.sh, a call of its own).
# Figures to report come from the benches run alone with more runs.
#   bench/gpu_all_check.sh [OUT=/tmp/rill-gpu-all] [RUN]
# RUN prefixes every program (empty: run build/ as built here); for a build
# made elsewhere it is `bash .gpu/run`. Results go under OUT.
#
# Every step runs under its own `timeout` (its budget, in seconds), and a
# summary line gives its rc, seconds, budget and the seconds so far. The
# script exits 1 naming the failed steps when any rc is not 0 (77: a suite
# saw no GPU; 124 or 137: over its budget; 127: a program missing).
# Budgets (480 s in all):
#   gpu 10, gpt2 job 5, kernels 40, runtime 105, nccl 40, wide 15,
#   mlp bench 45, amp plan 10, amp bench 50, nccl plan 10,
#   ipc between agents 15, collective 1 shared / 2 shared / 3 shared /
#   2 staged 10 each, all_to_all 1 / 2 10 each, launch device collectives
#   15, launch device collectives staged 15, gpt tp shared 15, shared bench 30.
# The checks on their output (the shared path in node 1's log, the launched
# program's lines, the wide run's figures) are steps of their own.
#
# From a build made on another machine (with CUDA: build/kernels/
# librill_cuda.so; bench/gpu_pack.sh packs it into .gpu), RUN is a wrapper that starts a packed build/ program (or
# `rill`) with the shared libraries the GPU machine lacks, e.g. `bash
# .gpu/run`; the package holds build/rill, the three suites, the CUDA module
# (the programs load it from beside themselves), build/bench/
# device_collective_bench and build/samples/device_collectives_demo, and
# Fashion-MNIST, and the tests find RILL_BINARY, RILL_SOURCE_ROOT and
# RILL_FASHION_MNIST through it. data/moby-dick.txt (ignored by git:
# ./dev fetches it) must be there too. The summary ends the output; every
# log is under OUT.
# What reads which data:
#   tests/runtime/cuda_runtime_test  samples/mlp/*.json,
#     samples/pserver/mlp_pserver.json (Fashion-MNIST: RILL_FASHION_MNIST,
#     set by .gpu/run), samples/gpt/gpt_moby.json (data/moby-dick.txt),
#     samples/ddp, samples/linear_regression (inline),
#     bench/mlp_*synthetic.json (synthetic)
#   tests/runtime/cuda_nccl_test     samples/mlp/mlp.json (Fashion-MNIST),
#     samples/gpt/gpt_moby_tp.json (data/moby-dick.txt)
#   tests/kernels/cuda_kernels_test  nothing
#   gpt tp shared                    data/moby-dick.txt
#   the benches                      synthetic data, tokens made here
# Python is python3 (PYTHON), with PyTorch.
# $rill and $run are command prefixes, split into words on purpose:
# shellcheck disable=SC2086
set -u
cd "$(dirname "$0")/.." || exit
out=${1:-/tmp/rill-gpu-all}
run=${2:-}
python=${PYTHON:-python3}
# shellcheck source=bench/gpu_suites.sh
. bench/gpu_suites.sh
rm -rf "$out/shared_logs"
# The launched demo, by its path (rill launch starts it itself).
demo=build/samples/device_collectives_demo
[ -n "$run" ] && [ -x ".gpu/bin/$demo" ] && demo=.gpu/bin/$demo

gpu_info
# shellcheck disable=SC2016  # expanded by the inner bash
timed "gpt2 job" 5 "$out/gpt2_job.txt" env python="$python" bash -c \
  '. bench/gpt2_jobs.sh && gpt2_tokens "$1" && gpt2_fused_job bench/gpt2_124m.json "$2"' _ "$out/tokens.bin" "$out/fused.json"
gpu_suites

gpu_wide
timed "mlp bench" 45 "$out/mlp_bench.txt" env COMPILE="${COMPILE:-0}" bash bench/gpu_mlp_bench.sh 1 "$rill"
cat "$out/mlp_bench.txt"

# Mixed precision: GPT-2 124M's planned memory in bf16, and the bf16 bench.
timed "amp plan" 10 "$out/amp_plan.json" $rill plan "$out/fused.json" --devices cuda:1 --set train.precision=bf16 --json
$python -c "import json,sys; [print('planned', m['zone'], round(m['peak_bytes']/2**30, 2), 'GiB') for m in json.load(open(sys.argv[1]))['memory'] if m['zone'].startswith('cuda')]" \
  "$out/amp_plan.json" 2>&1 | tail -4
timed "amp bench" 50 "$out/amp_bench.txt" env COMPILE="${COMPILE:-0}" bash bench/gpt2_amp_bench.sh 1 "$rill" 20
cat "$out/amp_bench.txt"

# Device collectives: the plan, then two agents (processes) sharing the GPU:
# their collectives in its memory, each mapping the other's buffer by CUDA
# IPC (node 1's log says which path).
timed "nccl plan" 10 "$out/nccl_plan.txt" $rill plan bench/mlp_synthetic.json --nodes 2 --devices cuda:1 --set train.nccl=true --stats
tail -15 "$out/nccl_plan.txt"
timed "ipc between agents" 15 "$out/shared_run.txt" $rill run bench/mlp_synthetic.json --nodes 2 --devices cuda:1 \
  --set train.nccl=true --steps 30 --logdir "$out/shared_logs"
grep -q "work in that GPU's memory" "$out/shared_logs/node-1.log" 2>/dev/null; step "ipc between agents: shared path" $?
grep -h "communicator" "$out/shared_logs/node-1.log" 2>/dev/null | head -3
tail -3 "$out/shared_run.txt"
sizes=4096,65536,1048576,16777216,268435456
for how in "1 shared" "2 shared" "3 shared" "2 staged"; do
  read -r ranks path <<< "$how"
  timed "collective $ranks $path" 10 "$out/collective$ranks$path.txt" env NCCL_DEBUG=WARN \
    $run build/bench/device_collective_bench --device cuda --ranks "$ranks" --path "$path" --sizes $sizes
  cat "$out/collective$ranks$path.txt"
done
# All-to-all (tensor-parallel layouts' S(a) -> S(b)): NCCL's grouped send/recv, and 2 ranks sharing the GPU.
for ranks in 1 2; do
  timed "all_to_all $ranks" 10 "$out/all_to_all$ranks.txt" env NCCL_DEBUG=WARN \
    $run build/bench/device_collective_bench --device cuda --ranks "$ranks" --op all_to_all --sizes 4096,1048576,67108864
  cat "$out/all_to_all$ranks.txt"
done

# A launched program's device collectives on its GPU (NCCL, one rank).
timed "launch device collectives" 15 "$out/launch_device.txt" \
  $rill launch --nproc_per_node 1 --device cuda --master_port 19910 "$demo"
grep -qF "rank 0 of 1 (nccl): sum [1, 2] max [1, 2] average [1, 2] block [1, 2] gathered [1, 2] received [0, 0] broadcast [1, 2] scattered [0, 0] passed [-1, -1] reduced [1, 2] at root [1, 2]" "$out/launch_device.txt"
step "launch device collectives: output" $?
tail -2 "$out/launch_device.txt"
# Two processes on the one GPU (NCCL refuses them): every call staged
# through the host. Started by hand with the variables rill launch sets (its
# agent would want a GPU a process).
staged_pair() {
  local r rc=0 pids=()
  for r in 1 0; do
    RILL_WORLD_SIZE=2 RILL_RANK=$r RILL_LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=19920 RILL_DEVICE=cuda:0 \
      $run build/samples/device_collectives_demo &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return "$rc"
}
export -f staged_pair
export run
timed "launch device collectives staged" 15 "$out/launch_staged.txt" bash -c staged_pair
grep -qF "rank 1 of 2 (staged): sum [3, 6, 9, 12] max [2, 4, 6, 8] average [1.5, 3, 4.5, 6] block [9, 12] gathered [1, 2, 2, 4] received [1, 1, 101, 101] broadcast [2, 4, 6, 8] scattered [101, 101] passed [1, 2] reduced [3, 6, 9, 12] at root [1, 2, 2, 4]" "$out/launch_staged.txt"
step "launch device collectives staged: output" $?
tail -3 "$out/launch_staged.txt"
# The GPT tensor-parallel sample on 2 agents sharing the GPU: every boxing a device collective.
timed "gpt tp shared" 15 "$out/gpt_tp.txt" $rill run samples/gpt/gpt_moby_tp.json --nodes 2 --devices cuda:1 \
  --set train.nccl=true --steps 5
tail -3 "$out/gpt_tp.txt"
timed "shared bench" 30 "$out/shared_bench.txt" env NCCL_DEBUG=WARN bash bench/gpu_shared_bench.sh 1 "$rill" 40
cat "$out/shared_bench.txt"
finish
