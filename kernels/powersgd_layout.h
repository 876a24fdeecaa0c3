// Where PowerSGD (train.compression "powersgd"; actor/powersgd.h) keeps each
// gradient of an all-reduce's buffer: which tensors cross as two low-rank
// factors and which as they are, and the sizes of the two buffers it
// all-reduces. The boxing plan sizes its collectives' scratch by it
// (kernels/boxing_plan.h) and the actor runs by it, so both agree. Pure.
//
// A tensor [n, d1, d2, ...] is the matrix [n, d1 * d2 * ...]. It crosses as
// factors P [n, r] and Q [m, r] when they are under half its elements
// (r (n + m) * 2 < n m, PyTorch's min_compression_rate of 2); a bias, a
// small or a thin matrix crosses whole, beside the P factors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace rill {

inline constexpr int64_t kMaxCompressionRank = 64;

struct PowerSgdLayout {
  struct Member {
    size_t offset = 0;      // elements into the all-reduce's buffer
    size_t rows = 0, cols = 0;
    bool low_rank = false;  // crosses as P and Q
    size_t p = 0, q = 0;    // low_rank: elements into the first and second buffer; else: into the first
    size_t error = 0;       // low_rank: elements into the carried error
  };
  std::vector<Member> members;
  int rank = 1;
  size_t first = 0;   // elements of the first all-reduce: every P, then every whole tensor
  size_t second = 0;  // elements of the second: every Q
  size_t error = 0;   // elements of the error carried (the low-rank members')
  size_t elements = 0;  // of the buffer
};

// `tensors`: the shapes in the buffer, one after another.
PowerSgdLayout powersgd_layout(const std::vector<Shape>& tensors, int rank);

}  // namespace rill
