// Ring attention's join of a step into the steps before it on CUDA
// (attention_ring.cc): one thread a row, the CPU kernel's arithmetic
// (attention_merge_math.h; within rounding: CUDA's expf and logf are not
// glibc's). The step's part may be the output it is joined into.
#include "kernels/ops/attention_merge_math.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

cudaError_t attention_merge(const float* ya, const float* la, const float* yb, const float* lb, float* y, float* lse,
                            int64_t rows, int64_t d, cudaStream_t stream) {
  return for_each(rows, stream, [=] __device__(int64_t r) {
    lse[r] = attention_merge::merge_row(ya + r * d, la[r], yb + r * d, lb[r], y + r * d, d);
  });
}

}  // namespace rill::cuda_launch
