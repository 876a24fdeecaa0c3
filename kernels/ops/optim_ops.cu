// Optimizer updates on CUDA: the CPU kernels' formulas, in double and rounded
// to float once per value, one thread per element.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

namespace {

// One thread's run over a grid-stride loop, the gate read and Adam's
// scalars made once per thread rather than once per element.
__global__ void adam_kernel(float* w, const float* g, float* m, float* v, const int32_t* gate, int64_t n,
                            AdamScalars s) {
  if (gate != nullptr) {
    if (*gate == 0) return;  // an overflowed step: skipped
    const double t = *gate;
    s.step_size = s.lr / (1.0 - pow(s.beta1, t));
    s.correction2_sqrt = sqrt(1.0 - pow(s.beta2, t));
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double w_i = s.shrink * w[i];  // AdamW's decoupled decay (1 for Adam)
    const double grad = g[i] + s.decay * w_i;
    const double m_i = s.beta1 * m[i] + (1.0 - s.beta1) * grad;
    const double v_i = s.beta2 * v[i] + (1.0 - s.beta2) * grad * grad;
    m[i] = static_cast<float>(m_i);
    v[i] = static_cast<float>(v_i);
    w[i] = static_cast<float>(w_i - s.step_size * m_i / (sqrt(v_i) / s.correction2_sqrt + s.eps));
  }
}

}  // namespace

cudaError_t sgd(float* w, const float* g, const int32_t* gate, int64_t n, double lr, double decay,
                cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    if (gate == nullptr || *gate != 0) w[i] = static_cast<float>(w[i] - lr * (g[i] + decay * w[i]));
  });
}

cudaError_t momentum(float* w, const float* g, float* v, const int32_t* gate, int64_t n, double lr, double decay,
                     double mu, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    if (gate != nullptr && *gate == 0) return;
    const double velocity = mu * v[i] + (g[i] + decay * w[i]);
    v[i] = static_cast<float>(velocity);
    w[i] = static_cast<float>(w[i] - lr * velocity);
  });
}

cudaError_t adam(float* w, const float* g, float* m, float* v, const int32_t* gate, int64_t n, const AdamScalars& s,
                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 4096));
  adam_kernel<<<blocks, kThreads, 0, stream>>>(w, g, m, v, gate, n, s);
  return cudaGetLastError();
}

}  // namespace rill::cuda_launch
