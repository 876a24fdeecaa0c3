#!/usr/bin/env bash
# What watching a run costs: the synthetic MLP (bench/mlp_synthetic.json,
# batch 512) on 2 local agents, alternating runs without and with a poller
# that reads /metrics, /api/status and /api/jobs/1 from the master (as a
# dashboard page does) every second, and every 0.1 s. Prints samples/s
# (median, min, max) and the ratios of medians.
#   bench/metrics_bench.sh [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
poller=
trap 'rm -rf "$tmp"; [ -n "$poller" ] && kill "$poller" 2>/dev/null || true' EXIT
http=127.0.0.1:8265  # the master's default
run() {  # run INDEX: one run, its steady samples/s on stdout
  "$rill" run bench/mlp_synthetic.json --nodes 2 --devices cpu:1 --ctrl-port $((19800 + 2 * $1)) \
    --set train.batch_size=512 --set train.steps=400 --result "$tmp/r.json" --logdir "$tmp" > /dev/null
  /usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])"
}
poll() {  # poll PERIOD: reads the endpoints every PERIOD seconds until killed
  while true; do
    curl -s "http://$http/metrics" "http://$http/api/status" "http://$http/api/jobs/1" > /dev/null || true
    sleep "$1"
  done
}
plain=() every_second=() every_tenth=()
for ((r = 0; r < runs; r++)); do
  plain+=("$(run $((3 * r)))")
  poll 1 & poller=$!
  every_second+=("$(run $((3 * r + 1)))")
  kill "$poller"; wait "$poller" 2>/dev/null || true
  poll 0.1 & poller=$!
  every_tenth+=("$(run $((3 * r + 2)))")
  kill "$poller"; wait "$poller" 2>/dev/null || true
  poller=
done
/usr/bin/python3 bench/summarize.py "polled every 1 s" "${every_second[*]}" "not polled" "${plain[*]}"
/usr/bin/python3 bench/summarize.py "polled every 0.1 s" "${every_tenth[*]}" "not polled" "${plain[*]}"
