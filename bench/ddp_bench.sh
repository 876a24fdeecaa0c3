#!/usr/bin/env bash
# Rill vs PyTorch DDP (gloo) with 2 processes on loopback: the MLP of
# bench/mlp_synthetic.json, global batch 512, one thread per process (per
# device), 20 warm-up + 200 timed steps, alternating runs. Rill runs it twice:
# on 2 local agents x 1 cpu device (consistent view, as two machines would),
# and on one agent with 2 devices in the mirrored view (DDP's own setting:
# 2 ranks of 256 rows on one machine). Prints samples/s (median, min, max)
# and the ratios of medians.
#   bench/ddp_bench.sh [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/same_blas.sh
runs=${1:-5}
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "runs: $runs; torch BLAS: LD_LIBRARY_PATH=$openblas_dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rill_rates=()
mirrored_rates=()
torch_rates=()
for ((r = 0; r < runs; r++)); do
  "$rill" run bench/mlp_synthetic.json --nodes 2 --apart --devices cpu:1 --ctrl-port $((19700 + 2 * r)) \
    --set train.batch_size=512 --result "$tmp/r.json" --logdir "$tmp" > /dev/null
  rill_rates+=("$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")")
  "$rill" run bench/mlp_synthetic.json --devices cpu:2 --set train.view=mirrored --set train.batch_size=256 \
    --result "$tmp/m.json" > /dev/null
  mirrored_rates+=("$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/m.json'))['steady_samples_per_sec'])")")
  torch_rates+=("$(LD_LIBRARY_PATH=$openblas_dir /usr/bin/python3 bench/torch_ddp.py 20 200 512 $((29500 + r)) |
    /usr/bin/python3 -c "import json,sys;print(json.load(sys.stdin)['samples_per_sec'])")")
done
/usr/bin/python3 bench/summarize.py "rill 2x1" "${rill_rates[*]}" "torch ddp" "${torch_rates[*]}"
/usr/bin/python3 bench/summarize.py "rill 1x2 mirrored" "${mirrored_rates[*]}" "torch ddp" "${torch_rates[*]}"
