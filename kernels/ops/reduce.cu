// reduce_sum, reduce_mean and broadcast_like on CUDA over axis runs (see
// kernels/ops/axis_runs.h). Sums run in double, each output's in a fixed
// order, so a run is deterministic and matches the CPU's within float
// rounding of the result. Where one run of axes is reduced (every reduction
// of a model: a loss's mean, a bias gradient's column sums, a row's sum)
// the threads of a block share an output's elements:
//   - the reduced run is innermost (contiguous): a block per output, its
//     threads striding over the run, then a tree over the block;
//   - elsewhere (strided): a block of 32 x 32 threads per 32 outputs, the 32
//     lanes of a warp on consecutive outputs (coalesced reads), the 32 rows
//     of the block on a share of the reduced run each, then a sum over the
//     rows in row order.
// Other shapes take one thread per output.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

// Offset in the unreduced tensor of the index-th combination of the runs
// that are (reduced) or are not (!reduced) reduced, the last varying fastest.
__device__ int64_t offset_of(const ReduceRuns& runs, int64_t index, bool reduced) {
  int64_t offset = 0;
  for (int r = runs.count - 1; r >= 0; --r) {
    if (runs.reduced[r] != reduced) continue;
    offset += (index % runs.size[r]) * runs.big_stride[r];
    index /= runs.size[r];
  }
  return offset;
}

}  // namespace

namespace {

constexpr int kRowThreads = 256;

// One block per output (grid-stride over outputs): its threads stride over
// the contiguous run of `count` elements at the output's base.
__global__ void reduce_contiguous(ReduceRuns runs, const float* x, float* y, int64_t n_out, int64_t count,
                                  float scale) {
  __shared__ double partial[kRowThreads];
  for (int64_t s = blockIdx.x; s < n_out; s += gridDim.x) {
    const float* row = x + offset_of(runs, s, false);
    double sum = 0.0;
    for (int64_t q = threadIdx.x; q < count; q += blockDim.x) sum += row[q];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) y[s] = static_cast<float>(partial[0]) * scale;
    __syncthreads();
  }
}

constexpr int kLanes = 32, kRows = 32;

// Blocks of kLanes x kRows threads, each block kLanes consecutive outputs:
// row r of the block sums elements r, r + kRows, ... of the reduced run
// (stride `stride`), then row 0 adds the rows' sums in order.
__global__ void reduce_strided(ReduceRuns runs, const float* x, float* y, int64_t n_out, int64_t count,
                               int64_t stride, float scale) {
  __shared__ double partial[kRows][kLanes + 1];
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kLanes; first < n_out;
       first += static_cast<int64_t>(gridDim.x) * kLanes) {
    const int64_t s = first + threadIdx.x;
    double sum = 0.0;
    if (s < n_out) {
      const float* col = x + offset_of(runs, s, false);
      for (int64_t q = threadIdx.y; q < count; q += kRows) sum += col[q * stride];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && s < n_out) {
      double total = 0.0;
      for (int r = 0; r < kRows; ++r) total += partial[r][threadIdx.x];
      y[s] = static_cast<float>(total) * scale;
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t reduce(const ReduceRuns& runs, const float* x, float* y, int64_t n_out, int64_t reduced_count,
                   float scale, bool empty, cudaStream_t stream) {
  int reduced_runs = 0, run = -1;
  for (int r = 0; r < runs.count; ++r)
    if (runs.reduced[r]) {
      ++reduced_runs;
      run = r;
    }
  if (!empty && n_out > 0 && reduced_runs == 1) {
    const auto blocks = [](int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>(n, 1, 65535)); };
    if (runs.big_stride[run] == 1) {
      reduce_contiguous<<<blocks(n_out), kRowThreads, 0, stream>>>(runs, x, y, n_out, reduced_count, scale);
    } else {
      reduce_strided<<<blocks((n_out + kLanes - 1) / kLanes), dim3(kLanes, kRows), 0, stream>>>(
          runs, x, y, n_out, reduced_count, runs.big_stride[run], scale);
    }
    return cudaGetLastError();
  }
  return for_each(n_out, stream, [=] __device__(int64_t s) {
    if (empty) {
      y[s] = 0.0f;
      return;
    }
    const int64_t base = offset_of(runs, s, false);
    double sum = 0.0;
    for (int64_t q = 0; q < reduced_count; ++q) sum += x[base + offset_of(runs, q, true)];
    y[s] = static_cast<float>(sum) * scale;
  });
}

cudaError_t broadcast_like(const ReduceRuns& runs, const float* dy, float* dx, int64_t n, float scale,
                           cudaStream_t stream) {
  return for_each(n, stream, [=] __device__(int64_t i) {
    int64_t small = 0, rest = i;
    for (int r = runs.count - 1; r >= 0; --r) {
      small += (rest % runs.size[r]) * runs.small_stride[r];
      rest /= runs.size[r];
    }
    dx[i] = dy[small] * scale;
  });
}

}  // namespace rill::cuda_launch
