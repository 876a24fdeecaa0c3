// attention and attention_grad on tensor cores, FlashAttention-2's way, in
// float32 at about float32's accuracy: every product of two floats is made
// as three TF32 products (mma.sync m16n8k8), each operand split into its
// TF32 truncation and the TF32 rounding of the rest, the small terms first
// (a_small b_big + a_big b_small + a_big b_big; a_small b_small lies below
// float's last bit). This is the split PyTorch's float32 fused attention
// makes on these GPUs (CUTLASS's OpMultiplyAddFastF32).
//
// A warp owns 16 rows (queries; keys for dk and dv) and keeps their q and
// dy (k and v) as mma operands in registers; its block of 4 warps stages
// the other side's rows in shared memory, a tile at a time, the next tile
// copied (cp.async) while the warps compute on this one. Scores live in
// registers only: the forward keeps a running maximum and sum (the online
// softmax), the backward recomputes each probability from the saved
// log-sum-exp, dq by query rows and dk, dv by key rows, no atomics: the
// same bits every run.
//
// Fragments (PTX's mma.m16n8k8 .tf32; lane = 4 g + c):
//   A [16 x 8]: a0 (g, c), a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4)
//   B [8 x 8] (k x n): b0 (c, g), b1 (c + 4, g)
//   C [16 x 8]: c0 (g, 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1)
// A product P V, whose P is an accumulator, takes P as it lies: the sum over
// k is in any order, so k slot c stands for column 2c and slot c + 4 for
// 2c + 1, and V's rows are read in that order (b_cols).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/ops/attention_mma.cuh"

namespace rill::cuda_launch {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockRows = kWarps * 16;  // rows of a block: 16 a warp
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kAll = 0xffffffffu;

struct FragA {
  uint32_t big[4], small[4];
};
struct FragB {
  uint32_t big[2], small[2];
};

// big: x's TF32 truncation; small: the TF32 rounding of what is left (as
// CUTLASS's FastF32 splits). Integer operations at full rate.
__device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
  big = __float_as_uint(x) & 0xffffe000u;
  small = (__float_as_uint(x - __uint_as_float(big)) + 0x1000u) & 0xffffe000u;
}

__device__ __forceinline__ FragA split_a(float a0, float a1, float a2, float a3) {
  FragA f;
  split(a0, f.big[0], f.small[0]);
  split(a1, f.big[1], f.small[1]);
  split(a2, f.big[2], f.small[2]);
  split(a3, f.big[3], f.small[3]);
  return f;
}

__device__ __forceinline__ FragB split_b(float b0, float b1) {
  FragB f;
  split(b0, f.big[0], f.small[0]);
  split(b1, f.big[1], f.small[1]);
  return f;
}

__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// acc[n] += a B(n) for each n < N, B(n) from load_b(n): each of the three
// products over every n in turn, so N independent sums are in flight (each
// sum in the order a_small b_big, a_big b_small, a_big b_big).
template <int N, typename LoadB>
__device__ __forceinline__ void mma_row(float (&acc)[N][4], const FragA& a, LoadB load_b) {
  FragB b[N];
#pragma unroll
  for (int n = 0; n < N; ++n) b[n] = load_b(n);
#pragma unroll
  for (int n = 0; n < N; ++n) mma(acc[n], a.small, b[n].big);
#pragma unroll
  for (int n = 0; n < N; ++n) mma(acc[n], a.big, b[n].small);
#pragma unroll
  for (int n = 0; n < N; ++n) mma(acc[n], a.big, b[n].big);
}

// A row block of a [n, d] matrix as A operands over its columns: f[kk] is
// rows first + (g, g + 8), columns kk * 8 + (c, c + 4); zeros past n and d.
template <int D>
__device__ __forceinline__ void load_rows(float (&f)[D / 8][4], const float* m, int64_t first, int64_t n, int d, int g,
                                          int c) {
#pragma unroll
  for (int kk = 0; kk < D / 8; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = first + g + (e & 1) * 8;
      const int col = kk * 8 + c + (e >> 1) * 4;
      f[kk][e] = r < n && col < d ? m[r * d + col] : 0.0f;
    }
}

__device__ __forceinline__ FragA split_rows(const float (&f)[4]) { return split_a(f[0], f[1], f[2], f[3]); }

// An accumulator as an A operand, k in the permuted order of b_cols.
__device__ __forceinline__ FragA split_acc(const float (&x)[4]) { return split_a(x[0], x[2], x[1], x[3]); }

// A tile of rows in shared memory, a row padded to D + 4 floats: both reads
// below then touch 32 different banks.
template <int D>
using Tile = float[D + 4];

__device__ __forceinline__ void copy_async(void* dst, const float* src, bool in, bool wide) {
#if __CUDA_ARCH__ >= 800
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if (wide)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(src), "r"(in ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(to), "l"(src), "r"(in ? 4 : 0));
#endif
}

// Starts copying rows [first, first + R) of a [n, d] matrix into `tile`,
// zeros past n and d: 16 bytes at a time where `wide` (d a multiple of 4,
// the matrix 16-byte aligned), else 4.
template <int R, int D>
__device__ __forceinline__ void stage(Tile<D>* tile, const float* m, int64_t first, int64_t n, int d, bool wide) {
  const int width = wide ? 4 : 1;
  for (int e = threadIdx.x; e < R * D / width; e += kThreads) {
    const int r = e / (D / width), col = e % (D / width) * width;
    const bool in = first + r < n && col < d;
    copy_async(&tile[r][col], in ? m + (first + r) * d + col : m, in, wide);
  }
}

// body(buffer, first) for the tiles of rows first = begin, begin + step, ...
// below end, each staged by stage(buffer, first) into the other of two
// buffers while the one before it is computed on.
template <typename Stage, typename Body>
__device__ __forceinline__ void pipeline(int64_t begin, int64_t end, int64_t step, Stage stage_tile, Body body) {
#if __CUDA_ARCH__ >= 800
  if (begin >= end) return;
  stage_tile(0, begin);
  asm volatile("cp.async.commit_group;");
  int buffer = 0;
  for (int64_t first = begin; first < end; first += step, buffer ^= 1) {
    if (first + step < end) {
      stage_tile(buffer ^ 1, first + step);
      asm volatile("cp.async.commit_group;");
      asm volatile("cp.async.wait_group 1;");
    } else {
      asm volatile("cp.async.wait_group 0;");
    }
    __syncthreads();  // the tile is in place for every thread
    body(buffer, first);
    __syncthreads();  // every warp is done with it before the next copy over it
  }
#endif
}

// B whose n are the tile's rows n0.. and k its columns k0.. (q k^T).
template <int D>
__device__ __forceinline__ FragB b_rows(const Tile<D>* tile, int n0, int k0, int g, int c) {
  return split_b(tile[n0 + g][k0 + c], tile[n0 + g][k0 + c + 4]);
}

// B whose k are the tile's rows k0.. in the permuted order and n its
// columns n0.. (p v).
template <int D>
__device__ __forceinline__ FragB b_cols(const Tile<D>* tile, int k0, int n0, int g, int c) {
  return split_b(tile[k0 + 2 * c][n0 + g], tile[k0 + 2 * c + 1][n0 + g]);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kAll, v, 1));
  return fmaxf(v, __shfl_xor_sync(kAll, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kAll, v, 1);
  return v + __shfl_xor_sync(kAll, v, 2);
}

// Writes an accumulator row block (rows first + g + 8 (e >> 1), columns
// n * 8 + 2c + (e & 1)) times `factor[e >> 1]` into a [n, d] matrix.
template <int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 8][4], float* m, int64_t first, int64_t rows, int d,
                                           const float (&factor)[2], int g, int c) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = first + g + (e >> 1) * 8;
      const int col = n * 8 + 2 * c + (e & 1);
      if (r < rows && col < d) m[r * d + col] = acc[n][e] * factor[e >> 1];
    }
}

// Forward: a block takes 64 queries of one head, tiles of KB keys. MINB:
// blocks an SM is to hold, which caps registers (65536 / (128 MINB)).
template <int D, int KB, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) forward_kernel(const float* q, const float* k, const float* v,
                                                                  float* y, float* lse, int64_t t, int64_t s, int d,
                                                                  float scale, bool causal, bool wide) {
  __shared__ __align__(16) Tile<D> ks[2][KB], vs[2][KB];
  const int64_t h = blockIdx.x;
  const int64_t q0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kBlockRows;  // causal: longest rows first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t w0 = q0 + warp * 16;
  const float *kh = k + h * s * d, *vh = v + h * s * d;
  float qf[D / 8][4];
  load_rows<D>(qf, q + h * t * d, w0, t, d, g, c);
  float o[D / 8][4] = {};
  float top[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
  const float sl = scale * kLog2e;  // scores in log2 units: exp2 of them
  const auto stage_kv = [&](int b, int64_t j0) {
    stage<KB, D>(ks[b], kh, j0, s, d, wide);
    stage<KB, D>(vs[b], vh, j0, s, d, wide);
  };
  pipeline(0, causal ? min(s, q0 + kBlockRows) : s, KB, stage_kv, [&](int b, int64_t j0) {
    if (w0 >= t || (causal && j0 > w0 + 15)) return;  // the whole warp: no row of it sees this tile
    float sc[KB / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 8; ++kk)
      mma_row(sc, split_rows(qf[kk]), [&](int n) { return b_rows<D>(ks[b], n * 8, kk * 8, g, c); });
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < KB / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + n * 8 + 2 * c + (e & 1), i = w0 + g + (e >> 1) * 8;
        sc[n][e] = j < s && (!causal || j <= i) ? sc[n][e] * sl : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
      }
    float base[2], rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float next = fmaxf(top[r], quad_max(mx[r]));
      base[r] = next == -INFINITY ? 0.0f : next;  // a row that has seen no key yet keeps zeros
      rescale[r] = exp2f(top[r] - base[r]);
      top[r] = next;
      sum[r] *= rescale[r];
    }
#pragma unroll
    for (int n = 0; n < KB / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[n][e] = exp2f(sc[n][e] - base[e >> 1]);
        sum[e >> 1] += sc[n][e];
      }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= rescale[e >> 1];
#pragma unroll
    for (int kk = 0; kk < KB / 8; ++kk)
      mma_row(o, split_acc(sc[kk]), [&](int n) { return b_cols<D>(vs[b], kk * 8, n * 8, g, c); });
  });
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sum[r] = quad_sum(sum[r]);
    inv[r] = 1.0f / sum[r];
    const int64_t i = w0 + g + r * 8;
    if (c == 0 && i < t) lse[h * t + i] = (top[r] + log2f(sum[r])) * kLn2;
  }
  store_rows<D>(o, y + h * t * d, w0, t, d, inv, g, c);
}

// dq by query rows: each probability again from the log-sum-exp, dS = P (dy
// v^T - delta), dq = scale dS k.
template <int D, int KB, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) dq_kernel(const float* q, const float* k, const float* v,
                                                             const float* y, const float* lse, const float* dy,
                                                             float* dq, int64_t t, int64_t s, int d, float scale,
                                                             bool causal, bool wide) {
  __shared__ __align__(16) Tile<D> ks[2][KB], vs[2][KB];
  const int64_t h = blockIdx.x;
  const int64_t q0 = static_cast<int64_t>(gridDim.y - 1 - blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t w0 = q0 + warp * 16;
  const float *kh = k + h * s * d, *vh = v + h * s * d;
  float qf[D / 8][4], df[D / 8][4];
  load_rows<D>(qf, q + h * t * d, w0, t, d, g, c);
  load_rows<D>(df, dy + h * t * d, w0, t, d, g, c);
  float delta[2] = {0.0f, 0.0f}, lse2[2];  // each row's dy . y, and its log-sum-exp in log2 units
#pragma unroll
  for (int kk = 0; kk < D / 8; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = w0 + g + (e & 1) * 8;
      const int col = kk * 8 + c + (e >> 1) * 4;
      if (r < t && col < d) delta[e & 1] += df[kk][e] * y[(h * t + r) * d + col];
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    delta[r] = quad_sum(delta[r]);
    const int64_t i = w0 + g + r * 8;
    lse2[r] = i < t ? lse[h * t + i] * kLog2e : 0.0f;
  }
  const float sl = scale * kLog2e;
  float acc[D / 8][4] = {};
  const auto stage_kv = [&](int b, int64_t j0) {
    stage<KB, D>(ks[b], kh, j0, s, d, wide);
    stage<KB, D>(vs[b], vh, j0, s, d, wide);
  };
  pipeline(0, causal ? min(s, q0 + kBlockRows) : s, KB, stage_kv, [&](int b, int64_t j0) {
    if (w0 >= t || (causal && j0 > w0 + 15)) return;
    float sc[KB / 8][4] = {}, dp[KB / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 8; ++kk) {
      mma_row(sc, split_rows(qf[kk]), [&](int n) { return b_rows<D>(ks[b], n * 8, kk * 8, g, c); });
      mma_row(dp, split_rows(df[kk]), [&](int n) { return b_rows<D>(vs[b], n * 8, kk * 8, g, c); });
    }
#pragma unroll
    for (int n = 0; n < KB / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + n * 8 + 2 * c + (e & 1), i = w0 + g + (e >> 1) * 8;
        const float p = j < s && i < t && (!causal || j <= i) ? exp2f(sc[n][e] * sl - lse2[e >> 1]) : 0.0f;
        sc[n][e] = p * (dp[n][e] - delta[e >> 1]);
      }
#pragma unroll
    for (int kk = 0; kk < KB / 8; ++kk)
      mma_row(acc, split_acc(sc[kk]), [&](int n) { return b_cols<D>(ks[b], kk * 8, n * 8, g, c); });
  });
  const float factor[2] = {scale, scale};
  store_rows<D>(acc, dq + h * t * d, w0, t, d, factor, g, c);
}

// Each query row's delta = dy . y, 8 lanes a row in a fixed order, into
// `delta` [heads * t].
__global__ void delta_kernel(const float* y, const float* dy, float* delta, int64_t rows, int d) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 8;
  const int part = threadIdx.x % 8;
  float sum = 0.0f;
  if (row < rows)
    for (int col = part; col < d; col += 8) sum += dy[row * d + col] * y[row * d + col];
  sum += __shfl_xor_sync(kAll, sum, 1);
  sum += __shfl_xor_sync(kAll, sum, 2);
  sum += __shfl_xor_sync(kAll, sum, 4);
  if (part == 0 && row < rows) delta[row] = sum;
}

// Starts copying n floats at `from` (zeros past `valid`) into `to`.
template <int N>
__device__ __forceinline__ void stage_floats(float* to, const float* from, int64_t valid) {
  for (int e = threadIdx.x; e < N; e += kThreads) copy_async(to + e, e < valid ? from + e : from, e < valid, false);
}

// dk and dv by key rows: a block takes 64 keys of one head, tiles of QB
// queries; dv = P^T dy, dk = scale dS^T q. Each query's delta comes from
// delta_kernel.
template <int D, int QB, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) dkdv_kernel(const float* q, const float* k, const float* v,
                                                               const float* lse, const float* dy,
                                                               const float* delta, float* dk, float* dv,
                                                               int64_t t, int64_t s, int d, float scale, bool causal,
                                                               bool wide) {
  __shared__ __align__(16) Tile<D> qs[2][QB], dys[2][QB];
  __shared__ float lses[2][QB], deltas[2][QB];
  const int64_t h = blockIdx.x;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;  // causal: the keys most queries see first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t w0 = k0 + warp * 16;
  const float *qh = q + h * t * d, *dyh = dy + h * t * d;
  float kf[D / 8][4], vf[D / 8][4];
  load_rows<D>(kf, k + h * s * d, w0, s, d, g, c);
  load_rows<D>(vf, v + h * s * d, w0, s, d, g, c);
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  const float sl = scale * kLog2e;
  const auto stage_queries = [&](int b, int64_t i0) {
    stage<QB, D>(qs[b], qh, i0, t, d, wide);
    stage<QB, D>(dys[b], dyh, i0, t, d, wide);
    stage_floats<QB>(lses[b], lse + h * t + i0, t - i0);
    stage_floats<QB>(deltas[b], delta + h * t + i0, t - i0);
  };
  pipeline(causal ? k0 / QB * QB : 0, t, QB, stage_queries, [&](int b, int64_t i0) {
    if (w0 >= s || (causal && i0 + QB - 1 < w0)) return;  // no key of the warp is seen by this tile
    float st[QB / 8][4] = {}, dpt[QB / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 8; ++kk) {
      mma_row(st, split_rows(kf[kk]), [&](int n) { return b_rows<D>(qs[b], n * 8, kk * 8, g, c); });
      mma_row(dpt, split_rows(vf[kk]), [&](int n) { return b_rows<D>(dys[b], n * 8, kk * 8, g, c); });
    }
#pragma unroll
    for (int n = 0; n < QB / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = n * 8 + 2 * c + (e & 1);
        const int64_t i = i0 + r, j = w0 + g + (e >> 1) * 8;
        const float p = i < t && j < s && (!causal || j <= i) ? exp2f(st[n][e] * sl - lses[b][r] * kLog2e) : 0.0f;
        st[n][e] = p;
        dpt[n][e] = p * (dpt[n][e] - deltas[b][r]);
      }
#pragma unroll
    for (int kk = 0; kk < QB / 8; ++kk) {
      mma_row(dva, split_acc(st[kk]), [&](int n) { return b_cols<D>(dys[b], kk * 8, n * 8, g, c); });
      mma_row(dka, split_acc(dpt[kk]), [&](int n) { return b_cols<D>(qs[b], kk * 8, n * 8, g, c); });
    }
  });
  const float one[2] = {1.0f, 1.0f}, factor[2] = {scale, scale};
  store_rows<D>(dva, dv + h * s * d, w0, s, d, one, g, c);
  store_rows<D>(dka, dk + h * s * d, w0, s, d, factor, g, c);
}

dim3 grid(int64_t heads, int64_t rows) {
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows));
}

// Tiles and blocks per SM by head width (bench/attention_bench.sh compares
// others): two buffers of each staged tile within 48 KiB of shared memory.
template <int D>
constexpr int key_tile() { return D <= 32 ? 64 : D <= 64 ? 32 : 16; }  // forward and dq
template <int D>
constexpr int query_tile() { return D <= 64 ? 32 : 16; }  // dk and dv
template <int D>
constexpr int forward_blocks() { return D <= 64 ? 3 : 1; }  // more would spill registers
constexpr int kDqBlocks = 1, kDkdvBlocks = 1;

template <int D, int KB = key_tile<D>(), int MINB = forward_blocks<D>()>
cudaError_t forward(const float* q, const float* k, const float* v, float* y, float* lse, int64_t heads, int64_t t,
                    int64_t s, int d, float scale, bool causal, bool wide, cudaStream_t stream) {
  forward_kernel<D, KB, MINB><<<grid(heads, t), kThreads, 0, stream>>>(q, k, v, y, lse, t, s, d, scale, causal, wide);
  return cudaGetLastError();
}

template <int D, int KB = key_tile<D>(), int MINB = kDqBlocks>
cudaError_t backward_dq(const float* q, const float* k, const float* v, const float* y, const float* lse,
                        const float* dy, float* dq, int64_t heads, int64_t t, int64_t s, int d, float scale,
                        bool causal, bool wide, cudaStream_t stream) {
  dq_kernel<D, KB, MINB><<<grid(heads, t), kThreads, 0, stream>>>(q, k, v, y, lse, dy, dq, t, s, d, scale, causal,
                                                                   wide);
  return cudaGetLastError();
}

// dk and dv, with each query's delta made first into `delta` [heads * t].
template <int D, int QB = query_tile<D>(), int MINB = kDkdvBlocks>
cudaError_t backward_dkdv(const float* q, const float* k, const float* v, const float* y, const float* lse,
                          const float* dy, float* delta, float* dk, float* dv, int64_t heads, int64_t t, int64_t s,
                          int d, float scale, bool causal, bool wide, cudaStream_t stream) {
  const int64_t rows = heads * t;
  delta_kernel<<<static_cast<unsigned>((rows * 8 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(y, dy, delta,
                                                                                                     rows, d);
  dkdv_kernel<D, QB, MINB><<<grid(heads, s), kThreads, 0, stream>>>(q, k, v, lse, dy, delta, dk, dv, t, s, d,
                                                                    scale, causal, wide);
  return cudaGetLastError();
}

// dk and dv first, their deltas held in dq's bytes (heads * t floats of
// heads * t * d), then dq over them: one stream orders the three.
template <int D>
cudaError_t backward(const float* q, const float* k, const float* v, const float* y, const float* lse,
                     const float* dy, float* dq, float* dk, float* dv, int64_t heads, int64_t t, int64_t s, int d,
                     float scale, bool causal, bool wide, cudaStream_t stream) {
  const cudaError_t e = backward_dkdv<D>(q, k, v, y, lse, dy, dq, dk, dv, heads, t, s, d, scale, causal, wide, stream);
  if (e != cudaSuccess) return e;
  return backward_dq<D>(q, k, v, y, lse, dy, dq, heads, t, s, d, scale, causal, wide, stream);
}

// Whether tiles may be copied 16 bytes at a time: rows of whole 16-byte
// groups, each matrix starting on one.
bool wide_copies(int d, std::initializer_list<const float*> matrices) {
  if (d % 4 != 0) return false;
  for (const float* m : matrices)
    if (reinterpret_cast<uintptr_t>(m) % 16 != 0) return false;
  return true;
}

}  // namespace

bool attention_mma_available() {
  // Per device: 0 unknown, 1 no, 2 yes.
  static std::atomic<int> known[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  int state = known[device].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    cudaFuncAttributes attrs{};
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    major >= 8 && cudaFuncGetAttributes(&attrs, forward_kernel<64, key_tile<64>(), forward_blocks<64>()>) == cudaSuccess &&
                    attrs.ptxVersion >= 80 && attrs.binaryVersion >= 80;  // not JIT from older PTX
    state = ok ? 2 : 1;
    known[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

cudaError_t attention_mma(const float* q, const float* k, const float* v, float* y, float* lse, int64_t heads,
                          int64_t t, int64_t s, int d, float scale, bool causal, cudaStream_t stream) {
  const bool wide = wide_copies(d, {q, k, v});
  if (d <= 32) return forward<32>(q, k, v, y, lse, heads, t, s, d, scale, causal, wide, stream);
  if (d <= 64) return forward<64>(q, k, v, y, lse, heads, t, s, d, scale, causal, wide, stream);
  return forward<128>(q, k, v, y, lse, heads, t, s, d, scale, causal, wide, stream);
}

cudaError_t attention_grad_mma(const float* q, const float* k, const float* v, const float* y, const float* lse,
                               const float* dy, float* dq, float* dk, float* dv, int64_t heads, int64_t t, int64_t s,
                               int d, float scale, bool causal, cudaStream_t stream) {
  const bool wide = wide_copies(d, {q, k, v, y, dy});
  if (d <= 32) return backward<32>(q, k, v, y, lse, dy, dq, dk, dv, heads, t, s, d, scale, causal, wide, stream);
  if (d <= 64) return backward<64>(q, k, v, y, lse, dy, dq, dk, dv, heads, t, s, d, scale, causal, wide, stream);
  return backward<128>(q, k, v, y, lse, dy, dq, dk, dv, heads, t, s, d, scale, causal, wide, stream);
}

}  // namespace rill::cuda_launch
