// sum_squares, add_n and clip_factor on CUDA: the CPU kernels' formulas;
// sum_squares sums in double, over many blocks and then their partial sums
// in a fixed order (the same bits every run).
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

// Sums `n` doubles of `x`'s squares (or of `partials` when x is null) over
// the block's threads, a shared-memory tree: thread 0 gets the total.
__device__ double block_sum(double sum) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  return partial[0];
}

// Pass 1: block b sums the squares of its grid-stride share into partials[b].
__global__ void sum_squares_blocks(const float* x, double* partials, int64_t n) {
  double sum = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    sum += static_cast<double>(x[i]) * x[i];
  const double total = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2: one block sums the blocks' partials, in the same order every time.
__global__ void sum_partials(const double* partials, int blocks, float* out) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) sum += partials[i];
  const double total = block_sum(sum);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total);
}

}  // namespace

// Up to `max_blocks` blocks of 8 elements a thread at least: a gradient of
// 38M elements (GPT-2's token embedding) spreads over every SM instead of
// one (a single block reads about 1/100 of an H100's bandwidth).
cudaError_t sum_squares(const float* x, float* out, int64_t n, double* partials, int max_blocks,
                        cudaStream_t stream) {
  const int64_t per_block = static_cast<int64_t>(kThreads) * 8;
  const int blocks = static_cast<int>(std::clamp<int64_t>((n + per_block - 1) / per_block, 1, max_blocks));
  sum_squares_blocks<<<blocks, kThreads, 0, stream>>>(x, partials, n);
  sum_partials<<<1, kThreads, 0, stream>>>(partials, blocks, out);
  return cudaGetLastError();
}

cudaError_t clip_factor(const float* total, float* factor, float* norm, double max_norm, cudaStream_t stream) {
  return for_each(1, stream, [=] __device__(int64_t) {
    const double n = sqrt(static_cast<double>(total[0]));
    factor[0] = static_cast<float>(fmin(1.0, max_norm / (n + 1e-6)));
    norm[0] = static_cast<float>(n);
  });
}

}  // namespace rill::cuda_launch
