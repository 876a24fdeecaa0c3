// The loss_scale ops on CUDA: one thread each, loss_scale_math.h's formulas.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"
#include "kernels/ops/loss_scale_math.h"

namespace rill::cuda_launch {

cudaError_t loss_scale_value(const float* state, float* scale, int exponent, cudaStream_t stream) {
  return for_each(1, stream, [=] __device__(int64_t) { scale[0] = loss_scale::scale(exponent, state); });
}

cudaError_t loss_scale_check(const float* total, const float* state, float* unscale, float* unscaled_total,
                             int32_t* gate, float* skipped, int exponent, int64_t step, cudaStream_t stream) {
  return for_each(1, stream, [=] __device__(int64_t) {
    const loss_scale::Check c = loss_scale::check(total[0], state, exponent, step);
    unscale[0] = c.unscale;
    unscaled_total[0] = c.unscaled_total;
    gate[0] = c.gate;
    skipped[0] = c.skipped;
  });
}

cudaError_t loss_scale_update(float* state, const float* total, int exponent, int64_t window, int64_t step,
                              int64_t* flag, cudaStream_t stream) {
  return for_each(1, stream, [=] __device__(int64_t) {
    if (!loss_scale::update(state, total[0], exponent, window))
      atomicCAS(reinterpret_cast<unsigned long long*>(flag), 0ull, static_cast<unsigned long long>(-(step + 1)));
  });
}

}  // namespace rill::cuda_launch
