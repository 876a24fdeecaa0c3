#!/usr/bin/env bash
# What the in-memory replicas cost a layout that splits variables: the MLP
# of bench/mlp_synthetic.json with ZeRO (Adam's state sharded), global batch
# 512, on `rill run --nodes 3 --apart` (3 agents x cpu:1, TCP between them),
# --min-nodes 2 with replicas every K steps against --min-nodes 2 without
# (--replica-every 0: each node still keeps its last two steps), alternating
# runs of 600 steps. Prints samples/s after warm-up (median, min, max) and
# the ratio of medians.
#   bench/replica_bench.sh [runs=5] [every=10]
source "$(dirname "$0")/common.sh"
runs=${1:-5}
every=${2:-10}
with=() without=()
run() {  # RESULT PORT REPLICA_EVERY
  "$rill" run bench/mlp_synthetic.json --nodes 3 --apart --devices cpu:1 --ctrl-port "$2" --steps 600 \
    --set train.zero=true --set train.batch_size=512 --min-nodes 2 --replica-every "$3" \
    --result "$1" --logdir "$tmp" > /dev/null
}
for ((r = 0; r < runs; r++)); do
  run "$tmp/with.json" $((19760 + 8 * r)) "$every"
  with+=("$(steady_rate "$tmp/with.json")")
  run "$tmp/without.json" $((19764 + 8 * r)) 0
  without+=("$(steady_rate "$tmp/without.json")")
done
echo "ZeRO MLP, 3 agents x cpu:1 apart, batch 512, --min-nodes 2; replicas every $every steps or none"
/usr/bin/python3 bench/summarize.py "replicas" "${with[*]}" "none" "${without[*]}"
