// The launcher of shared_gpu.h's combination kernel (shared_gpu.cu): plain
// arguments only, as kernels/ops/cuda_launch.h, so nvcc compiles nothing of
// Rill's host headers; shared_gpu.cc turns its cudaError_t into a Status.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace rill::cuda_launch {

enum class Element { kF32, kI32, kBF16, kF16 };
inline constexpr int kMaxCombined = 8;

// dst[i] = sources[0][i] op sources[1][i] op ... op sources[count - 1][i],
// left to right (op 0 sum, 1 max, 2 min, 3 product; 16-bit floats combined
// in float and rounded each step; i32 sums and products wrap; max and min
// keep a NaN), for i < n, enqueued on `stream`. 1 <= count <= kMaxCombined.
cudaError_t combine_buffers(const void* const* sources, int count, void* dst, int64_t n, Element element, int op,
                            cudaStream_t stream);

}  // namespace rill::cuda_launch
