"""Writes a deep, narrow MLP job: LAYERS hidden layers of WIDTH (matmul,
bias_add, relu each) on synthetic WIDTH-feature data, 10 classes; 3 ops and
2 variables per layer. Used by bench/bucket_bench.sh and bench/compile_bench.sh.

    deep_mlp.py OUT.json LAYERS [WIDTH=64] [BATCH=64]
"""
import json
import sys

out, layers = sys.argv[1], int(sys.argv[2])
width = int(sys.argv[3]) if len(sys.argv) > 3 else 64
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
job = {
    "name": "deep_mlp_bench",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": max(6400, 4 * batch), "num_classes": 10,
                  "feature_shape": [width], "seed": 7}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [width]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [], "ops": [],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.01},
    "train": {"steps": 40, "batch_size": batch, "log_every": 1000, "seed": 1},
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
json.dump(job, open(out, "w"))
