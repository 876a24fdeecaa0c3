#!/usr/bin/env bash
# What the cluster key costs on the data plane: every message between
# machines is sealed with AES-256-GCM (comm/data_cipher.h).
# Side by side in one run, alternating with and without a key:
#  1. all_reduce of 64 MiB between 2 ranks over TCP on loopback
#     (bench/allreduce_bench --tcp 1 [--key FILE]): median time per call;
#  2. the DDP benchmark's Rill case: the synthetic MLP (batch 512) on 2 local
#     agents x cpu:1 (rill run --nodes 2, keyed by default, --insecure not):
#     steady samples/s.
# Prints medians, spreads and the ratios (keyed / unkeyed throughput).
#   bench/curve_bench.sh [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
rill=build/rill
bench=build/bench/allreduce_bench
[ -x "$rill" ] && [ -x "$bench" ] || { echo "build first: ./dev build" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$rill" keygen "$tmp/cluster.key" > /dev/null

allreduce() {  # allreduce [--key FILE]: MB/s (algbw) of the 64 MiB all_reduce
  "$bench" --tcp 1 --ranks 2 --sizes 67108864 --warmup 3 --iters 10 "$@" |
    awk '!/^#/ && NF > 5 { printf "%.1f\n", $1 / $3 }'
}
mlp() {  # mlp PORT [--insecure]: steady samples/s
  "$rill" run bench/mlp_synthetic.json --nodes 2 --apart --devices cpu:1 --ctrl-port "$1" --set train.batch_size=512 \
    --set train.steps=400 --result "$tmp/r.json" --logdir "$tmp/logs" "${@:2}" > /dev/null
  /usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])"
}

keyed_ar=() plain_ar=() keyed_mlp=() plain_mlp=()
for ((r = 0; r < runs; r++)); do
  plain_ar+=("$(allreduce)")
  keyed_ar+=("$(allreduce --key "$tmp/cluster.key")")
  plain_mlp+=("$(mlp $((19760 + 4 * r)) --insecure)")
  keyed_mlp+=("$(mlp $((19762 + 4 * r)))")
done
echo "all_reduce 64 MiB, 2 ranks over TCP (algbw):"
/usr/bin/python3 bench/summarize.py "keyed" "${keyed_ar[*]}" "no key" "${plain_ar[*]}" MB/s
echo "synthetic MLP, 2 agents x cpu:1, batch 512 (samples/s):"
/usr/bin/python3 bench/summarize.py "keyed" "${keyed_mlp[*]}" "no key" "${plain_mlp[*]}"
