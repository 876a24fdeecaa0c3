// Two attentions of the same queries over two sets of keys, joined into the
// attention over both: for the CPU and CUDA kernels of ring attention's
// steps alike (attention_ring.cc, attention_ring.cu). With each part's (y, lse) of a
// row, m = max(lse_a, lse_b), w = exp(lse - m): y = (w_a y_a + w_b y_b) /
// (w_a + w_b) and lse = m + log(w_a + w_b). A part that saw no key has lse
// -inf and weighs nothing; a row neither part saw stays y = 0, lse = -inf.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define RILL_MERGE_HD __host__ __device__
#else
#define RILL_MERGE_HD
#endif

namespace rill::attention_merge {

// Row of d values: into y (which may be ya or yb: each value is read
// before it is written), its lse returned.
RILL_MERGE_HD inline float merge_row(const float* ya, float la, const float* yb, float lb, float* y, int64_t d) {
  const float m = la > lb ? la : lb;
  if (m == -INFINITY) {
    for (int64_t c = 0; c < d; ++c) y[c] = 0.0f;
    return -INFINITY;
  }
  const float wa = expf(la - m), wb = expf(lb - m);
  const float sum = wa + wb, inv = 1.0f / sum;
  for (int64_t c = 0; c < d; ++c) y[c] = (wa * ya[c] + wb * yb[c]) * inv;
  return m + logf(sum);
}

}  // namespace rill::attention_merge
