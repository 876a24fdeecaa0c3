#!/usr/bin/env bash
# What the in-memory replicas cost a layout that splits variables: the MLP
# of bench/mlp_synthetic.json with ZeRO (Adam's state sharded), global batch
# 512, on `rill run --nodes 3 --apart` (3 agents x cpu:1, TCP between them),
# --min-nodes 2 with replicas every K steps against --min-nodes 2 without
# (--replica-every 0: each node still keeps its last two steps), and that
# against no live membership at all (nothing kept), and replicas to the
# next two nodes (--replica-copies 2, which survives two nodes lost at
# once; with --min-nodes 1, as two lost leave one) against to the next
# one, alternating runs of 600 steps. Prints samples/s after warm-up
# (median, min, max) and the ratios of medians.
#   bench/replica_bench.sh [runs=5] [every=10]
source "$(dirname "$0")/common.sh"
runs=${1:-5}
every=${2:-10}
with=() two=() without=() plain=()
run() {  # RESULT PORT FLAGS...
  local result=$1 port=$2
  shift 2
  "$rill" run bench/mlp_synthetic.json --nodes 3 --apart --devices cpu:1 --ctrl-port "$port" --steps 600 \
    --set train.zero=true --set train.batch_size=512 "$@" --result "$result" --logdir "$tmp" > /dev/null
}
for ((r = 0; r < runs; r++)); do
  run "$tmp/with.json" $((19760 + 16 * r)) --min-nodes 2 --replica-every "$every"
  with+=("$(steady_rate "$tmp/with.json")")
  run "$tmp/two.json" $((19764 + 16 * r)) --min-nodes 1 --replica-every "$every" --replica-copies 2
  two+=("$(steady_rate "$tmp/two.json")")
  run "$tmp/without.json" $((19768 + 16 * r)) --min-nodes 2 --replica-every 0
  without+=("$(steady_rate "$tmp/without.json")")
  run "$tmp/plain.json" $((19772 + 16 * r))
  plain+=("$(steady_rate "$tmp/plain.json")")
done
echo "ZeRO MLP, 3 agents x cpu:1 apart, batch 512: --min-nodes 2 with replicas every $every steps, without, and no --min-nodes"
/usr/bin/python3 bench/summarize.py "replicas" "${with[*]}" "none" "${without[*]}"
/usr/bin/python3 bench/summarize.py "two copies" "${two[*]}" "one copy" "${with[*]}"
/usr/bin/python3 bench/summarize.py "none" "${without[*]}" "plain" "${plain[*]}"
