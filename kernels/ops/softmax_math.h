// One row of softmax, softmax_grad and softmax cross-entropy: the scalar math
// shared by the CPU kernels (softmax.cc, cross_entropy.cc) and the CUDA
// kernels (softmax.cu, cross_entropy.cu), so both compute one formula.
#pragma once

#include <math.h>

#include <cstdint>

#include "base/host_device.h"
#include "kernels/ops/exp_math.h"

namespace rill::softmax_math {

// e^x for x <= 0: on the host Rill's own, which vectorizes (exp_math.h).
RILL_HOST_DEVICE inline float exp_le0(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return exp_math::exp_nonpositive(x);
#endif
}

// Max and log-sum-exp shift of one row: logsumexp = max + log(sum).
RILL_HOST_DEVICE inline void row_stats(const float* row, int64_t cols, float* max_out, float* sum_out) {
  float max = row[0];
  for (int64_t c = 1; c < cols; ++c) max = max < row[c] ? row[c] : max;
  float sum = 0.0f;
  for (int64_t c = 0; c < cols; ++c) sum += exp_le0(row[c] - max);
  *max_out = max;
  *sum_out = sum;
}

// y = softmax(scale * x[0, valid)), zeros in [valid, cols): a causal row
// sees only its first `valid` columns. valid >= 1.
RILL_HOST_DEVICE inline void softmax_row(const float* x, float* y, int64_t cols, int64_t valid = -1,
                                         float scale = 1.0f) {
  if (valid < 0) valid = cols;
  float max = x[0];
  for (int64_t c = 1; c < valid; ++c) max = max < x[c] ? x[c] : max;
  for (int64_t c = 0; c < valid; ++c) y[c] = exp_le0(scale * (x[c] - max));
  float sum = 0.0f;  // in column order, apart from the loop above so that it vectorizes
  for (int64_t c = 0; c < valid; ++c) sum += y[c];
  const float inv = 1.0f / sum;
  for (int64_t c = 0; c < valid; ++c) y[c] *= inv;
  for (int64_t c = valid; c < cols; ++c) y[c] = 0.0f;
}

// dx = scale * y * (dy - sum(dy * y)). Where y is 0 (the columns a causal
// row masks) dx is 0 and adds nothing to the sum: the trailing run of such
// columns is written 0 without reading dy, which halves a causal row's work
// (an inf or NaN of dy there gives 0, where the CUDA kernel, which reads it,
// gives NaN; a finite dy gives the same values).
RILL_HOST_DEVICE inline void softmax_grad_row(const float* y, const float* dy, float* dx, int64_t cols,
                                              float scale = 1.0f) {
  int64_t valid = cols;
  while (valid > 0 && y[valid - 1] == 0.0f) --valid;
  float dot = 0.0f;
  for (int64_t c = 0; c < valid; ++c) dot += y[c] * dy[c];
  for (int64_t c = 0; c < valid; ++c) dx[c] = scale * y[c] * (dy[c] - dot);
  for (int64_t c = valid; c < cols; ++c) dx[c] = 0.0f;
}

// loss = logsumexp(row) - row[label]; label already checked.
RILL_HOST_DEVICE inline float cross_entropy_row(const float* row, int64_t cols, int32_t label) {
  float max, sum;
  row_stats(row, cols, &max, &sum);
  return max + logf(sum) - row[label];
}

// drow = (softmax(row) - onehot(label)) * dloss; label already checked.
RILL_HOST_DEVICE inline void cross_entropy_grad_row(const float* row, int64_t cols, int32_t label, float dloss,
                                                    float* drow) {
  float max, sum;
  row_stats(row, cols, &max, &sum);
  const float scale = dloss / sum;
  for (int64_t c = 0; c < cols; ++c) drow[c] = exp_le0(row[c] - max) * scale;
  drow[label] -= dloss;
}

}  // namespace rill::softmax_math
