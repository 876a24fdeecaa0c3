#!/usr/bin/env bash
# GPT-2 124M (bench/gpt2_124m.json: 12 layers, 12 heads, 768 wide, context
# 1024, vocabulary 50304, batch 16) in mixed precision on one GPU: Rill with
# train.precision bf16 (its fused attention op, which stays f32) beside
# PyTorch under bf16 autocast with SDPA and fused AdamW, eager and
# torch.compile'd (bench/torch_gpt.py), and Rill in f32 for the gain.
# Random tokens (an llm.c token file made here). Alternating runs; tokens/s
# median (min-max), the ratios, MFU as the issue counts it (6 N + 6 L C T
# flops per token at 989 TFLOP/s, an H100/H200's dense bf16 peak) and peak
# device memory. A torch.compile that cannot run here (no Triton) is
# reported and skipped; COMPILE=0 leaves torch.compile out.
#   bench/gpt2_amp_bench.sh [runs=2] [rill command=build/rill] [steps=30]
set -euo pipefail
cd "$(dirname "$0")/.."
compile=${COMPILE:-1}
runs=${1:-2}
rill=${2:-build/rill}
steps=${3:-30}
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Random GPT-2 tokens, and the job with its attention fused (bench/gpt2_jobs.sh).
. bench/gpt2_jobs.sh
gpt2_tokens "$tmp/tokens.bin"
gpt2_fused_job bench/gpt2_124m.json "$tmp/fused.json"
field() { $python -c "import json,sys;print(json.load(open(sys.argv[1])).get(sys.argv[2], 0))" "$@"; }
rate() { $python -c "import json,sys;print(json.load(open(sys.argv[1]))['steady_samples_per_sec']*1024)" "$1"; }
rill_job() {  # precision, result file
  $rill run "$tmp/fused.json" --devices cuda:1 --steps "$steps" --set "datasets.train.path=$tmp/tokens.bin" \
    --set "train.precision=$1" --result "$2" > "$tmp/rill-$1.txt" 2>&1 || { tail -20 "$tmp/rill-$1.txt"; exit 1; }
}
bf16_rates="" f32_rates="" eager_rates="" compiled_rates=""
compiled_peak=0
for ((r = 0; r < runs; r++)); do
  rill_job bf16 "$tmp/b.json"
  bf16_rates+="$(rate "$tmp/b.json") "
  bf16_peak=$(field "$tmp/b.json" peak_device_bytes)
  rill_job f32 "$tmp/f.json"
  f32_rates+="$(rate "$tmp/f.json") "
  f32_peak=$(field "$tmp/f.json" peak_device_bytes)
  PRECISION=bf16 ATTENTION=sdpa COMPILE=0 $python bench/torch_gpt.py bench/gpt2_124m.json cuda 5 "$steps" > "$tmp/e.json"
  eager_rates+="$(field "$tmp/e.json" tokens_per_sec) "
  eager_peak=$(field "$tmp/e.json" peak_device_bytes)
  params=$(field "$tmp/e.json" params)
  if [ "$compile" != 1 ]; then
    :
  elif PRECISION=bf16 ATTENTION=sdpa COMPILE=1 $python bench/torch_gpt.py bench/gpt2_124m.json cuda 10 "$steps" \
      > "$tmp/c.json" 2> "$tmp/c.err"; then
    compiled_rates+="$(field "$tmp/c.json" tokens_per_sec) "
    compiled_peak=$(field "$tmp/c.json" peak_device_bytes)
  else
    echo "torch.compile did not run here: $(tail -1 "$tmp/c.err")"
  fi
done
tail -2 "$tmp/rill-bf16.txt"
$python - "$bf16_rates" "$f32_rates" "$eager_rates" "$compiled_rates" "$params" "$bf16_peak" "$f32_peak" \
  "$eager_peak" "$compiled_peak" <<'PY'
import statistics, sys
rates = [[float(x) for x in a.split()] for a in sys.argv[1:5]]
params, *peaks = (int(a) for a in sys.argv[5:10])
flops = 6 * params + 6 * 12 * 768 * 1024  # per token: 6 N + 6 L C T
med = statistics.median
names = ("rill bf16", "rill f32", "torch bf16 eager", "torch bf16 compile")
for name, r, peak in zip(names, rates, peaks):
    if not r:
        continue
    m = med(r)
    print(f"  {name:18s} median {m:9.0f} tokens/s ({min(r):.0f}-{max(r):.0f})  MFU {100 * m * flops / 989e12:.1f}%"
          f"  peak {peak / 2**30:.1f} GiB")
bf16, f32, eager, compiled = rates
print(f"ratios (medians): rill bf16 / torch bf16 eager {med(bf16) / med(eager):.2f}x, rill bf16 / rill f32 "
      f"{med(bf16) / med(f32):.2f}x" + (f", rill bf16 / torch compile {med(bf16) / med(compiled):.2f}x" if compiled else ""))
PY
