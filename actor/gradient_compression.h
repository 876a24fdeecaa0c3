// Gradients sent across nodes in bf16 with error feedback (train.compression
// "bf16"): each step a node rounds its gradient plus what rounding lost the
// step before to bf16, keeps the new loss, and all-reduces the 16-bit
// values: half the bytes on the link. Over steps a node loses nothing of
// its own rounding but the last step's (what it sent tracks the sum of its
// gradients within one bf16 rounding of the latest), so SGD-like updates
// follow the uncompressed ones (Seide et al., 1-bit SGD; Karimireddy et al.,
// error feedback fixes signSGD). The all-reduce adds bf16 values in float
// and rounds each partial sum to bf16 (comm/collectives.h): that rounding,
// once a hop, is not carried. The carried error is a task's memory, not a
// variable: a run resumed from a checkpoint starts it at zero.
#pragma once

#include <span>
#include <vector>

#include "base/half.h"

namespace rill {

class Bf16ErrorFeedback {
 public:
  // wire[i] = bf16(in[i] + carried[i]); carried[i] = what that rounding lost.
  // A non-finite loss (an overflowed step's) is carried as zero.
  explicit Bf16ErrorFeedback(size_t elements = 0) : carried_(elements, 0.0f) {}
  // in, wire and the carried error have the same size (the first call
  // sizes an unsized one, to in.size()).
  void compress(std::span<const float> in, std::span<BFloat16> wire);
  static void widen(std::span<const BFloat16> wire, std::span<float> out);
  std::span<const float> carried() const { return carried_; }

 private:
  std::vector<float> carried_;
};

}  // namespace rill
