// Gradients sent across nodes in bf16 with error feedback (train.compression
// "bf16"): each step a node rounds its gradient plus what rounding lost the
// step before to bf16, keeps the new loss, and all-reduces the 16-bit
// values: half the bytes on the link. Over steps a node loses nothing of
// its own rounding but the last step's (what it sent tracks the sum of its
// gradients within one bf16 rounding of the latest), so SGD-like updates
// follow the uncompressed ones (Seide et al., 1-bit SGD; Karimireddy et al.,
// error feedback fixes signSGD).
//
// The sum is rounded once: each node's block of it is added in float from
// every node's 16-bit values (an all-to-all, the reduce-scatter's bytes),
// rounded to bf16 and all-gathered. A ring's reduce-scatter would round
// each partial sum, world - 1 times. That one rounding of the sum is not
// carried. The carried error is a task's memory, not a variable; each
// node's goes into checkpoints beside the variables (runtime/node/
// carried_state.h), so a resumed run goes on as the straight run did.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/half.h"
#include "base/status.h"
#include "comm/collectives.h"

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
  // Goes on from `carried` (a checkpoint's). False, and nothing changed,
  // when it holds another number of values than carried() does.
  bool restore(std::span<const float> carried);

 private:
  std::vector<float> carried_;
};

// The all-reduce of `elements` f32 values among `world` ranks with bf16 on
// the wire (above). Its buffers are sized when made: run allocates nothing.
class Bf16AllReduce {
 public:
  Bf16AllReduce(size_t elements, int world);
  // out = the sum (or average) over ranks of in, the same bits on every
  // rank: each rank's bf16(in + carried), added in float in rank order,
  // divided by the world for the average, rounded to bf16 once. `in` and
  // `out` hold `elements` values and may be the same span. Only kSum and
  // kAverage.
  Status run(comm::Collectives& collectives, std::span<const float> in, std::span<float> out, uint64_t tag,
             comm::ReduceOp op);
  const Bf16ErrorFeedback& feedback() const { return feedback_; }
  bool restore(std::span<const float> carried) { return feedback_.restore(carried); }

 private:
  Bf16ErrorFeedback feedback_;
  std::vector<BFloat16> wire_;      // this rank's rounded values, then the rounded sum
  std::vector<BFloat16> received_;  // every rank's values of this rank's block, in rank order
  std::vector<size_t> block_counts_;  // bytes of each rank's block: what goes to it, and the all-gather's
  std::vector<size_t> recv_counts_;   // bytes from each rank: this rank's block
  int world_;
};

}  // namespace rill
