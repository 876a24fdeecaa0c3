// attention and attention_grad on CUDA: the formulas of the CPU kernels
// (attention.cc), FlashAttention's way. On GPUs of compute capability 8.0
// and up the tensor-core kernels of attention_mma.cu run instead (unless
// RILL_CUDA_ATTENTION=simt asks for these, as the tests do to check both);
// these serve every GPU. A block of 8 warps takes 8 rows
// (queries; for dk and dv, keys), a warp one row; tiles of 32 keys (or
// queries) are staged in shared memory and each lane scores one of them, so
// no [t, s] matrix is ever written. The forward keeps a running maximum and
// sum (the online softmax); the backward recomputes each probability from
// the saved log-sum-exp: dq by query rows, dk and dv by key rows, each row
// summed by one warp in a fixed order (no atomics: the same bits every
// run). Sums run in another order than the CPU's, within float rounding.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/ops/attention_mma.cuh"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"

namespace rill::cuda_launch {
namespace {

constexpr int kWarp = 32;
constexpr int kRows = 8;                          // rows per block: a warp each
constexpr int kTile = 32;                         // keys (or queries) staged at a time: a lane each
constexpr int kMaxD = kAttentionMaxHead;
constexpr int kPer = kMaxD / kWarp;               // a lane's columns: lane, lane + 32, ...
constexpr unsigned kAll = 0xffffffffu;

__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kAll, v, o));
  return v;
}

// rows [first, first + kTile) of a [n, d] matrix into `tile` (zeros past n).
__device__ inline void stage(float (*tile)[kMaxD + 1], const float* m, int64_t first, int64_t n, int d) {
  for (int e = threadIdx.x; e < kTile * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    tile[r][c] = first + r < n ? m[(first + r) * d + c] : 0.0f;
  }
}

__global__ void attention_kernel(const float* q, const float* k, const float* v, float* y, float* lse, int64_t t,
                                 int64_t s, int d, float scale, bool causal) {
  __shared__ float ks[kTile][kMaxD + 1], vs[kTile][kMaxD + 1];
  __shared__ float qs[kRows][kMaxD];
  const int64_t h = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kRows + warp;
  const int64_t mine = i < t ? (causal ? i + 1 : s) : 0;  // keys this row sees
  const int64_t last = min(t, static_cast<int64_t>(blockIdx.y + 1) * kRows) - 1;
  const int64_t keys = causal ? last + 1 : s;  // keys any row of the block sees
  const float *kh = k + h * s * d, *vh = v + h * s * d;
  if (i < t)
    for (int c = lane; c < d; c += kWarp) qs[warp][c] = q[(h * t + i) * d + c];
  float acc[kPer] = {};
  float top = -INFINITY, sum = 0.0f;
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();  // the last tile is read (and qs written)
    stage(ks, kh, j0, s, d);
    stage(vs, vh, j0, s, d);
    __syncthreads();
    if (j0 >= mine) continue;  // the whole warp: its row sees none of this tile
    const bool seen = j0 + lane < mine;
    float score = -INFINITY;
    if (seen) {
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += qs[warp][c] * ks[lane][c];
      score = scale * dot;
    }
    const float next = fmaxf(top, warp_max(score));
    const float rescale = expf(top - next);
    const float p = seen ? expf(score - next) : 0.0f;
    sum = sum * rescale + warp_sum(p);
    for (int u = 0; u < kPer; ++u) acc[u] *= rescale;
    for (int r = 0; r < kTile; ++r) {
      const float pr = __shfl_sync(kAll, p, r);
      for (int u = 0; u < kPer; ++u)
        if (lane + u * kWarp < d) acc[u] += pr * vs[r][lane + u * kWarp];
    }
    top = next;
  }
  if (i >= t) return;
  const float inv = 1.0f / sum;
  for (int u = 0; u < kPer; ++u)
    if (lane + u * kWarp < d) y[(h * t + i) * d + lane + u * kWarp] = acc[u] * inv;
  if (lane == 0) lse[h * t + i] = top + logf(sum);
}

// dq by query rows: each row's probabilities again, dS = P * (dy v^T - delta).
__global__ void attention_dq_kernel(const float* q, const float* k, const float* v, const float* y, const float* lse,
                                    const float* dy, float* dq, int64_t t, int64_t s, int d, float scale, bool causal) {
  __shared__ float ks[kTile][kMaxD + 1], vs[kTile][kMaxD + 1];
  __shared__ float qs[kRows][kMaxD], dys[kRows][kMaxD];
  const int64_t h = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kRows + warp;
  const int64_t mine = i < t ? (causal ? i + 1 : s) : 0;
  const int64_t last = min(t, static_cast<int64_t>(blockIdx.y + 1) * kRows) - 1;
  const int64_t keys = causal ? last + 1 : s;
  const float *kh = k + h * s * d, *vh = v + h * s * d;
  float delta = 0.0f, row_lse = 0.0f;
  if (i < t) {
    float part = 0.0f;
    for (int c = lane; c < d; c += kWarp) {
      qs[warp][c] = q[(h * t + i) * d + c];
      dys[warp][c] = dy[(h * t + i) * d + c];
      part += dys[warp][c] * y[(h * t + i) * d + c];
    }
    delta = warp_sum(part);
    row_lse = lse[h * t + i];
  }
  float acc[kPer] = {};
  for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    stage(ks, kh, j0, s, d);
    stage(vs, vh, j0, s, d);
    __syncthreads();
    if (j0 >= mine) continue;
    float ds = 0.0f;
    if (j0 + lane < mine) {
      float score = 0.0f, dp = 0.0f;
      for (int c = 0; c < d; ++c) {
        score += qs[warp][c] * ks[lane][c];
        dp += dys[warp][c] * vs[lane][c];
      }
      const float p = expf(scale * score - row_lse);
      ds = p * (dp - delta);
    }
    for (int r = 0; r < kTile; ++r) {
      const float dr = __shfl_sync(kAll, ds, r);
      for (int u = 0; u < kPer; ++u)
        if (lane + u * kWarp < d) acc[u] += dr * ks[r][lane + u * kWarp];
    }
  }
  if (i >= t) return;
  for (int u = 0; u < kPer; ++u)
    if (lane + u * kWarp < d) dq[(h * t + i) * d + lane + u * kWarp] = scale * acc[u];
}

// dk and dv by key rows: the queries that see key j, 32 at a time.
__global__ void attention_dkdv_kernel(const float* q, const float* k, const float* v, const float* y,
                                      const float* lse, const float* dy, float* dk, float* dv, int64_t t, int64_t s,
                                      int d, float scale, bool causal) {
  __shared__ float qs[kTile][kMaxD + 1], dys[kTile][kMaxD + 1];
  __shared__ float kj[kRows][kMaxD], vj[kRows][kMaxD];
  __shared__ float lses[kTile], deltas[kTile];
  const int64_t h = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kRows, j = first + warp;
  if (j < s)
    for (int c = lane; c < d; c += kWarp) {
      kj[warp][c] = k[(h * s + j) * d + c];
      vj[warp][c] = v[(h * s + j) * d + c];
    }
  float dk_acc[kPer] = {}, dv_acc[kPer] = {};
  const float *qh = q + h * t * d, *dyh = dy + h * t * d, *yh = y + h * t * d;
  for (int64_t i0 = causal ? first / kTile * kTile : 0; i0 < t; i0 += kTile) {
    __syncthreads();
    stage(qs, qh, i0, t, d);
    stage(dys, dyh, i0, t, d);
    for (int r = warp; r < kTile; r += kRows) {  // each query's delta and lse, a warp a row
      float part = 0.0f;
      if (i0 + r < t)
        for (int c = lane; c < d; c += kWarp) part += dyh[(i0 + r) * d + c] * yh[(i0 + r) * d + c];
      part = warp_sum(part);
      if (lane == 0) {
        deltas[r] = part;
        lses[r] = i0 + r < t ? lse[h * t + i0 + r] : 0.0f;
      }
    }
    __syncthreads();
    if (j >= s) continue;
    const int64_t i = i0 + lane;
    float p = 0.0f, ds = 0.0f;
    if (i < t && (!causal || i >= j)) {
      float score = 0.0f, dp = 0.0f;
      for (int c = 0; c < d; ++c) {
        score += kj[warp][c] * qs[lane][c];
        dp += vj[warp][c] * dys[lane][c];
      }
      p = expf(scale * score - lses[lane]);
      ds = p * (dp - deltas[lane]);
    }
    for (int r = 0; r < kTile; ++r) {
      const float pr = __shfl_sync(kAll, p, r), dr = __shfl_sync(kAll, ds, r);
      for (int u = 0; u < kPer; ++u) {
        const int c = lane + u * kWarp;
        if (c < d) {
          dv_acc[u] += pr * dys[r][c];
          dk_acc[u] += dr * qs[r][c];
        }
      }
    }
  }
  if (j >= s) return;
  for (int u = 0; u < kPer; ++u) {
    const int c = lane + u * kWarp;
    if (c < d) {
      dk[(h * s + j) * d + c] = scale * dk_acc[u];
      dv[(h * s + j) * d + c] = dv_acc[u];
    }
  }
}

dim3 grid(int64_t heads, int64_t rows) {
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>((rows + kRows - 1) / kRows));
}

// Whether this launch takes the tensor-core kernels.
bool use_mma() {
  const char* choice = std::getenv("RILL_CUDA_ATTENTION");
  return !(choice && std::strcmp(choice, "simt") == 0) && attention_mma_available();
}

}  // namespace

cudaError_t attention(const float* q, const float* k, const float* v, float* y, float* lse, int64_t heads, int64_t t,
                      int64_t s, int d, float scale, bool causal, cudaStream_t stream) {
  if (heads <= 0 || t <= 0 || d <= 0) return cudaSuccess;
  if (d > kMaxD || s <= 0) return cudaErrorInvalidValue;
  if (use_mma()) return attention_mma(q, k, v, y, lse, heads, t, s, d, scale, causal, stream);
  attention_kernel<<<grid(heads, t), kRows * kWarp, 0, stream>>>(q, k, v, y, lse, t, s, d, scale, causal);
  return cudaGetLastError();
}

cudaError_t attention_grad(const float* q, const float* k, const float* v, const float* y, const float* lse,
                           const float* dy, float* dq, float* dk, float* dv, int64_t heads, int64_t t, int64_t s, int d,
                           float scale, bool causal, cudaStream_t stream) {
  if (heads <= 0 || t <= 0 || s <= 0 || d <= 0) return cudaSuccess;
  if (d > kMaxD) return cudaErrorInvalidValue;
  if (use_mma()) return attention_grad_mma(q, k, v, y, lse, dy, dq, dk, dv, heads, t, s, d, scale, causal, stream);
  attention_dq_kernel<<<grid(heads, t), kRows * kWarp, 0, stream>>>(q, k, v, y, lse, dy, dq, t, s, d, scale, causal);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  attention_dkdv_kernel<<<grid(heads, s), kRows * kWarp, 0, stream>>>(q, k, v, y, lse, dy, dk, dv, t, s, d, scale,
                                                                      causal);
  return cudaGetLastError();
}

}  // namespace rill::cuda_launch
