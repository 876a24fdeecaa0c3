// One thread block per row: reductions over a row's columns (max, sum) by
// warp shuffles and a shared-memory pass, for the row-wise CUDA kernels
// (softmax, cross-entropy). Each thread strides over the columns, so a
// warp's loads are adjacent (coalesced) whatever the row length.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {

inline constexpr int kRowThreads = 256;

__device__ inline float warp_reduce(float v, bool max) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = max ? fmaxf(v, other) : v + other;
  }
  return v;
}

// The block's max or sum of v; every thread gets it. `shared` holds 32 floats.
__device__ inline float block_reduce(float v, bool max, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, max);
  __syncthreads();  // shared may still be read from the last reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? shared[lane] : (max ? -INFINITY : 0.0f);
  return warp_reduce(v, max);
}

// Grid for one block per row (rows beyond the grid's are strided over).
inline unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < (1 << 30) ? rows : (1 << 30)); }

}  // namespace rill::cuda_launch
