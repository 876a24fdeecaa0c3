// The mixture of experts' kernels on CUDA (kernels/ops/moe.cc says what
// each computes): the CPU kernels' arithmetic (moe_math.h), each element
// made by one thread in the CPU's order, without atomics, so a run gives
// the same bits every time. Against the CPU they agree within rounding:
// nvcc fuses multiply-adds, and CUDA's expf is not glibc's.
// The routing's first pass gives each token its experts and gates (one
// thread a token); its second gives each group's choices their places (one
// thread a group, in the CPU's order). A slot outside [-1, E C) raises the
// context's bad-index flag.
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/launch.cuh"
#include "kernels/ops/moe_math.h"

namespace rill::cuda_launch {
namespace {

constexpr int kMaxExperts = 1024;

__device__ int64_t row_of(int32_t slot, int64_t g, int64_t groups, int64_t capacity, int64_t d) {
  const int64_t e = slot / capacity, c = slot % capacity;
  return ((e * groups + g) * capacity + c) * d;
}

}  // namespace

cudaError_t moe_route(const float* logits, float* gates, int32_t* slots, float* dropped, int64_t groups, int64_t s,
                      int64_t experts, int k, int64_t capacity, bool normalize, cudaStream_t stream) {
  // Each token's experts (held in slots for now) and gates.
  cudaError_t e = for_each(groups * s, stream, [=] __device__(int64_t t) {
    float p[kMaxExperts];
    moe::softmax_row(logits + t * experts, experts, p);
    moe::top_k(p, experts, k, slots + t * k);
    moe::gates_of(p, slots + t * k, k, normalize, gates + t * k);
  });
  if (e != cudaSuccess) return e;
  return for_each(groups, stream, [=] __device__(int64_t g) {
    int32_t filled[kMaxExperts];
    dropped[g] = static_cast<float>(moe::place_group(slots + g * s * k, s, k, experts, capacity, filled));
  });
}

cudaError_t moe_route_grad(const float* logits, const float* dgates, float* dlogits, int64_t rows, int64_t experts,
                           int k, bool normalize, cudaStream_t stream) {
  return for_each(rows, stream, [=] __device__(int64_t t) {
    float p[kMaxExperts], dp[kMaxExperts];
    int32_t chosen[moe::kMaxK];
    moe::softmax_row(logits + t * experts, experts, p);
    moe::top_k(p, experts, k, chosen);
    moe::route_grad_row(p, chosen, dgates + t * k, k, normalize, experts, dp, dlogits + t * experts);
  });
}

cudaError_t moe_dispatch(const float* x, const int32_t* slots, const float* weights, float* out, int64_t groups,
                         int64_t s, int64_t d, int k, int64_t experts, int64_t capacity, int64_t* bad,
                         cudaStream_t stream) {
  cudaError_t e =
      cudaMemsetAsync(out, 0, static_cast<size_t>(experts * groups * capacity * d) * sizeof(float), stream);
  if (e != cudaSuccess) return e;
  return for_each(groups * s * k * d, stream, [=] __device__(int64_t n) {
    const int64_t i = n % d, choice = n / d, t = choice / k;
    const int32_t slot = slots[choice];
    if (!index_ok(slot + 1, experts * capacity + 1, choice, bad) || slot < 0) return;
    const float weight = weights ? weights[choice] : 1.0f;
    out[row_of(slot, t / s, groups, capacity, d) + i] = weight * x[t * d + i];
  });
}

cudaError_t moe_combine(const float* y, const int32_t* slots, const float* gates, float* out, int64_t groups,
                        int64_t s, int64_t d, int k, int64_t experts, int64_t capacity, int64_t* bad,
                        cudaStream_t stream) {
  return for_each(groups * s * d, stream, [=] __device__(int64_t n) {
    const int64_t i = n % d, t = n / d;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int32_t slot = slots[t * k + j];
      if (!index_ok(slot + 1, experts * capacity + 1, t * k + j, bad) || slot < 0) continue;
      const float gate = gates ? gates[t * k + j] : 1.0f;
      sum += gate * y[row_of(slot, t / s, groups, capacity, d) + i];
    }
    out[n] = sum;
  });
}

cudaError_t moe_gate_grad(const float* y, const int32_t* slots, const float* x, float* out, int64_t groups, int64_t s,
                          int64_t d, int k, int64_t experts, int64_t capacity, int64_t* bad, cudaStream_t stream) {
  return for_each(groups * s * k, stream, [=] __device__(int64_t choice) {
    const int64_t t = choice / k;
    const int32_t slot = slots[choice];
    float dot = 0.0f;
    if (index_ok(slot + 1, experts * capacity + 1, choice, bad) && slot >= 0) {
      const float* row = y + row_of(slot, t / s, groups, capacity, d);
      for (int64_t i = 0; i < d; ++i) dot += row[i] * x[t * d + i];
    }
    out[choice] = dot;
  });
}

cudaError_t moe_balance_loss(const float* logits, float* out, int64_t groups, int64_t s, int64_t e,
                             cudaStream_t stream) {
  return for_each(groups, stream, [=] __device__(int64_t g) {
    float p[kMaxExperts], f[kMaxExperts], mean[kMaxExperts];
    out[g] = moe::balance_group(logits + g * s * e, s, e, p, f, mean);
  });
}

cudaError_t moe_balance_loss_grad(const float* logits, const float* dloss, float* dlogits, int64_t groups, int64_t s,
                                  int64_t e, cudaStream_t stream) {
  return for_each(groups, stream, [=] __device__(int64_t g) {
    float p[kMaxExperts], f[kMaxExperts], mean[kMaxExperts];
    moe::balance_grad_group(logits + g * s * e, s, e, dloss[g], p, f, mean, dlogits + g * s * e);
  });
}

cudaError_t moe_z_loss(const float* logits, float* out, int64_t groups, int64_t s, int64_t e, cudaStream_t stream) {
  return for_each(groups, stream, [=] __device__(int64_t g) {
    float sum = 0.0f;
    for (int64_t t = 0; t < s; ++t) {
      const float lse = moe::logsumexp_row(logits + (g * s + t) * e, e);
      sum += lse * lse;
    }
    out[g] = sum / static_cast<float>(s);
  });
}

cudaError_t moe_z_loss_grad(const float* logits, const float* dloss, float* dlogits, int64_t groups, int64_t s,
                            int64_t e, cudaStream_t stream) {
  return for_each(groups * s, stream, [=] __device__(int64_t t) {
    float p[kMaxExperts];
    moe::z_grad_row(logits + t * e, s, e, dloss[t / s], p, dlogits + t * e);
  });
}

}  // namespace rill::cuda_launch
