#!/usr/bin/env bash
# Rill vs PyTorch eager on one GPU: the MLP of bench/mlp_synthetic.json
# (784-512-512-10, batch 256) and a wide one (bench/mlp_wide_synthetic.json,
# 784-4096-4096-10, batch 1024), SGD, synthetic data in host memory copied in
# each step, the loss read back each step, TF32 off on both sides. 20 warm-up
# steps, 200 timed, alternating runs; samples/s median (min-max) and the ratio.
#   bench/gpu_mlp_bench.sh [runs=3] [rill binary=build/rill]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
rill=${2:-build/rill}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in "mlp_synthetic 256 512" "mlp_wide_synthetic 1024 4096"; do
  read -r job batch width <<< "$shape"
  rill_rates=()
  torch_rates=()
  for ((r = 0; r < runs; r++)); do
    "$rill" run "bench/$job.json" --devices cuda:1 --result "$tmp/r.json" > /dev/null
    rill_rates+=("$($python -c "import json;print(json.load(open('$tmp/r.json'))['steady_samples_per_sec'])")")
    torch_rates+=("$($python bench/torch_mlp.py 1 20 200 "$batch" cuda "$width" |
      $python -c "import json,sys;print(json.load(sys.stdin)['samples_per_sec'])")")
  done
  echo "== $job (batch $batch, width $width)"
  $python bench/summarize.py "rill" "${rill_rates[*]}" "pytorch" "${torch_rates[*]}"
done
