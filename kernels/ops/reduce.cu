// reduce_sum, reduce_mean and broadcast_like on CUDA over axis runs (see
// kernels/ops/axis_runs.h). A reduction runs one thread per output element,
// summing its reduced elements in double, as the CPU does along a reduced
// innermost run: simple and accurate; a tree reduction for long runs with few
// outputs is left for when a profile asks for it.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

// Offset in the unreduced tensor of the index-th combination of the runs
// that are (reduced) or are not (!reduced) reduced, the last varying fastest.
__device__ int64_t offset_of(const ReduceRuns& runs, int64_t index, bool reduced) {
  int64_t offset = 0;
  for (int r = runs.count - 1; r >= 0; --r) {
    if (runs.reduced[r] != reduced) continue;
    offset += (index % runs.size[r]) * runs.big_stride[r];
    index /= runs.size[r];
  }
  return offset;
}

}  // namespace

cudaError_t reduce(const ReduceRuns& runs, const float* x, float* y, int64_t n_out, int64_t reduced_count,
                   float scale, bool empty, cudaStream_t stream) {
  return for_each(n_out, stream, [=] __device__(int64_t s) {
    if (empty) {
      y[s] = 0.0f;
      return;
    }
    const int64_t base = offset_of(runs, s, false);
    double sum = 0.0;
    for (int64_t q = 0; q < reduced_count; ++q) sum += x[base + offset_of(runs, q, true)];
    y[s] = static_cast<float>(sum) * scale;
  });
}

cudaError_t broadcast_like(const ReduceRuns& runs, const float* dy, float* dx, int64_t n, float scale,
                           cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    int64_t small = 0, rest = i;
    for (int r = runs.count - 1; r >= 0; --r) {
      small += (rest % runs.size[r]) * runs.small_stride[r];
      rest /= runs.size[r];
    }
    dx[i] = dy[small] * scale;
  });
}

}  // namespace rill::cuda_launch
