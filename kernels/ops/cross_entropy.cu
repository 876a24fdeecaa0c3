// sparse_softmax_cross_entropy, its gradient and accuracy on CUDA: one thread
// per row, the CPU kernels' formulas. A label outside [0, cols) raises the
// bad-label flag (the first row wins) and its row yields NaN.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"
#include "kernels/ops/softmax_math.h"

namespace rill::cuda_launch {
namespace {

__device__ float quiet_nan() { return __int_as_float(0x7fc00000); }

}  // namespace

cudaError_t softmax_cross_entropy(const float* logits, const int32_t* labels, float* loss, int64_t rows, int64_t cols,
                                  int64_t* bad_label, cudaStream_t stream) {
  return for_each(rows, stream, [=] __device__(int64_t r) {
    const float* row = logits + r * cols;
    if (!index_ok(labels[r], cols, r, bad_label)) {
      loss[r] = quiet_nan();
      return;
    }
    loss[r] = softmax_math::cross_entropy_row(row, cols, labels[r]);
  });
}

cudaError_t softmax_cross_entropy_grad(const float* logits, const int32_t* labels, const float* dloss, float* dlogits,
                                       int64_t rows, int64_t cols, int64_t* bad_label, cudaStream_t stream) {
  return for_each(rows, stream, [=] __device__(int64_t r) {
    const float* row = logits + r * cols;
    float* drow = dlogits + r * cols;
    if (!index_ok(labels[r], cols, r, bad_label)) {
      for (int64_t c = 0; c < cols; ++c) drow[c] = quiet_nan();
      return;
    }
    softmax_math::cross_entropy_grad_row(row, cols, labels[r], dloss[r], drow);
  });
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
