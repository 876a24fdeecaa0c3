#!/usr/bin/env bash
# The attention kernels alone (bench/attention_bench.cu): builds
# build/attention_bench with nvcc where nvcc is (`build`), runs it where the
# GPU is (`run`, the default: builds first when nvcc is found here).
#   bench/attention_bench.sh [build|run]
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ "${1:-run}" = build ] || { [ -x "$nvcc" ] && [ "${1:-run}" = run ]; }; then
  mkdir -p build
  "$nvcc" -O3 -std=c++20 -I. -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_80,code=compute_80 \
    -o build/attention_bench bench/attention_bench.cu kernels/ops/attention.cu
fi
[ "${1:-run}" = build ] || build/attention_bench
