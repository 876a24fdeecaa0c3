// embedding, its gradient and embedding_mask on CUDA: one thread per output element, the CPU
// kernels' formulas. An id outside [0, rows) raises the bad-id flag (the
// context's bad_label: 1 + the first such position) and writes NaN (the
// gather) or nothing (the gradient); the context's synchronize reports it.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

cudaError_t embedding(const int32_t* ids, const float* table, float* out, int64_t n, int64_t rows, int64_t dim,
                      int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream) {
  return for_each(n * dim, stream, [=] __device__(int64_t k) {
    const int64_t i = k / dim, d = k % dim;
    if (!index_ok(ids[i], total_rows, i, bad_id)) {
      out[k] = __int_as_float(0x7fc00000);
      return;
    }
    const int64_t row = ids[i] - row_offset;
    out[k] = row >= 0 && row < rows ? table[row * dim + d] : 0.0f;
  });
}

cudaError_t embedding_grad(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t rows, int64_t dim,
                           int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(dtable, 0, static_cast<size_t>(rows * dim) * sizeof(float), stream);
  if (e != cudaSuccess) return e;
  return for_each(n * dim, stream, [=] __device__(int64_t k) {
    const int64_t i = k / dim, d = k % dim;
    if (!index_ok(ids[i], total_rows, i, bad_id)) return;
    const int64_t row = ids[i] - row_offset;
    if (row >= 0 && row < rows) atomicAdd(&dtable[row * dim + d], dout[k]);
  });
}

cudaError_t embedding_mask(const int32_t* ids, const float* x, float* out, int64_t n, int64_t rows, int64_t dim,
                           int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream) {
  return for_each(n * dim, stream, [=] __device__(int64_t k) {
    const int64_t i = k / dim;
    if (!index_ok(ids[i], total_rows, i, bad_id)) {
      out[k] = __int_as_float(0x7fc00000);
      return;
    }
    const int64_t row = ids[i] - row_offset;
    out[k] = row >= 0 && row < rows ? x[k] : 0.0f;
  });
}

}  // namespace rill::cuda_launch
