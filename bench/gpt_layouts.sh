#!/usr/bin/env bash
# The GPT sample trained whole (1000 steps) in each parallel layout on
# agents of this machine: its validation loss at the end (nats per byte)
# and the wall time, beside cpu:2 on one process. Every layout runs the
# same batches from the same initial values; their first 10 losses match
# PyTorch's (tests/torch/gpt_torch_check.py), so the final losses differ
# only by float rounding compounded over 1000 steps.
#   bench/gpt_layouts.sh [steps=1000]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-1000}
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # name, job file, rill run arguments...
  local name=$1 job=$2
  shift 2
  local start=$SECONDS
  build/rill run "$job" --steps "$steps" --result "$tmp/$name.json" "$@" > "$tmp/$name.log" 2>&1 ||
    { echo "$name failed:"; tail -5 "$tmp/$name.log"; return 1; }
  $python - "$name" "$tmp/$name.json" $((SECONDS - start)) <<'PY'
import json, math, sys
name, path, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(path))
val = r["metrics"]["loss"]  # the eval pass's
print(f"{name:34s} val loss {val:.4f} nats/byte ({val / math.log(2):.3f} bits)  train loss {r['final_loss']:.4f}  {seconds} s")
PY
}
run "cpu:2, one process" samples/gpt/gpt_moby.json --devices cpu:2
run "data parallel, 2 agents" samples/gpt/gpt_moby.json --nodes 2 --apart --devices cpu:1
run "tensor parallel, 2 agents" samples/gpt/gpt_moby_tp.json --nodes 2 --apart --devices cpu:1
run "2 pipeline stages, 2 agents" samples/gpt/gpt_moby.json --nodes 2 --apart --devices cpu:1 \
  --set pipeline.num_stages=2 --set train.micro_batches=2
run "2-D hybrid, 2 agents x cpu:2" samples/gpt/gpt_moby_hybrid.json --nodes 2 --apart --devices cpu:2
