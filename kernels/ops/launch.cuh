// Grid-stride loops for the CUDA kernels in kernels/ops/*.cu.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

namespace rill::cuda_launch {

inline constexpr int kThreads = 256;

template <typename F>
__global__ void for_each_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(i);
}

// Whether `index` (a class label, an embedding id) is in [0, limit); if
// not, raises the context's bad-index flag: 1 + `position`, the first such
// position winning (reported when the next completion event is seen,
// CudaContext::done, or by CudaContext::synchronize).
__device__ inline bool index_ok(int32_t index, int64_t limit, int64_t position, int64_t* flag) {
  if (index >= 0 && index < limit) return true;
  atomicCAS(reinterpret_cast<unsigned long long*>(flag), 0ull, static_cast<unsigned long long>(position + 1));
  return false;
}

// Runs f(i) for i in [0, n) on `stream`; f is a __device__ lambda.
template <typename F>
cudaError_t for_each(int64_t n, cudaStream_t stream, F f) {
  if (n <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 4096));
  for_each_kernel<<<blocks, kThreads, 0, stream>>>(n, f);
  return cudaGetLastError();
}

}  // namespace rill::cuda_launch
