// attention and attention_grad on tensor cores (attention_mma.cu), for GPUs
// of compute capability 8.0 and up; attention.cu chooses these or its own
// kernels (any GPU) per launch. Same arguments as cuda_launch::attention
// and attention_grad.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace rill::cuda_launch {

// Whether the running GPU has the tensor-core kernels' instructions and this
// build holds code for it that has them (compiled for 8.0 or later).
bool attention_mma_available();

cudaError_t attention_mma(const float* q, const float* k, const float* v, float* y, float* lse, int64_t heads,
                          int64_t t, int64_t s, int d, float scale, bool causal, cudaStream_t stream);
cudaError_t attention_grad_mma(const float* q, const float* k, const float* v, const float* y, const float* lse,
                               const float* dy, float* dq, float* dk, float* dv, int64_t heads, int64_t t, int64_t s,
                               int d, float scale, bool causal, cudaStream_t stream);

}  // namespace rill::cuda_launch
