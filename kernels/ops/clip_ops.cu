// sum_squares, add_n and clip_factor on CUDA: the CPU kernels' formulas;
// sum_squares sums in double in one block (a shared-memory tree).
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

__global__ void sum_squares_kernel(const float* x, float* out, int64_t n) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(x[i]) * x[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(partial[0]);
}

}  // namespace

cudaError_t sum_squares(const float* x, float* out, int64_t n, cudaStream_t stream) {
  sum_squares_kernel<<<1, kThreads, 0, stream>>>(x, out, n);
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
