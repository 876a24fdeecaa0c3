#!/usr/bin/env bash
# Gradient buckets on vs off, on 2 local agents x 1 cpu device: a deep,
# narrow MLP (LAYERS hidden layers of width 64 on synthetic 64-feature data,
# batch 64, 40 steps), so each step's 2 x LAYERS + 2 gradients are small and
# their all-reduces are latency-bound. Alternating runs with
# train.bucket_bytes at its default (1 MiB) and 0 (one all-reduce per
# gradient). Prints samples/s (median, min, max) and the ratio of medians.
#   bench/bucket_bench.sh [runs=3] [layers=40]
source "$(dirname "$0")/common.sh"
runs=${1:-3}
layers=${2:-40}
/usr/bin/python3 bench/deep_mlp.py "$tmp/deep.json" "$layers"
on=() off=()
for ((r = 0; r < runs; r++)); do
  "$rill" run "$tmp/deep.json" --nodes 2 --apart --devices cpu:1 --ctrl-port $((19820 + 4 * r)) \
    --result "$tmp/on.json" --logdir "$tmp" > /dev/null
  on+=("$(steady_rate "$tmp/on.json")")
  "$rill" run "$tmp/deep.json" --nodes 2 --apart --devices cpu:1 --ctrl-port $((19822 + 4 * r)) \
    --set train.bucket_bytes=0 --result "$tmp/off.json" --logdir "$tmp" > /dev/null
  off+=("$(steady_rate "$tmp/off.json")")
done
/usr/bin/python3 bench/summarize.py "buckets" "${on[*]}" "none" "${off[*]}"
