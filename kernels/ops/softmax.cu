// softmax, softmax_grad, mse_loss and mse_loss_grad on CUDA: the CPU kernels'
// formulas. Softmax runs one thread per row; mse sums in double with one
// block-wide reduction.
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

}  // namespace

cudaError_t softmax(const float* x, float* y, int64_t rows, int64_t cols, bool causal, float scale,
                    cudaStream_t stream) {
  return for_each(rows, stream, [=] __device__(int64_t r) {
    softmax_math::softmax_row(x + r * cols, y + r * cols, cols, causal ? r % cols + 1 : cols, scale);
  });
}

cudaError_t softmax_grad(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols, float scale,
                         cudaStream_t stream) {
  return for_each(rows, stream, [=] __device__(int64_t r) {
    softmax_math::softmax_grad_row(y + r * cols, dy + r * cols, dx + r * cols, cols, scale);
  });
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
