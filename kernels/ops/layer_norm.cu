// layer_norm and layer_norm_grad on CUDA: one warp per row (lanes stride over
// the columns and add up with shuffles), the same two-pass f32 statistics and
// formulas as the CPU kernels (layer_norm_math.h); dgamma and dbeta by a
// block per 32 columns, 32 lanes of rows each summing a stride of the rows,
// then the lanes added in order (deterministic, and coalesced: a warp reads
// 32 adjacent columns of a row).
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                  float* rstd, int64_t rows, int64_t cols, float eps) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  float sum = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) sum += xr[c];
  const float m = warp_sum(sum) / static_cast<float>(cols);
  float var = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) var += (xr[c] - m) * (xr[c] - m);
  const float s = rsqrtf(warp_sum(var) / static_cast<float>(cols) + eps);
  float* yr = y + r * cols;
  for (int64_t c = lane; c < cols; c += kWarp) yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

__global__ void layer_norm_dx_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                     const float* gamma, float* dx, int64_t rows, int64_t cols) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  const float* dyr = dy + r * cols;
  const float m = mean[r], s = rstd[r];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float g = dyr[c] * gamma[c];
    sum_g += g;
    sum_gx += g * (xr[c] - m) * s;
  }
  const float inv = 1.0f / static_cast<float>(cols);
  const float mg = warp_sum(sum_g) * inv, mgx = warp_sum(sum_gx) * inv;
  float* dxr = dx + r * cols;
  for (int64_t c = lane; c < cols; c += kWarp) dxr[c] = s * (dyr[c] * gamma[c] - mg - (xr[c] - m) * s * mgx);
}

__global__ void layer_norm_params_grad_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                              float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  __shared__ float sum_g[kWarp][kWarp + 1], sum_b[kWarp][kWarp + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  float g = 0.0f, b = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kWarp) {
      const float d = dy[r * cols + c];
      g += d * (x[r * cols + c] - mean[r]) * rstd[r];
      b += d;
    }
  sum_g[threadIdx.y][threadIdx.x] = g;
  sum_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int lane = 1; lane < kWarp; ++lane) {
    g += sum_g[lane][threadIdx.x];
    b += sum_b[lane][threadIdx.x];
  }
  dgamma[c] = g;
  dbeta[c] = b;
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

cudaError_t layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  layer_norm_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t layer_norm_grad(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma,
                            float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0)
    layer_norm_dx_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dy, x, mean, rstd, gamma, dx, rows, cols);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (cols <= 0) return cudaSuccess;
  const auto tiles = static_cast<unsigned>((cols + kWarp - 1) / kWarp);
  layer_norm_params_grad_kernel<<<tiles, dim3(kWarp, kWarp), 0, stream>>>(dy, x, mean, rstd, dgamma, dbeta, rows, cols);
  return cudaGetLastError();
}

}  // namespace rill::cuda_launch
