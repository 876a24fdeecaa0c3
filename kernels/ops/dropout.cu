// dropout on CUDA: one thread per element, its place in the logical tensor
// from its index in the piece, the mask from dropout_math.h (as the CPU
// kernel's, so the two agree element for element).
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/dropout_math.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

cudaError_t dropout(const float* x, float* y, int64_t n, const DropoutPlace& place, uint64_t key, uint64_t first,
                    uint32_t threshold, float scale, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    int64_t rest = i, logical = 0;
    for (int a = place.rank - 1; a >= 0; --a) {
      logical += (place.offset[a] + rest % place.extent[a]) * place.logical_stride[a];
      rest /= place.extent[a];
    }
    y[i] = dropout_math::keep(key, first + static_cast<uint64_t>(logical), threshold) ? x[i] * scale : 0.0f;
  });
}

}  // namespace rill::cuda_launch
