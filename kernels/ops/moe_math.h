// Mixture of experts' routing of one token, for the CPU and CUDA kernels
// alike (kernels/ops/moe.cc, moe.cu): plain arithmetic on a row of E
// router logits, the same operations in the same order on both (within
// rounding: the GPU fuses multiply-adds and has its own expf).
//
// A token's row: p = softmax(logits); its k experts are those of the k
// largest p, the lower index first among equals; its gates are their p,
// divided by their sum when `normalize` (GShard's top-2), else as they are
// (Switch's top-1).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define RILL_MOE_HD __host__ __device__
#else
#define RILL_MOE_HD
#endif

namespace rill::moe {

inline constexpr int kMaxK = 2;

// The row's softmax into p[0..e).
RILL_MOE_HD inline void softmax_row(const float* logits, int64_t e, float* p) {
  float top = logits[0];
  for (int64_t i = 1; i < e; ++i) top = logits[i] > top ? logits[i] : top;
  float sum = 0.0f;
  for (int64_t i = 0; i < e; ++i) {
    p[i] = expf(logits[i] - top);
    sum += p[i];
  }
  for (int64_t i = 0; i < e; ++i) p[i] = p[i] / sum;
}

// The k experts of the largest p, in order (ties: the lower index).
RILL_MOE_HD inline void top_k(const float* p, int64_t e, int k, int32_t* chosen) {
  for (int j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t i = 0; i < e; ++i) {
      bool taken = false;
      for (int q = 0; q < j; ++q) taken = taken || chosen[q] == i;
      if (!taken && (best < 0 || p[i] > p[best])) best = static_cast<int32_t>(i);
    }
    chosen[j] = best;
  }
}

// The gates of the chosen experts.
RILL_MOE_HD inline void gates_of(const float* p, const int32_t* chosen, int k, bool normalize, float* gates) {
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += p[chosen[j]];
  for (int j = 0; j < k; ++j) gates[j] = normalize ? p[chosen[j]] / sum : p[chosen[j]];
}

// d logits of one row from d gates: through the normalization (when on),
// then the softmax. `dp` is scratch of e floats.
RILL_MOE_HD inline void route_grad_row(const float* p, const int32_t* chosen, const float* dgates, int k,
                                       bool normalize, int64_t e, float* dp, float* dlogits) {
  for (int64_t i = 0; i < e; ++i) dp[i] = 0.0f;
  if (normalize) {
    float sum = 0.0f, dot = 0.0f;
    for (int j = 0; j < k; ++j) sum += p[chosen[j]];
    for (int j = 0; j < k; ++j) dot += dgates[j] * (p[chosen[j]] / sum);
    for (int j = 0; j < k; ++j) dp[chosen[j]] = (dgates[j] - dot) / sum;
  } else {
    for (int j = 0; j < k; ++j) dp[chosen[j]] = dgates[j];
  }
  float inner = 0.0f;
  for (int64_t i = 0; i < e; ++i) inner += dp[i] * p[i];
  for (int64_t i = 0; i < e; ++i) dlogits[i] = p[i] * (dp[i] - inner);
}

// log(sum(exp(logits))) of a row, from its largest entry.
RILL_MOE_HD inline float logsumexp_row(const float* logits, int64_t e) {
  float top = logits[0];
  for (int64_t i = 1; i < e; ++i) top = logits[i] > top ? logits[i] : top;
  float sum = 0.0f;
  for (int64_t i = 0; i < e; ++i) sum += expf(logits[i] - top);
  return top + logf(sum);
}

}  // namespace rill::moe
