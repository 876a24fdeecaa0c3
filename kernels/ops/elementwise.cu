// The simple elementwise kernels on CUDA, one thread per element: add, sub,
// mul (b shaped like a, or a scalar), bias_add, scale, accumulate and fill.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

cudaError_t binary(Binary op, const float* a, const float* b, int64_t b_stride, float* y, int64_t n,
                   cudaStream_t stream) {
  switch (op) {
    case Binary::kAdd: return for_each(n, stream, [=] __device__(int64_t i) { y[i] = a[i] + b[i * b_stride]; });
    case Binary::kSub: return for_each(n, stream, [=] __device__(int64_t i) { y[i] = a[i] - b[i * b_stride]; });
    case Binary::kMul: return for_each(n, stream, [=] __device__(int64_t i) { y[i] = a[i] * b[i * b_stride]; });
  }
  return cudaErrorInvalidValue;
}

cudaError_t bias_add(const float* x, const float* bias, float* y, int64_t n, int64_t channels, int64_t inner,
                     cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) { y[i] = x[i] + bias[(i / inner) % channels]; });
}

cudaError_t scale(const float* x, float* y, float s, int64_t n, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) { y[i] = x[i] * s; });
}

cudaError_t accumulate(const float* x, float* y, float s, bool first, int64_t n, cudaStream_t stream) {
  if (first) return scale(x, y, s, n, stream);
  return for_each(n, stream, [=] __device__(int64_t i) { y[i] += x[i] * s; });
}

cudaError_t fill(float* y, float value, int64_t n, cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) { y[i] = value; });
}

cudaError_t fill_bits(void* y, uint32_t bits, int element_bytes, int64_t n, cudaStream_t stream) {
  switch (element_bytes) {
    case 2: {
      uint16_t* out = static_cast<uint16_t*>(y);
      const auto pattern = static_cast<uint16_t>(bits);
      return for_each(n, stream, [=] __device__(int64_t i) { out[i] = pattern; });
    }
    case 4: {
      uint32_t* out = static_cast<uint32_t*>(y);
      return for_each(n, stream, [=] __device__(int64_t i) { out[i] = bits; });
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace rill::cuda_launch
