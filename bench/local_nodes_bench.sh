#!/usr/bin/env bash
# `rill run --nodes 2` on one address (the default: the agents' ranks
# exchange data through shared memory) against `--apart` (each agent on an
# address of its own, talking TCP as two machines would), keyed both: the
# MLP of bench/mlp_synthetic.json, its global batch of 256, 2 agents x cpu:1,
# alternating runs. Prints samples/s after warm-up (median, min, max) and
# the ratio of medians.
#   bench/local_nodes_bench.sh [runs=5]
source "$(dirname "$0")/common.sh"
runs=${1:-5}
shared=() apart=()
for ((r = 0; r < runs; r++)); do
  "$rill" run bench/mlp_synthetic.json --nodes 2 --devices cpu:1 --ctrl-port $((19720 + 4 * r)) \
    --result "$tmp/shared.json" --logdir "$tmp" > /dev/null
  shared+=("$(steady_rate "$tmp/shared.json")")
  "$rill" run bench/mlp_synthetic.json --nodes 2 --apart --devices cpu:1 --ctrl-port $((19722 + 4 * r)) \
    --result "$tmp/apart.json" --logdir "$tmp" > /dev/null
  apart+=("$(steady_rate "$tmp/apart.json")")
done
/usr/bin/python3 bench/summarize.py "one address" "${shared[*]}" "apart" "${apart[*]}"
