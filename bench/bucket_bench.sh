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
/usr/bin/python3 - "$tmp" "$layers" <<'PY'
import json, sys
out, layers = sys.argv[1], int(sys.argv[2])
width = 64
job = {
    "name": "deep_mlp_bench",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": 6400, "num_classes": 10,
                  "feature_shape": [width], "seed": 7}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [width]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [], "ops": [],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.01},
    "train": {"steps": 40, "batch_size": 64, "log_every": 1000, "seed": 1},
}
h = "x"
for i in range(layers + 1):
    cols = 10 if i == layers else width
    job["variables"] += [{"name": f"w{i}", "shape": [width, cols], "init": {"type": "xavier_uniform", "seed": i + 1}},
                         {"name": f"b{i}", "shape": [cols]}]
    job["ops"] += [{"name": f"fc{i}", "type": "matmul", "inputs": [h, f"w{i}"]},
                   {"name": f"fc{i}_b", "type": "bias_add", "inputs": [f"fc{i}", f"b{i}"]}]
    h = f"fc{i}_b"
    if i < layers:
        job["ops"].append({"name": f"h{i}", "type": "relu", "inputs": [h]})
        h = f"h{i}"
job["ops"] += [{"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": [h, "y"]},
               {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}]
json.dump(job, open(out + "/deep.json", "w"))
PY
on=() off=()
for ((r = 0; r < runs; r++)); do
  "$rill" run "$tmp/deep.json" --nodes 2 --devices cpu:1 --ctrl-port $((19820 + 4 * r)) \
    --result "$tmp/on.json" --logdir "$tmp" > /dev/null
  on+=("$(steady_rate "$tmp/on.json")")
  "$rill" run "$tmp/deep.json" --nodes 2 --devices cpu:1 --ctrl-port $((19822 + 4 * r)) \
    --set train.bucket_bytes=0 --result "$tmp/off.json" --logdir "$tmp" > /dev/null
  off+=("$(steady_rate "$tmp/off.json")")
done
/usr/bin/python3 bench/summarize.py "buckets" "${on[*]}" "none" "${off[*]}"
