#!/usr/bin/env bash
# Rill vs PyTorch on one GPU: the MLP of bench/mlp_synthetic.json
# (784-512-512-10, batch 256) and a wide one (bench/mlp_wide_synthetic.json,
# 784-4096-4096-10, batch 1024), SGD, TF32 off on every side. Rill and
# PyTorch eager read synthetic data from host memory each step and the loss
# back; Rill also with train.cuda_graphs off (every kernel launched by its
# act, no graphs of acts); the anchors beside them (bench/torch_mlp.py): torch.compile, the
# whole step as one CUDA graph with the data already on the GPU, and the
# step's 8 GEMMs alone. 20 warm-up steps, 200 timed, alternating runs
# (torch.compile once);
# samples/s median (min-max), ratios, and peak device memory.
#   bench/gpu_mlp_bench.sh [runs=3] [rill command=build/rill]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
rill=${2:-build/rill}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
field() { $python -c "import json,sys;print(json.load(open(sys.argv[1])).get(sys.argv[2], 0))" "$@"; }
for shape in "mlp_synthetic 256 512" "mlp_wide_synthetic 1024 4096"; do
  read -r job batch width <<< "$shape"
  declare -A rates=()
  declare -A peak=()
  for ((r = 0; r < runs; r++)); do
    $rill run "bench/$job.json" --devices cuda:1 --steps 220 --result "$tmp/r.json" > /dev/null
    rates[rill]+="$(field "$tmp/r.json" steady_samples_per_sec) "
    peak[rill]=$(field "$tmp/r.json" peak_device_bytes)
    # Rill launching every kernel itself (no graphs of acts), beside it.
    $rill run "bench/$job.json" --devices cuda:1 --steps 220 --set train.cuda_graphs=false --result "$tmp/r.json" > /dev/null
    rates[direct]+="$(field "$tmp/r.json" steady_samples_per_sec) "
    modes="eager graph gemm"
    # compiling takes long, and one run says enough (COMPILE=0: none)
    [ "$r" = 0 ] && [ "${COMPILE:-1}" = 1 ] && modes="$modes compile"
    for mode in $modes; do
      $python bench/torch_mlp.py 1 20 200 "$batch" cuda "$width" "$mode" > "$tmp/t.json"
      rates[$mode]+="$(field "$tmp/t.json" samples_per_sec) "
      peak[$mode]=$(field "$tmp/t.json" peak_device_bytes)
    done
  done
  echo "== $job (batch $batch, width $width)"
  for mode in eager compile graph gemm; do
    [ -n "${rates[$mode]:-}" ] || continue
    $python bench/summarize.py "rill" "${rates[rill]}" "$mode" "${rates[$mode]}" | tail -1
  done
  $python - "${rates[rill]}" "${rates[direct]}" "${rates[eager]}" "${rates[compile]:-}" "${rates[graph]}" "${rates[gemm]}" <<'PY'
import statistics, sys
names = ["rill", "rill, no graphs", "torch eager", "torch.compile", "CUDA graph", "GEMMs alone"]
for name, values in zip(names, sys.argv[1:]):
    xs = [float(v) for v in values.split()]
    if not xs:
        continue
    print(f"  {name:14s} median {statistics.median(xs):10.0f} samples/s  ({min(xs):.0f}-{max(xs):.0f})")
PY
  echo "  peak device memory: rill $((peak[rill] / 1048576)) MiB (its regsts, optimizer state and scratch), torch eager $((peak[eager] / 1048576)) MiB (max_memory_allocated)"
  unset rates peak
done
