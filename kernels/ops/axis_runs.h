// The axes of a reduction (reduce_sum, reduce_mean, broadcast_like) as runs
// of merged axes, shared by the CPU and CUDA kernels. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attrs.h"
#include "kernels/tensor.h"

namespace rill::math {

inline constexpr int kMaxRank = 16;

// The big (unreduced) tensor's axes merged into runs that are all reduced or
// all kept; size-1 axes are dropped. Built without allocating.
struct AxisRuns {
  int count = 0;
  int64_t size[kMaxRank];
  bool reduced[kMaxRank];
  int64_t small_stride[kMaxRank];  // stride in the reduced tensor; 0 for reduced runs
};

AxisRuns axis_runs(const Shape& big, std::span<const int64_t> axes);

// Elements of `logical` reduced over `axes` (empty: all; a mean divides by it).
int64_t logical_count(const Shape& logical, std::span<const int64_t> axes);

}  // namespace rill::math
