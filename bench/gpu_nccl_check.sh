#!/usr/bin/env bash
# The GPU checks of device collectives (issue "Several GPUs") in one go, on
# a machine with a GPU: the CUDA kernel, runtime and NCCL suites
# (tests/runtime/cuda_nccl_test.cc: one-rank NCCL communicators; agents
# sharing the GPU staged, bitwise the boxing tasks' losses), the plan of
# the MLP on 2 agents sharing cuda:1 with train.nccl, the device
# collectives' bandwidth (bench/device_collective_bench.cc: NCCL with one
# rank, 2 and 3 ranks sharing the GPU in its memory, 2 staged through the
# host, 4 KiB to 256 MiB; all-to-all), the GPT tensor-parallel sample on 2
# agents sharing the GPU, and
# bench/gpu_shared_bench.sh. Results go under OUT.
#   bench/gpu_nccl_check.sh [OUT=/tmp/rill-nccl-check] [RUN]
# RUN prefixes every program, as in bench/gpu_check.sh (a wrapper for a
# build made elsewhere: build/kernels/librill_cuda.so and
# build/bench/device_collective_bench and build/samples/device_collectives_demo
# travel with it). RUNS: the bench's
# alternating runs (2).
set -u
cd "$(dirname "$0")/.."
out=${1:-/tmp/rill-nccl-check}
run=${2:-}
. bench/gpu_suites.sh
gpu_suites
$rill plan bench/mlp_synthetic.json --nodes 2 --devices cuda:1 --set train.nccl=true --stats > "$out/plan.txt" 2>&1
step plan $?
cat "$out/plan.txt"
# Two agents (processes) sharing the GPU: their collectives in its memory,
# each mapping the other's buffer by CUDA IPC (node 1's log says which path).
timeout 120 $rill run bench/mlp_synthetic.json --nodes 2 --devices cuda:1 --set train.nccl=true --steps 30 \
  --logdir "$out/shared_logs" > "$out/shared_run.txt" 2>&1
grep -q "work in that GPU's memory" "$out/shared_logs/node-1.log"; step "ipc between agents" $?
grep -h "communicator" "$out/shared_logs/node-1.log" | head -3
tail -3 "$out/shared_run.txt"
sizes=4096,65536,1048576,16777216,268435456
for how in "1 shared" "2 shared" "3 shared" "2 staged"; do
  read -r ranks path <<< "$how"
  NCCL_DEBUG=WARN timeout 120 $run build/bench/device_collective_bench --device cuda --ranks $ranks --path $path \
    --sizes $sizes > "$out/collective$ranks$path.txt" 2>&1
  step "collective $ranks $path" $?
  cat "$out/collective$ranks$path.txt"
done
# All-to-all (tensor-parallel layouts' S(a) -> S(b)): NCCL's grouped send/recv, and 2 ranks sharing the GPU.
for ranks in 1 2; do
  NCCL_DEBUG=WARN timeout 120 $run build/bench/device_collective_bench --device cuda --ranks $ranks --op all_to_all \
    --sizes 4096,1048576,67108864 > "$out/all_to_all$ranks.txt" 2>&1
  step "all_to_all $ranks" $?
  cat "$out/all_to_all$ranks.txt"
done
# A launched program's device collectives on its GPU (NCCL, one rank).
timeout 60 $rill launch --nproc_per_node 1 --device cuda --master_port 19910 build/samples/device_collectives_demo \
  > "$out/launch_device.txt" 2>&1
grep -qF "rank 0 of 1 (nccl): sum [1, 2] max [1, 2] average [1, 2] block [1, 2] gathered [1, 2] received [0, 0] broadcast [1, 2] scattered [0, 0] passed [-1, -1] reduced [1, 2] at root [1, 2]" "$out/launch_device.txt"
step "launch device collectives" $?
tail -2 "$out/launch_device.txt"
# Two processes on the one GPU (NCCL refuses them): every call staged
# through the host. Started by hand with the variables rill launch sets (its
# agent would want a GPU a process).
for r in 1 0; do
  RILL_WORLD_SIZE=2 RILL_RANK=$r RILL_LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=19920 RILL_DEVICE=cuda:0 \
    timeout 60 $run build/samples/device_collectives_demo >> "$out/launch_staged.txt" 2>&1 &
done
wait
grep -qF "rank 1 of 2 (staged): sum [3, 6, 9, 12] max [2, 4, 6, 8] average [1.5, 3, 4.5, 6] block [9, 12] gathered [1, 2, 2, 4] received [1, 1, 101, 101] broadcast [2, 4, 6, 8] scattered [101, 101] passed [1, 2] reduced [3, 6, 9, 12] at root [1, 2, 2, 4]" "$out/launch_staged.txt"
step "launch device collectives staged" $?
tail -3 "$out/launch_staged.txt"
# The GPT tensor-parallel sample on 2 agents sharing the GPU: every boxing a device collective.
timeout 120 $rill run samples/gpt/gpt_moby_tp.json --nodes 2 --devices cuda:1 --set train.nccl=true --steps 5 \
  > "$out/gpt_tp.txt" 2>&1
step "gpt tp shared" $?
tail -3 "$out/gpt_tp.txt"
NCCL_DEBUG=WARN timeout 300 bash bench/gpu_shared_bench.sh "${RUNS:-2}" "$rill" > "$out/bench.txt" 2>&1; step bench $?
cat "$out/bench.txt"
