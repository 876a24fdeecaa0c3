#!/usr/bin/env bash
# Data parallelism within one node: the MLP of bench/mlp_synthetic.json
# (784-512-512-10, batch 256, 60 steps) on cpu:1, on cpu:2, and on cpu:2 with
# train.zero (variables split S(0): each device sums and updates its rows).
# Runs alternate; prints samples/s (median, min, max) and the ratios of
# medians against cpu:1.
#   bench/within_node_bench.sh [runs=5]
source "$(dirname "$0")/common.sh"
runs=${1:-5}
rate() {
  "$rill" run bench/mlp_synthetic.json --steps 60 --result "$tmp/r.json" "$@" > /dev/null
  steady_rate "$tmp/r.json"
}
one=() two=() zero=()
for ((r = 0; r < runs; r++)); do
  one+=("$(rate --devices cpu:1)")
  two+=("$(rate --devices cpu:2)")
  zero+=("$(rate --devices cpu:2 --set train.zero=true)")
done
/usr/bin/python3 bench/summarize.py "cpu:2" "${two[*]}" "cpu:1" "${one[*]}"
/usr/bin/python3 bench/summarize.py "cpu:2 zero" "${zero[*]}" "cpu:1" "${one[*]}"
