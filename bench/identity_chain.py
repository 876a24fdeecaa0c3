"""Writes a chain job for bench/compile_bench.sh: x [WIDTH] -> matmul w ->
OPS identity ops one after another -> softmax cross-entropy -> mean; one
variable, so every identity's output is read only by the next op. With
BRANCHES > 1, every op of the chain but the first is instead a block of
BRANCHES identities of the previous value summed by adds (a ladder of
diamonds: 2 * BRANCHES - 1 ops a block).

    identity_chain.py OUT.json OPS [WIDTH=8] [BATCH=64] [BRANCHES=1]
"""
import json
import sys

out, ops = sys.argv[1], int(sys.argv[2])
width = int(sys.argv[3]) if len(sys.argv) > 3 else 8
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
branches = int(sys.argv[5]) if len(sys.argv) > 5 else 1
job = {
    "name": "identity_chain_bench",
    "datasets": [{"name": "pool", "kind": "synthetic", "num_samples": max(6400, 4 * batch), "num_classes": 10,
                  "feature_shape": [width], "seed": 7}],
    "inputs": [{"name": "x", "dataset": "pool", "field": "features", "shape": [width]},
               {"name": "y", "dataset": "pool", "field": "label", "dtype": "i32"}],
    "variables": [{"name": "w", "shape": [width, 10], "init": {"type": "xavier_uniform", "seed": 1}}],
    "ops": [{"name": "fc", "type": "matmul", "inputs": ["x", "w"]}],
    "loss": "loss",
    "optimizer": {"type": "sgd", "lr": 0.01},
    "train": {"steps": 40, "batch_size": batch, "log_every": 1000, "seed": 1},
}
h = "fc"
block = 0
while len(job["ops"]) < ops:
    if branches <= 1:
        name = f"id{block}"
        job["ops"].append({"name": name, "type": "identity", "inputs": [h]})
    else:
        arms = [f"b{block}_{k}" for k in range(branches)]
        job["ops"] += [{"name": a, "type": "identity", "inputs": [h]} for a in arms]
        name = arms[0]
        for k in range(1, branches):
            total = f"b{block}_sum{k}"
            job["ops"].append({"name": total, "type": "add", "inputs": [name, arms[k]]})
            name = total
    h = name
    block += 1
job["ops"] += [{"name": "xent", "type": "sparse_softmax_cross_entropy", "inputs": [h, "y"]},
               {"name": "loss", "type": "reduce_mean", "inputs": ["xent"]}]
json.dump(job, open(out, "w"))
