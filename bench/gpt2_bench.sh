#!/usr/bin/env bash
# The GPT-2 124M shape (bench/gpt2_124m.json: 12 layers, 12 heads, 768 wide,
# context 1024, vocabulary 50304, batch 16) in float32, Rill against PyTorch
# eager (bench/torch_gpt.py, the same architecture, TF32 off; and with
# PyTorch's fused attention, ATTENTION=sdpa, as nanoGPT writes it) on one GPU, on
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
# 16 x 1024 x 8 + 1 random GPT-2 token ids in llm.c's format.
$python - "$tmp/tokens.bin" <<'PY'
import random, struct, sys
n = 16 * 1024 * 8 + 1
random.seed(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[random.randrange(50257) for _ in range(n)]))
PY
field() { $python -c "import json,sys;print(json.load(open(sys.argv[1])).get(sys.argv[2], 0))" "$@"; }
rill_rates="" torch_rates="" sdpa_rates=""
for ((r = 0; r < runs; r++)); do
  $rill run bench/gpt2_124m.json --devices cuda:1 --steps "$steps" --set "datasets.train.path=$tmp/tokens.bin" \
    --result "$tmp/r.json" > "$tmp/rill.txt" 2>&1 || { tail -20 "$tmp/rill.txt"; exit 1; }
  rill_rates+="$($python -c "import json,sys;print(json.load(open(sys.argv[1]))['steady_samples_per_sec']*1024)" "$tmp/r.json") "
  rill_peak=$(field "$tmp/r.json" peak_device_bytes)
  $python bench/torch_gpt.py bench/gpt2_124m.json cuda 5 "$steps" > "$tmp/t.json"
  torch_rates+="$(field "$tmp/t.json" tokens_per_sec) "
  torch_peak=$(field "$tmp/t.json" peak_device_bytes)
  params=$(field "$tmp/t.json" params)
  ATTENTION=sdpa $python bench/torch_gpt.py bench/gpt2_124m.json cuda 5 "$steps" > "$tmp/s.json"
  sdpa_rates+="$(field "$tmp/s.json" tokens_per_sec) "
  sdpa_peak=$(field "$tmp/s.json" peak_device_bytes)
done
tail -3 "$tmp/rill.txt"
$python - "$rill_rates" "$torch_rates" "$sdpa_rates" "$params" "$rill_peak" "$torch_peak" "$sdpa_peak" <<'PY'
import statistics, sys
rill, torch, sdpa = ([float(x) for x in a.split()] for a in sys.argv[1:4])
params, rill_peak, torch_peak, sdpa_peak = (int(a) for a in sys.argv[4:8])
flops = 6 * params + 12 * 12 * 1024 * 768  # per token: the matmuls (6 N) and attention's (12 L T C, PaLM's count)
for name, r in (("rill", rill), ("torch eager", torch), ("torch sdpa", sdpa)):
    m = statistics.median(r)
    print(f"  {name:12s} median {m:9.0f} tokens/s ({min(r):.0f}-{max(r):.0f})  MFU {100 * m * flops / 989e12:.1f}%")
print(f"ratio rill/eager (medians): {statistics.median(rill) / statistics.median(torch):.2f}x, "
      f"rill/eager with fused attention: {statistics.median(rill) / statistics.median(sdpa):.2f}x")
print(f"peak device memory: rill {rill_peak / 2**30:.1f} GiB, torch eager {torch_peak / 2**30:.1f} GiB, "
      f"with fused attention {sdpa_peak / 2**30:.1f} GiB")
PY
