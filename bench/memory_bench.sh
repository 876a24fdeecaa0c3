#!/usr/bin/env bash
# Peak memory (max RSS) of Rill and PyTorch (CPU) training the wide MLP of
# bench/mlp_wide_synthetic.json (784-4096-4096-10) at batch 256 on one
# thread, SGD, the same pool of synthetic samples on both sides (20 batches,
# as bench/torch_mlp.py keeps), 10 warm-up and 50 timed steps, alternating
# runs. Prints each side's median, min and max in MB and the ratio.
#   bench/memory_bench.sh [runs=3]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/same_blas.sh
runs=${1:-3}
rill=build/rill
[ -x "$rill" ] || { echo "build first: ./dev build" >&2; exit 1; }
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread  # PyTorch's BLAS pinned to OpenBLAS
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
batch=256
rss() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }  # KiB
rill_mb=()
torch_mb=()
for ((r = 0; r < runs; r++)); do
  kib=$(rss "$rill" run bench/mlp_wide_synthetic.json --devices cpu:1 --steps 60 \
    --set train.batch_size=$batch --set datasets.pool.num_samples=$((20 * batch)))
  rill_mb+=("$((kib / 1024))")
  kib=$(LD_LIBRARY_PATH=$openblas_dir rss /usr/bin/python3 bench/torch_mlp.py 1 10 50 $batch cpu 4096)
  torch_mb+=("$((kib / 1024))")
done
/usr/bin/python3 bench/summarize.py "rill" "${rill_mb[*]}" "pytorch" "${torch_mb[*]}" MB
