// One row of layer_norm and of its input gradient: the scalar math shared by
// the CPU kernels (layer_norm.cc) and the CUDA kernels (layer_norm.cu), so
// both compute one formula. Statistics are f32, two passes (mean, then the
// variance about it).
#pragma once

#include <math.h>

#include <cstdint>

#include "base/host_device.h"

namespace rill::layer_norm_math {

RILL_HOST_DEVICE inline void row_stats(const float* x, int64_t cols, float eps, float* mean, float* rstd) {
  float sum = 0.0f;
  for (int64_t c = 0; c < cols; ++c) sum += x[c];
  const float m = sum / static_cast<float>(cols);
  float var = 0.0f;
  for (int64_t c = 0; c < cols; ++c) var += (x[c] - m) * (x[c] - m);
  *mean = m;
  *rstd = 1.0f / sqrtf(var / static_cast<float>(cols) + eps);
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma,
// xhat = (x - mean) * rstd.
RILL_HOST_DEVICE inline void row_dx(const float* x, const float* dy, const float* gamma, float mean, float rstd,
                                    int64_t cols, float* dx) {
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float g = dy[c] * gamma[c];
    sum_g += g;
    sum_gx += g * (x[c] - mean) * rstd;
  }
  const float inv = 1.0f / static_cast<float>(cols);
  const float mg = sum_g * inv, mgx = sum_gx * inv;
  for (int64_t c = 0; c < cols; ++c) dx[c] = rstd * (dy[c] * gamma[c] - mg - (x[c] - mean) * rstd * mgx);
}

}  // namespace rill::layer_norm_math
