#!/usr/bin/env bash
# The mixture-of-experts sample (samples/gpt_moe: 4 experts a layer, top-2)
# on one device against its experts over 2 devices of one process (expert
# parallel: tokens by all-to-all, and the batch data parallel), runs
# alternating: tokens per second after warm-up (median, min, max) and the
# ratio of medians. Then one traced run on 2 devices: the all-to-alls'
# share of the acts' time (the boxing S(1) <-> S(0) of the dispatched
# tokens and of their gradients).
#   bench/moe_bench.sh [runs=3] [steps=60]
source "$(dirname "$0")/common.sh"
runs=${1:-3}
steps=${2:-60}
job=samples/gpt_moe/gpt_moe.json
context=128
declare -A rates
for ((r = 0; r < runs; r++)); do
  for devices in cpu:1 cpu:2; do
    "$rill" run "$job" --devices "$devices" --steps "$steps" --set eval=off --set generate=off \
      --set train.log_every="$steps" --result "$tmp/r.json" > /dev/null
    rates[$devices]+="$(steady_rate "$tmp/r.json") "
  done
done
"$rill" run "$job" --devices cpu:2 --steps 20 --set eval=off --set generate=off --set train.log_every=20 \
  --trace "$tmp/trace.json" > /dev/null
/usr/bin/python3 - "$context" "${rates[cpu:1]}" "${rates[cpu:2]}" "$tmp/trace.json" <<'PY'
import json, statistics, sys
context = int(sys.argv[1])
one = [float(x) * context for x in sys.argv[2].split()]
two = [float(x) * context for x in sys.argv[3].split()]
for name, r in (("cpu:1", one), ("cpu:2, experts split", two)):
    print(f"{name:22s} {statistics.median(r):9.0f} tokens/s  (min {min(r):.0f}, max {max(r):.0f}, {len(r)} runs)")
print(f"cpu:2 / cpu:1: {statistics.median(two) / statistics.median(one):.2f}x")
events = [e for e in json.load(open(sys.argv[4]))["traceEvents"] if e.get("ph") == "X"]
total = sum(e["dur"] for e in events)
a2a = sum(e["dur"] for e in events if "S(1)->S(0)" in e["name"] or "S(0)->S(1)" in e["name"])
print(f"all-to-alls: {100 * a2a / total:.1f}% of the acts' time on 2 devices ({len(events)} acts traced)")
PY
