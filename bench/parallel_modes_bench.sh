#!/usr/bin/env bash
# Data parallel vs model parallel on 2 local agents x 1 cpu device: the wide
# MLP of bench/mlp_wide_synthetic.json (784-4096-4096-10) at batch 256,
# 20 steps, alternating runs. Model parallel is the Megatron layout (w1 split
# by columns, b1 with it, w2 by rows, the batch replicated). Prints samples/s
# (median, min, max), the ratio of medians, and the data-plane bytes each
# node receives per step (from the result's traffic_bytes).
#   bench/parallel_modes_bench.sh [runs=3]
source "$(dirname "$0")/common.sh"
runs=${1:-3}
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
job = json.load(open("bench/mlp_wide_synthetic.json"))
job["train"].update({"steps": 20, "batch_size": 256})
json.dump(job, open(sys.argv[1] + "/dp.json", "w"))
for i in job["inputs"]:
    i["sbp"] = "B"
split = {"w1": "S(1)", "b1": "S(0)", "w2": "S(0)"}
for v in job["variables"]:
    if v["name"] in split:
        v["sbp"] = split[v["name"]]
job["name"] = "mlp_wide_model_parallel"
json.dump(job, open(sys.argv[1] + "/mp.json", "w"))
PY
per_step() {  # bytes node 1 receives from node 0 per step
  /usr/bin/python3 -c "import json;r=json.load(open('$1'));print(r['traffic_bytes'][0][1]/r['steps'])"
}
dp_rates=() mp_rates=() dp_bytes=0 mp_bytes=0
for ((r = 0; r < runs; r++)); do
  "$rill" run "$tmp/dp.json" --nodes 2 --apart --devices cpu:1 --ctrl-port $((19800 + 4 * r)) \
    --result "$tmp/dp_r.json" --logdir "$tmp" > /dev/null
  dp_rates+=("$(steady_rate "$tmp/dp_r.json")")
  dp_bytes=$(per_step "$tmp/dp_r.json")
  "$rill" run "$tmp/mp.json" --nodes 2 --apart --devices cpu:1 --ctrl-port $((19802 + 4 * r)) \
    --result "$tmp/mp_r.json" --logdir "$tmp" > /dev/null
  mp_rates+=("$(steady_rate "$tmp/mp_r.json")")
  mp_bytes=$(per_step "$tmp/mp_r.json")
done
/usr/bin/python3 bench/summarize.py "model par" "${mp_rates[*]}" "data par" "${dp_rates[*]}"
printf 'bytes node0->node1 per step: data parallel %.0f, model parallel %.0f\n' "$dp_bytes" "$mp_bytes"
