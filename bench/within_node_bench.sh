#!/usr/bin/env bash
# Data parallelism within one node: the MLP of bench/mlp_synthetic.json
# (784-512-512-10, batch 256, 60 steps) on cpu:1, on cpu:2, and on cpu:2 with
# train.zero (variables split S(0): each device sums and updates its rows).
# Runs alternate; prints samples/s (median, min, max) and the ratios of
# medians against cpu:1.
#   bench/within_node_bench.sh [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rate() {
  "$rill" run bench/mlp_synthetic.json --steps 60 --result "$tmp/r.json" "$@" > /dev/null
  /usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])"
}
one=() two=() zero=()
for ((r = 0; r < runs; r++)); do
  one+=("$(rate --devices cpu:1)")
  two+=("$(rate --devices cpu:2)")
  zero+=("$(rate --devices cpu:2 --set train.zero=true)")
done
/usr/bin/python3 bench/summarize.py "cpu:2" "${two[*]}" "cpu:1" "${one[*]}"
/usr/bin/python3 bench/summarize.py "cpu:2 zero" "${zero[*]}" "cpu:1" "${one[*]}"
