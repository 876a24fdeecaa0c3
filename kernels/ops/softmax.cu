// softmax, softmax_grad, mse_loss and mse_loss_grad on CUDA: the CPU kernels'
// formulas. Softmax runs one block per row (block_rows.cuh); mse sums in
// double with one block-wide reduction.
#include "kernels/ops/block_rows.cuh"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"
#include "kernels/ops/softmax_math.h"

namespace rill::cuda_launch {
namespace {

// One block: each thread sums a stride of the squared differences in double,
// then a shared-memory tree adds the partial sums.
__global__ void mse_kernel(const float* p, const float* t, float* out, int64_t n, float factor) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = static_cast<double>(p[i]) - t[i];
    sum += d * d;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(partial[0] * factor);
}

// y = softmax(scale x) over the row's first `valid` columns (causal: row r
// of a [T, T] matrix sees r % T + 1), zeros after, as softmax_math's row.
__global__ void softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols, bool causal, float scale) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const int64_t valid = causal ? r % cols + 1 : cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_reduce(m, true, shared);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) s += expf(scale * (xr[c] - m));
    const float inv = 1.0f / block_reduce(s, false, shared);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = c < valid ? expf(scale * (xr[c] - m)) * inv : 0.0f;
  }
}

__global__ void softmax_grad_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                                    float scale) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dot += yr[c] * dyr[c];
    dot = block_reduce(dot, false, shared);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dx[r * cols + c] = scale * yr[c] * (dyr[c] - dot);
  }
}

}  // namespace

cudaError_t softmax(const float* x, float* y, int64_t rows, int64_t cols, bool causal, float scale,
                    cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  softmax_kernel<<<row_grid(rows), kRowThreads, 0, stream>>>(x, y, rows, cols, causal, scale);
  return cudaGetLastError();
}

cudaError_t softmax_grad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale,
                         cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  softmax_grad_kernel<<<row_grid(rows), kRowThreads, 0, stream>>>(y, dy, dx, rows, cols, scale);
  return cudaGetLastError();
}

cudaError_t mse(const float* p, const float* t, float* out, int64_t n, float factor, cudaStream_t stream) {
  mse_kernel<<<1, kThreads, 0, stream>>>(p, t, out, n, factor);
  return cudaGetLastError();
}

cudaError_t mse_grad(const float* p, const float* t, const float* dloss, float* dp, int64_t n, float factor,
                     cudaStream_t stream) {
  // factor * dloss[0] is read on the device: dloss lives there.
  return for_each(n, stream, [=] __device__(int64_t i) { dp[i] = 2.0f * dloss[0] * factor * (p[i] - t[i]); });
}

}  // namespace rill::cuda_launch
