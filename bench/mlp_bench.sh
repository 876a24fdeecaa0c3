#!/usr/bin/env bash
# Rill vs PyTorch (CPU) on the 784-512-512-10 MLP, batch 256, SGD, synthetic
# data from a pre-generated pool: 20 warm-up steps, 200 timed steps, the same
# thread count on both sides, alternating runs. Prints samples/s (median, min,
# max over the runs) and the ratio of medians.
#   bench/mlp_bench.sh [threads=1] [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/same_blas.sh
threads=${1:-1}
runs=${2:-5}
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }

# PyTorch calls whatever libblas.so.3 resolves to; pin OpenBLAS for it.
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
echo "threads: $threads, runs: $runs"
echo "rill BLAS: $(ldd $rill | grep -o 'libopenblas[^ ]*' | head -1)"
echo "torch BLAS: LD_LIBRARY_PATH=$openblas_dir ($(ls $openblas_dir/libblas.so.3 2>/dev/null || echo 'missing: install libopenblas0-pthread'))"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rill_rates=()
torch_rates=()
for ((r = 0; r < runs; r++)); do
  "$rill" run bench/mlp_synthetic.json --devices "cpu:$threads" --result "$tmp/r.json" > /dev/null
  rill_rates+=("$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")")
  torch_rates+=("$(LD_LIBRARY_PATH=$openblas_dir /usr/bin/python3 bench/torch_mlp.py "$threads" 20 200 256 |
    /usr/bin/python3 -c "import json,sys;print(json.load(sys.stdin)['samples_per_sec'])")")
done
/usr/bin/python3 bench/summarize.py "rill" "${rill_rates[*]}" "pytorch" "${torch_rates[*]}"
