#!/usr/bin/env bash
# The GPU checks of mixed precision in one go, on a machine with a GPU: the
# CUDA kernel suite (loss scaling's kernels, gated updates, the multi-block
# sum of squares), the CUDA runtime suite (the GPT sample in bf16 and f16
# against the CPU, overflows, a scale below 1, an exact scale), the planned
# and measured memory of GPT-2 124M in bf16, bench/gpt2_amp_bench.sh, and,
# where nsys is, the bf16 step's kernels by time. Results go under OUT.
#   bench/gpu_amp_check.sh [OUT=/tmp/rill-amp-check] [RUN]
# RUN prefixes every program, as in bench/gpu_check.sh (a wrapper for a
# build made elsewhere). RUNS: the bench's alternating runs (1); COMPILE=0
# leaves torch.compile out.
set -u
cd "$(dirname "$0")/.."
out=${1:-/tmp/rill-amp-check}
run=${2:-}
. bench/gpu_suites.sh
gpu_suites
. bench/gpt2_jobs.sh
python=${PYTHON:-python3}
gpt2_tokens "$out/tokens.bin"
gpt2_fused_job bench/gpt2_124m.json "$out/fused.json"
$rill plan "$out/fused.json" --devices cuda:1 --set train.precision=bf16 --json > "$out/plan.json" 2>&1; step plan $?
$python -c "import json,sys; [print('planned', m['zone'], round(m['peak_bytes']/2**30, 2), 'GiB') for m in json.load(open(sys.argv[1]))['memory'] if m['zone'].startswith('cuda')]" "$out/plan.json"
timeout 420 env COMPILE="${COMPILE:-1}" bash bench/gpt2_amp_bench.sh "${RUNS:-1}" "$rill" 30 > "$out/bench.txt" 2>&1; step bench $?
cat "$out/bench.txt"
if command -v nsys > /dev/null || [ -x /usr/local/cuda/bin/nsys ]; then
  nsys=$(command -v nsys || echo /usr/local/cuda/bin/nsys)
  timeout 180 "$nsys" profile -o "$out/bf16" --force-overwrite true -t cuda $rill run "$out/fused.json" \
    --devices cuda:1 --steps 12 --set "datasets.train.path=$out/tokens.bin" --set train.precision=bf16 \
    > "$out/nsys.txt" 2>&1; step nsys $?
  "$nsys" stats -r cuda_gpu_kern_sum -f csv "$out/bf16.nsys-rep" > "$out/kernels.csv" 2>/dev/null
  $python - "$out/kernels.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
head, body = rows[0], rows[1:]
t, name = head.index("Total Time (ns)"), head.index("Name")
total = sum(float(r[t]) for r in body)
print(f"kernel time, 12 steps: {total / 1e6:.1f} ms; the largest:")
for r in sorted(body, key=lambda r: -float(r[t]))[:15]:
    print(f"  {float(r[t]) / 1e6:8.1f} ms {100 * float(r[t]) / total:5.1f}%  {r[name][:100]}")
PY
fi
