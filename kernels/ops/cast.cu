// cast on CUDA: each element through float, with base/half.h's conversions
// (the CPU kernel's bits, NaNs included).
#include "base/half.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

template <typename T>
__device__ inline float load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return p[i];
  else
    return p[i].to_float();
}

template <typename T>
__device__ inline void store(T* p, int64_t i, float v) {
  if constexpr (std::is_same_v<T, float>)
    p[i] = v;
  else
    p[i] = T::from_float(v);
}

template <typename From, typename To>
cudaError_t convert(const void* x, void* y, int64_t n, cudaStream_t stream) {
  const From* src = static_cast<const From*>(x);
  To* dst = static_cast<To*>(y);
  return for_each(n, stream, [=] __device__(int64_t i) { store(dst, i, load(src, i)); });
}

template <typename From>
cudaError_t convert_from(const void* x, void* y, FloatType to, int64_t n, cudaStream_t stream) {
  switch (to) {
    case FloatType::kF32: return convert<From, float>(x, y, n, stream);
    case FloatType::kBF16: return convert<From, BFloat16>(x, y, n, stream);
    case FloatType::kF16: return convert<From, Float16>(x, y, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t cast(const void* x, FloatType from, void* y, FloatType to, int64_t n, cudaStream_t stream) {
  switch (from) {
    case FloatType::kF32: return convert_from<float>(x, y, to, n, stream);
    case FloatType::kBF16: return convert_from<BFloat16>(x, y, to, n, stream);
    case FloatType::kF16: return convert_from<Float16>(x, y, to, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace rill::cuda_launch
