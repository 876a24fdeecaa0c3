// bias_gelu_tanh and its gradient on CUDA: activation_math.h's formulas on
// x + b, b indexed by the element's place in the last axis, one thread per
// element (the CPU kernels' bits).
#include "kernels/ops/activation_math.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

cudaError_t bias_gelu_tanh(const float* x, const float* b, float* y, int64_t size, int64_t n, cudaStream_t stream) {
  return for_each(size, stream,
                  [=] __device__(int64_t i) { y[i] = act::forward<act::Act::kGeluTanh>(x[i] + b[i % n]); });
}

cudaError_t bias_gelu_tanh_grad(const float* x, const float* b, const float* dy, float* dx, int64_t size, int64_t n,
                                cudaStream_t stream) {
  return for_each(size, stream, [=] __device__(int64_t i) {
    dx[i] = act::backward<act::Act::kGeluTanh>(x[i] + b[i % n], dy[i]);
  });
}

}  // namespace rill::cuda_launch
