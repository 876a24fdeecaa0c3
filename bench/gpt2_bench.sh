#!/usr/bin/env bash
# The GPT-2 124M shape (bench/gpt2_124m.json: 12 layers, 12 heads, 768 wide,
# context 1024, vocabulary 50304, batch 16) in float32, Rill against PyTorch
# eager (bench/torch_gpt.py, the same architecture, TF32 off; and with
# PyTorch's fused attention, ATTENTION=sdpa, as nanoGPT writes it) on one
# GPU, Rill both with attention composed (matmul, causal softmax, matmul)
# and as its fused attention op, on
# random tokens (an llm.c token file made here). Alternating runs; tokens/s
# median (min-max), the ratio, MFU (6 N + 12 L T C flops per token of
# N params at 989 TFLOPS, an H100's dense bf16 peak; f32 runs far below it
# by design) and peak device memory.
#   bench/gpt2_bench.sh [runs=2] [rill command=build/rill] [steps=30]
set -euo pipefail
cd "$(dirname "$0")/.."
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
rill_rates="" fused_rates="" torch_rates="" sdpa_rates=""
for ((r = 0; r < runs; r++)); do
  $rill run bench/gpt2_124m.json --devices cuda:1 --steps "$steps" --set "datasets.train.path=$tmp/tokens.bin" \
    --result "$tmp/r.json" > "$tmp/rill.txt" 2>&1 || { tail -20 "$tmp/rill.txt"; exit 1; }
  rill_rates+="$(rate "$tmp/r.json") "
  rill_peak=$(field "$tmp/r.json" peak_device_bytes)
  $rill run "$tmp/fused.json" --devices cuda:1 --steps "$steps" --set "datasets.train.path=$tmp/tokens.bin" \
    --result "$tmp/f.json" > "$tmp/fused.txt" 2>&1 || { tail -20 "$tmp/fused.txt"; exit 1; }
  fused_rates+="$(rate "$tmp/f.json") "
  fused_peak=$(field "$tmp/f.json" peak_device_bytes)
  $python bench/torch_gpt.py bench/gpt2_124m.json cuda 5 "$steps" > "$tmp/t.json"
  torch_rates+="$(field "$tmp/t.json" tokens_per_sec) "
  torch_peak=$(field "$tmp/t.json" peak_device_bytes)
  params=$(field "$tmp/t.json" params)
  ATTENTION=sdpa $python bench/torch_gpt.py bench/gpt2_124m.json cuda 5 "$steps" > "$tmp/s.json"
  sdpa_rates+="$(field "$tmp/s.json" tokens_per_sec) "
  sdpa_peak=$(field "$tmp/s.json" peak_device_bytes)
done
tail -2 "$tmp/rill.txt"
tail -2 "$tmp/fused.txt"
$python - "$rill_rates" "$fused_rates" "$torch_rates" "$sdpa_rates" "$params" "$rill_peak" "$fused_peak" \
  "$torch_peak" "$sdpa_peak" <<'PY'
import statistics, sys
rill, fused, torch, sdpa = ([float(x) for x in a.split()] for a in sys.argv[1:5])
params, rill_peak, fused_peak, torch_peak, sdpa_peak = (int(a) for a in sys.argv[5:10])
flops = 6 * params + 12 * 12 * 1024 * 768  # per token: the matmuls (6 N) and attention's (12 L T C, PaLM's count)
for name, r in (("rill", rill), ("rill fused", fused), ("torch eager", torch), ("torch sdpa", sdpa)):
    m = statistics.median(r)
    print(f"  {name:12s} median {m:9.0f} tokens/s ({min(r):.0f}-{max(r):.0f})  MFU {100 * m * flops / 989e12:.1f}%")
med = statistics.median
print(f"ratios (medians): rill/eager {med(rill) / med(torch):.2f}x, rill/sdpa {med(rill) / med(sdpa):.2f}x; "
      f"with fused attention on both sides: rill fused/sdpa {med(fused) / med(sdpa):.2f}x")
print(f"peak device memory: rill {rill_peak / 2**30:.1f} GiB, rill fused {fused_peak / 2**30:.1f} GiB, "
      f"torch eager {torch_peak / 2**30:.1f} GiB, torch sdpa {sdpa_peak / 2**30:.1f} GiB")
PY
