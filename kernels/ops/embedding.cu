// embedding, its gradient and embedding_mask on CUDA: the CPU kernels'
// formulas. The lookup and the mask: one thread per output element. The
// gradient: blocks own the table's rows by turns (row % blocks); each walks
// the ids in order and adds its rows' gradient rows, so every element is
// the sum in position order, as on the CPU: no atomics, the same bits every
// run and the CPU's. An id outside [0, rows) raises the bad-id flag (the
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

namespace {

constexpr int kIdChunk = 2048;  // ids staged in shared memory at a time

__global__ void embedding_grad_kernel(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t rows,
                                      int64_t dim, int64_t total_rows, int64_t row_offset, int64_t* bad_id) {
  __shared__ int32_t chunk[kIdChunk];
  const int64_t mine = blockIdx.x, owners = gridDim.x;
  for (int64_t base = 0; base < n; base += kIdChunk) {
    const int len = static_cast<int>(min(static_cast<int64_t>(kIdChunk), n - base));
    __syncthreads();  // the last chunk is read
    for (int k = threadIdx.x; k < len; k += blockDim.x) chunk[k] = ids[base + k];
    __syncthreads();
    for (int k = 0; k < len; ++k) {
      const int32_t id = chunk[k];
      if (mine == 0 && threadIdx.x == 0) index_ok(id, total_rows, base + k, bad_id);
      const int64_t row = static_cast<int64_t>(id) - row_offset;
      if (id < 0 || id >= total_rows || row < 0 || row >= rows || row % owners != mine) continue;
      const float* from = dout + (base + k) * dim;
      float* to = dtable + row * dim;
      for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) to[d] += from[d];
    }
  }
}

}  // namespace

cudaError_t embedding_grad(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t rows, int64_t dim,
                           int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(dtable, 0, static_cast<size_t>(rows * dim) * sizeof(float), stream);
  if (e != cudaSuccess || n <= 0 || rows <= 0) return e;
  // Each block reads every id (a broadcast from cache); 1,024 blocks fill a
  // large GPU in one wave.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, 1024));
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>((dim + 31) / 32 * 32, 32, 256));
  embedding_grad_kernel<<<blocks, threads, 0, stream>>>(ids, dout, dtable, n, rows, dim, total_rows, row_offset, bad_id);
  return cudaGetLastError();
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
