// sparse_softmax_cross_entropy and its gradient on CUDA: one block per row
// (block_rows.cuh, a vocabulary's 50k columns read coalesced), the CPU
// kernels' formulas; accuracy one thread per row. A label outside [0, cols)
// raises the bad-label flag (the first row wins) and its row yields NaN.
#include "kernels/ops/block_rows.cuh"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"
#include "kernels/ops/softmax_math.h"

namespace rill::cuda_launch {
namespace {

__device__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// The row's max and sum of exp(x - max), as softmax_math::row_stats.
__device__ void row_stats(const float* row, int64_t cols, float* shared, float* max_out, float* sum_out) {
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_reduce(m, true, shared);
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
  *max_out = m;
  *sum_out = block_reduce(s, false, shared);
}

__global__ void cross_entropy_kernel(const float* logits, const int32_t* labels, float* loss, int64_t rows,
                                     int64_t cols, int64_t* bad_label) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t label = labels[r];
    if (label < 0 || label >= cols) {  // the whole block sees it: no reduction is left waiting
      if (threadIdx.x == 0) {
        index_ok(label, cols, r, bad_label);
        loss[r] = quiet_nan();
      }
      continue;
    }
    const float* row = logits + r * cols;
    float m, s;
    row_stats(row, cols, shared, &m, &s);
    if (threadIdx.x == 0) loss[r] = m + logf(s) - row[label];
  }
}

__global__ void cross_entropy_grad_kernel(const float* logits, const int32_t* labels, const float* dloss,
                                          float* dlogits, int64_t rows, int64_t cols, int64_t* bad_label) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t label = labels[r];
    float* drow = dlogits + r * cols;
    if (label < 0 || label >= cols) {
      if (threadIdx.x == 0) index_ok(label, cols, r, bad_label);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) drow[c] = quiet_nan();
      continue;
    }
    const float* row = logits + r * cols;
    float m, s;
    row_stats(row, cols, shared, &m, &s);
    const float scale = dloss[r] / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      drow[c] = expf(row[c] - m) * scale - (c == label ? dloss[r] : 0.0f);
  }
}

}  // namespace

cudaError_t softmax_cross_entropy(const float* logits, const int32_t* labels, float* loss, int64_t rows, int64_t cols,
                                  int64_t* bad_label, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  cross_entropy_kernel<<<row_grid(rows), kRowThreads, 0, stream>>>(logits, labels, loss, rows, cols, bad_label);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy_grad(const float* logits, const int32_t* labels, const float* dloss, float* dlogits,
                                       int64_t rows, int64_t cols, int64_t* bad_label, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  cross_entropy_grad_kernel<<<row_grid(rows), kRowThreads, 0, stream>>>(logits, labels, dloss, dlogits, rows, cols,
                                                                        bad_label);
  return cudaGetLastError();
}

// Correct rows are counted with one float atomic each (exact below 2^24
// rows), then one thread divides by the logical row count.
cudaError_t accuracy(const float* logits, const int32_t* labels, float* out, int64_t rows, int64_t cols,
                     int64_t logical_rows, int64_t* bad_label, cudaStream_t stream) {
  cudaError_t e = for_each(1, stream, [=] __device__(int64_t) { out[0] = 0.0f; });
  if (e != cudaSuccess) return e;
  e = for_each(rows, stream, [=] __device__(int64_t r) {
    if (!index_ok(labels[r], cols, r, bad_label)) return;
    const float* row = logits + r * cols;
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = c;
    if (best == labels[r]) atomicAdd(out, 1.0f);
  });
  if (e != cudaSuccess) return e;
  return for_each(1, stream, [=] __device__(int64_t) {
    out[0] = logical_rows > 0 ? out[0] / static_cast<float>(logical_rows) : 0.0f;
  });
}

}  // namespace rill::cuda_launch
