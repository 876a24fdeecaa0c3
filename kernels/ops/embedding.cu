// embedding, its gradient and embedding_mask on CUDA: the CPU kernels'
// formulas. The lookup and the mask: one thread per output element. The
// gradient: blocks own the table's rows by turns (row % blocks); each goes
// through the ids in order and adds its rows' gradient rows, so every
// element is the sum in position order, as on the CPU: no atomics, the same
// bits every run and the CPU's. An id outside [0, rows) raises the bad-id flag (the
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

constexpr int kGradThreads = 256;  // a block: 8 warps

// Block b owns the rows r with r % blocks == b. Per chunk of 256 ids, its
// threads test one id each and list the matches in position order (a warp
// ballot, then the warps' counts); then all of them add the listed rows,
// each thread its columns, in that order.
__global__ void embedding_grad_kernel(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t rows,
                                      int64_t dim, int64_t total_rows, int64_t row_offset, int64_t* bad_id) {
  __shared__ int matched[kGradThreads];
  __shared__ int warp_counts[kGradThreads / 32];
  const int mine = static_cast<int>(blockIdx.x), owners = static_cast<int>(gridDim.x);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  for (int64_t base = 0; base < n; base += kGradThreads) {
    const int64_t i = base + threadIdx.x;
    bool match = false;
    if (i < n) {
      const int32_t id = ids[i];
      const bool ok = mine == 0 ? index_ok(id, total_rows, i, bad_id) : id >= 0 && id < total_rows;
      const int64_t row = static_cast<int64_t>(id) - row_offset;  // < 2^31: ids are i32
      match = ok && row >= 0 && row < rows && static_cast<int>(row) % owners == mine;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_counts[warp] = __popc(mask);
    __syncthreads();
    int before = 0, count = 0;
    for (int w = 0; w < kGradThreads / 32; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      count += warp_counts[w];
    }
    if (match) matched[before + __popc(mask & ((1u << lane) - 1u))] = static_cast<int>(threadIdx.x);
    __syncthreads();
    for (int k = 0; k < count; ++k) {
      const int64_t at = base + matched[k];
      const float* from = dout + at * dim;
      float* to = dtable + (static_cast<int64_t>(ids[at]) - row_offset) * dim;
      for (int64_t d = threadIdx.x; d < dim; d += kGradThreads) to[d] += from[d];
    }
    __syncthreads();  // the list and the counts are refilled
  }
}

}  // namespace

cudaError_t embedding_grad(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t rows, int64_t dim,
                           int64_t total_rows, int64_t row_offset, int64_t* bad_id, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(dtable, 0, static_cast<size_t>(rows * dim) * sizeof(float), stream);
  if (e != cudaSuccess || n <= 0 || rows <= 0) return e;
  // Each block tests every id, 256 at a time; 1,024 blocks fill a large
  // GPU in one wave.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, 1024));
  embedding_grad_kernel<<<blocks, kGradThreads, 0, stream>>>(ids, dout, dtable, n, rows, dim, total_rows, row_offset,
                                                              bad_id);
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
