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

// One group's places: `slots` holds each of its s tokens' k experts and
// gets their slots (e capacity + c, or -1 past the capacity), first choices
// before second ones, tokens in order; `filled` is scratch of e counts.
// Returns the choices dropped.
RILL_MOE_HD inline int64_t place_group(int32_t* slots, int64_t s, int k, int64_t e, int64_t capacity,
                                       int32_t* filled) {
  for (int64_t i = 0; i < e; ++i) filled[i] = 0;
  int64_t lost = 0;
  for (int j = 0; j < k; ++j)
    for (int64_t t = 0; t < s; ++t) {
      const int32_t expert = slots[t * k + j];
      const int32_t c = filled[expert]++;
      const bool kept = c < capacity;
      slots[t * k + j] = kept ? static_cast<int32_t>(expert * capacity + c) : -1;
      lost += kept ? 0 : 1;
    }
  return lost;
}

// log(sum(exp(logits))) of a row, from its largest entry.
RILL_MOE_HD inline float logsumexp_row(const float* logits, int64_t e) {
  float top = logits[0];
  for (int64_t i = 1; i < e; ++i) top = logits[i] > top ? logits[i] : top;
  float sum = 0.0f;
  for (int64_t i = 0; i < e; ++i) sum += expf(logits[i] - top);
  return top + logf(sum);
}

// A group's share of first choices f and mean probability P of each
// expert (kernels/ops/moe_losses.cc), tokens in order; `p` is scratch of e.
RILL_MOE_HD inline void shares(const float* logits, int64_t s, int64_t e, float* p, float* f, float* mean) {
  for (int64_t i = 0; i < e; ++i) f[i] = mean[i] = 0.0f;
  for (int64_t t = 0; t < s; ++t) {
    softmax_row(logits + t * e, e, p);
    int32_t first = 0;
    top_k(p, e, 1, &first);
    f[first] += 1.0f;
    for (int64_t i = 0; i < e; ++i) mean[i] += p[i];
  }
  for (int64_t i = 0; i < e; ++i) {
    f[i] /= static_cast<float>(s);
    mean[i] /= static_cast<float>(s);
  }
}

// Switch's balance loss of a group, E sum_e f_e P_e. Scratch: p, f, mean of e.
RILL_MOE_HD inline float balance_group(const float* logits, int64_t s, int64_t e, float* p, float* f, float* mean) {
  shares(logits, s, e, p, f, mean);
  float sum = 0.0f;
  for (int64_t i = 0; i < e; ++i) sum += f[i] * mean[i];
  return static_cast<float>(e) * sum;
}

// Its gradient for the group's logits: dloss E / S p_i (f_i - sum_e f_e p_e).
RILL_MOE_HD inline void balance_grad_group(const float* logits, int64_t s, int64_t e, float dloss, float* p, float* f,
                                           float* mean, float* dlogits) {
  shares(logits, s, e, p, f, mean);
  const float scale = dloss * static_cast<float>(e) / static_cast<float>(s);
  for (int64_t t = 0; t < s; ++t) {
    softmax_row(logits + t * e, e, p);
    float expected = 0.0f;
    for (int64_t i = 0; i < e; ++i) expected += f[i] * p[i];
    for (int64_t i = 0; i < e; ++i) dlogits[t * e + i] = scale * p[i] * (f[i] - expected);
  }
}

// The z-loss's gradient for one row of a group of s: dloss 2 / S lse p_i.
RILL_MOE_HD inline void z_grad_row(const float* logits, int64_t s, int64_t e, float dloss, float* p, float* dlogits) {
  const float lse = logsumexp_row(logits, e);
  softmax_row(logits, e, p);
  const float scale = dloss * 2.0f / static_cast<float>(s) * lse;
  for (int64_t i = 0; i < e; ++i) dlogits[i] = scale * p[i];
}

}  // namespace rill::moe
