#!/usr/bin/env bash
# Micro-batches streaming through two stages vs the stages taking turns, on
# 2 local agents x 1 cpu device: the wide MLP 784-4096-4096-4096-10 (the
# synthetic data of bench/mlp_wide_synthetic.json) at batch 1024, 10 steps,
# cut after its second hidden layer (stage 0 on node 0, the rest on node 1).
# Runs alternate: 1 micro-batch (the stages take turns), 4 and 8. Prints
# samples/s (median, min, max) of each and the ratios of medians against 1,
# beside the ideal for S stages and M micro-batches, M / (M + S - 1) of the
# time busy: (S - 1) / (M + S - 1) is the bubble. Then the bubble measured:
# the same stages on 2 devices of one process, traced, each device's idle
# share (bench/trace_bubble.py).
# Batch 1024 keeps micro-batches at 128 and 256 rows: at 32 rows a one-core
# GEMM against a 4096 x 4096 weight reads the 64 MB weight for little work
# and runs far below its rate at 256, which is the GEMM's cost, not the
# pipeline's.
#   bench/pipeline_bench.sh [runs=3]
source "$(dirname "$0")/common.sh"
runs=${1:-3}
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
job = json.load(open("bench/mlp_wide_synthetic.json"))
job["name"] = "mlp_wide_stages"
job["train"].update({"steps": 10, "batch_size": 1024, "log_every": 5})
variables = {v["name"]: v for v in job["variables"]}
# A third hidden layer: h2 -> fc3 [4096] -> h3 -> logits [10].
variables["w3"]["shape"] = [4096, 4096]
variables["b3"]["shape"] = [4096]
job["variables"] += [{"name": "w4", "shape": [4096, 10], "init": {"type": "xavier_uniform", "seed": 4}},
                     {"name": "b4", "shape": [10]}]
ops = [o for o in job["ops"] if o["name"] not in ("fc3", "logits", "xent", "loss")]
ops += [{"name": "fc3", "type": "matmul", "inputs": ["h2", "w3"]},
        {"name": "fc3_b", "type": "bias_add", "inputs": ["fc3", "b3"]},
        {"name": "h3", "type": "relu", "inputs": ["fc3_b"]},
        {"name": "fc4", "type": "matmul", "inputs": ["h3", "w4"]},
        {"name": "logits", "type": "bias_add", "inputs": ["fc4", "b4"]},
        {"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": ["logits", "y"]},
        {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}]
job["ops"] = ops
stage0 = ["x", "w1", "b1", "fc1", "fc1_b", "h1", "w2", "b2", "fc2", "fc2_b", "h2"]
stage1 = ["y", "w3", "b3", "fc3", "fc3_b", "h3", "w4", "b4", "fc4", "logits", "xent", "loss"]
job["groups"] = [{"name": "stage0", "placement": "cpu 0:0", "members": stage0},
                 {"name": "stage1", "placement": "cpu 1:0", "members": stage1}]
for m in (1, 4, 8):
    job["train"]["micro_batches"] = m
    json.dump(job, open(f"{sys.argv[1]}/m{m}.json", "w"))
job["groups"][0]["placement"], job["groups"][1]["placement"] = "cpu 0:0", "cpu 0:1"
for m in (1, 4, 8):
    job["train"]["micro_batches"] = m
    json.dump(job, open(f"{sys.argv[1]}/local{m}.json", "w"))
PY
declare -A rates
for ((r = 0; r < runs; r++)); do
  for m in 1 4 8; do
    "$rill" run "$tmp/m$m.json" --nodes 2 --apart --devices cpu:1 --ctrl-port $((19850 + 6 * r + m / 2)) \
      --result "$tmp/r.json" --logdir "$tmp" > /dev/null
    rates[$m]+="$(steady_rate "$tmp/r.json") "
  done
done
for m in 4 8; do
  ideal=$(/usr/bin/python3 -c "print(f'{2 * $m / ($m + 1):.2f}')")
  echo "== $m micro-batches vs the stages taking turns (ideal ${ideal}x: the work of 2 stages at once, less the bubble 1/($m + 1))"
  /usr/bin/python3 bench/summarize.py "micro $m" "${rates[$m]}" "micro 1" "${rates[1]}"
done
for m in 1 4 8; do
  "$rill" run "$tmp/local$m.json" --devices cpu:2 --trace "$tmp/trace.json" > /dev/null
  echo "== bubble with $m micro-batch(es) (stage 0 on cpu0, stage 1 on cpu1; one process)"
  /usr/bin/python3 bench/trace_bubble.py "$tmp/trace.json" 2 "$m"
done
