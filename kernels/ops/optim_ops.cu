// Optimizer updates on CUDA: the CPU kernels' formulas, in double and rounded
// to float once per value, one thread per element.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

cudaError_t sgd(float* w, const float* g, int64_t n, double lr, double decay, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) { w[i] = static_cast<float>(w[i] - lr * (g[i] + decay * w[i])); });
}

cudaError_t momentum(float* w, const float* g, float* v, int64_t n, double lr, double decay, double mu,
                     cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    const double velocity = mu * v[i] + (g[i] + decay * w[i]);
    v[i] = static_cast<float>(velocity);
    w[i] = static_cast<float>(w[i] - lr * velocity);
  });
}

cudaError_t adam(float* w, const float* g, float* m, float* v, int64_t n, double step_size, double beta1,
                 double beta2, double correction2_sqrt, double eps, double decay, double shrink,
                 cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    const double w_i = shrink * w[i];  // AdamW's decoupled decay (1 for Adam)
    const double grad = g[i] + decay * w_i;
    const double m_i = beta1 * m[i] + (1.0 - beta1) * grad;
    const double v_i = beta2 * v[i] + (1.0 - beta2) * grad * grad;
    m[i] = static_cast<float>(m_i);
    v[i] = static_cast<float>(v_i);
    w[i] = static_cast<float>(w_i - step_size * m_i / (sqrt(v_i) / correction2_sqrt + eps));
  });
}

}  // namespace rill::cuda_launch
