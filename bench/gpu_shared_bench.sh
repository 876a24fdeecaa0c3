#!/usr/bin/env bash
# Several ranks on one GPU (issue "Several GPUs"): the MLPs of
# bench/mlp_synthetic.json (784-512-512-10, batch 512) and
# bench/mlp_wide_synthetic.json (784-4096-4096-10, batch 2048), data
# parallel on 2 agents sharing the GPU (--nodes 2 --devices cuda:1), their
# gradients through the node's boxing tasks (the default) and as device
# collectives (train.nccl: in the GPU's memory, mapped by CUDA IPC, since
# NCCL refuses two ranks on one GPU), against one agent on the same GPU with
# the same global batch. Alternating runs; samples/s median (min-max) and the ratio to one
# agent (1.0x is the ceiling: two ranks share one GPU's compute).
#   bench/gpu_shared_bench.sh [runs=3] [rill command=build/rill] [steps=120]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
rill=${2:-build/rill}
steps=${3:-120}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
field() { $python -c "import json,sys;print(json.load(open(sys.argv[1])).get(sys.argv[2], 0))" "$@"; }
for shape in "mlp_synthetic 512" "mlp_wide_synthetic 2048"; do
  read -r job batch <<< "$shape"
  declare -A rates=()
  for ((r = 0; r < runs; r++)); do
    for mode in one host nccl; do
      case $mode in
        one) args="--devices cuda:1" ;;
        host) args="--nodes 2 --devices cuda:1" ;;
        nccl) args="--nodes 2 --devices cuda:1 --set train.nccl=true" ;;
      esac
      # shellcheck disable=SC2086
      $rill run "bench/$job.json" $args --steps "$steps" --set "train.batch_size=$batch" \
        --result "$tmp/r.json" > "$tmp/log.txt" 2>&1 || { tail -5 "$tmp/log.txt"; exit 1; }
      rates[$mode]+="$(field "$tmp/r.json" steady_samples_per_sec) "
    done
  done
  echo "== $job (global batch $batch)"
  $python - "${rates[one]}" "${rates[host]}" "${rates[nccl]}" <<'PY'
import statistics, sys
names = ["1 agent", "2 agents, boxing tasks", "2 agents, train.nccl (shared GPU memory)"]
base = statistics.median(float(v) for v in sys.argv[1].split())
for name, values in zip(names, sys.argv[1:]):
    xs = [float(v) for v in values.split()]
    m = statistics.median(xs)
    print(f"  {name:30s} median {m:10.0f} samples/s ({min(xs):.0f}-{max(xs):.0f})  {m / base:.2f}x one agent")
PY
  unset rates
done
