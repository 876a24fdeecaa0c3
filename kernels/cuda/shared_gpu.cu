// shared_gpu.h's combination: each element of several device buffers (the
// ranks' pieces sharing one GPU) combined left to right, as the host's
// collectives combine them (comm/collectives.cc), so the same bits.
#include <type_traits>

#include "base/half.h"
#include "kernels/cuda/shared_gpu_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

struct Sources {
  const void* p[kMaxCombined];
  int count;
};

template <typename T>
__device__ inline float as_float(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return x.to_float();
}

template <typename T>
__device__ inline T combine(int op, T x, T y) {
  if constexpr (std::is_same_v<T, int32_t>) {
    const auto u = static_cast<uint32_t>(x), v = static_cast<uint32_t>(y);
    switch (op) {
      case 1: return x > y ? x : y;
      case 2: return x < y ? x : y;
      case 3: return static_cast<int32_t>(u * v);
      default: return static_cast<int32_t>(u + v);
    }
  } else {
    const float u = as_float(x), v = as_float(y);
    float r;
    switch (op) {
      case 1: return u > v || u != u ? x : y;
      case 2: return u < v || u != u ? x : y;
      case 3: r = __fmul_rn(u, v); break;
      default: r = __fadd_rn(u, v); break;
    }
    if constexpr (std::is_same_v<T, float>)
      return r;
    else
      return T::from_float(r);
  }
}

template <typename T>
cudaError_t combine_typed(Sources s, void* dst, int64_t n, int op, cudaStream_t stream) {
  T* out = static_cast<T*>(dst);
  return for_each(n, stream, [=] __device__(int64_t i) {
    T acc = static_cast<const T*>(s.p[0])[i];
    for (int r = 1; r < s.count; ++r) acc = combine(op, acc, static_cast<const T*>(s.p[r])[i]);
    out[i] = acc;
  });
}

}  // namespace

cudaError_t combine_buffers(const void* const* sources, int count, void* dst, int64_t n, Element element, int op,
                            cudaStream_t stream) {
  if (count < 1 || count > kMaxCombined || op < 0 || op > 3) return cudaErrorInvalidValue;
  Sources s{};
  for (int r = 0; r < count; ++r) s.p[r] = sources[r];
  s.count = count;
  switch (element) {
    case Element::kF32: return combine_typed<float>(s, dst, n, op, stream);
    case Element::kI32: return combine_typed<int32_t>(s, dst, n, op, stream);
    case Element::kBF16: return combine_typed<BFloat16>(s, dst, n, op, stream);
    case Element::kF16: return combine_typed<Float16>(s, dst, n, op, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace rill::cuda_launch
