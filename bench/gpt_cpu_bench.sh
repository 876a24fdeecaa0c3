#!/usr/bin/env bash
# The GPT sample (samples/gpt/gpt_moby.json: 4 layers, 4 heads, 128 wide,
# context 128, batch 16) on CPU threads: Rill on cpu:T against the same model
# in PyTorch (bench/torch_gpt.py, Debian's python3-torch over the same
# OpenBLAS) on T threads, alternating runs. Tokens/s over the steady steps,
# median (min-max), and the ratio per thread count. PyTorch runs as it is
# fastest here: its own ops on one thread, OpenBLAS's GEMMs on T (T threads
# of each oversubscribe the cores: 4.9k tokens/s at T = 2, against 13.6k).
# Each side prints which copy of its elementwise loops and which OpenBLAS
# kernels ran. On an AVX-512 machine, the AVX2 figures of both:
#   RILL_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell bench/gpt_cpu_bench.sh
#   bench/gpt_cpu_bench.sh [runs=3] [steps=60] [threads="1 2"]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/same_blas.sh
runs=${1:-3}
steps=${2:-60}
threads=${3:-1 2}
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Which loops and OpenBLAS kernels a result (Rill's or torch_gpt.py's) names.
cpu_kernels() {
  $python -c "import json,sys;k=json.load(open(sys.argv[1]))['cpu_kernels'];print(k['loops'], 'loops, OpenBLAS', k['blas'])" "$1"
}
for t in $threads; do
  rill_rates="" torch_rates=""
  for ((r = 0; r < runs; r++)); do
    OPENBLAS_NUM_THREADS=1 build/rill run samples/gpt/gpt_moby.json --devices "cpu:$t" --steps "$steps" \
      --result "$tmp/r.json" > /dev/null
    rill_rates+="$($python -c "import json,sys;print(json.load(open(sys.argv[1]))['steady_samples_per_sec']*128)" "$tmp/r.json") "
    rill_cpu=$(cpu_kernels "$tmp/r.json")
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=$t $python bench/torch_gpt.py samples/gpt/gpt_moby.json cpu 5 "$steps" 1 > "$tmp/t.json"
    torch_rates+="$($python -c "import json,sys;print(json.load(open(sys.argv[1]))['tokens_per_sec'])" "$tmp/t.json") "
    torch_cpu=$(cpu_kernels "$tmp/t.json")
  done
  $python - "$t" "$rill_rates" "$torch_rates" "$rill_cpu" "$torch_cpu" <<'PY'
import statistics, sys
t, rill, torch = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
print(f"== {t} thread(s)")
for name, r, cpu in (("rill", rill, sys.argv[4]), ("torch", torch, sys.argv[5])):
    print(f"  {name:6s} median {statistics.median(r):8.0f} tokens/s ({min(r):.0f}-{max(r):.0f}); {cpu}")
print(f"  ratio rill/torch (medians): {statistics.median(rill) / statistics.median(torch):.2f}x")
PY
done
