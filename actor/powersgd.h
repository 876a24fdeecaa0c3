// PowerSGD (Vogels, Karimireddy, Jaggi, 2019; train.compression
// "powersgd"): each gradient matrix M [n, m] of a node crosses as two
// factors of rank r, P [n, r] and Q [m, r], instead of its n m values, with
// the error carried into the next step as the bf16 path's.
//
// A step, for the tensors of one all-reduce's buffer (kernels/
// powersgd_layout.h says which are low rank):
//   M += E                        this node's gradient and what it carried
//   P = M Q                       Q from the step before (warm start)
//   all-reduce the P's, and beside them the tensors that cross whole
//   P = orthonormal columns of P  Gram-Schmidt (dependent ones zero, and
//                                 their Q column drawn again for the next step)
//   Q = M^T P, all-reduced        so Q = (sum of the nodes' M)^T P
//   out = P Q^T                   the sum projected on P's columns
//   E = M - out / world           what this node's share missed
// Two all-reduces of (n + m) r values instead of one of n m.
//
// Every node computes the output from the same all-reduced P and Q with the
// same loops (no BLAS: its kernels may differ between machines), so the
// replicas keep the same bits. Q starts from values every node draws alike
// from the boxing's tag. A tensor whose factors overflowed (inf, NaN; loss
// scaling skips the step) gives a non-finite output and carries nothing of
// it on: its error and Q start again. The others of that step keep theirs;
// under dynamic loss scaling the error is in the scaled gradient's units,
// so a change of scale weighs what was carried wrongly once (as PyTorch's
// hook under GradScaler). The error and Q are a task's memory, not
// variables; they go into checkpoints beside the variables (runtime/node/
// carried_state.h: each node's error, and Q once), so a resumed run goes
// on as the straight run did. Steps
// before the plan's start step (train.compression_start_step) do not come
// here: they all-reduce plain (actor/boxing_body.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "comm/collectives.h"
#include "kernels/powersgd_layout.h"

namespace rill {

class PowerSgdAllReduce {
 public:
  // `seed`: equal on every node for one boxing (its collective tag).
  PowerSgdAllReduce(PowerSgdLayout layout, int world, uint64_t seed);
  // buffer: layout.elements values, this node's gradients in, every node's
  // sum (or average) out, the same bits on every node. kSum or kAverage.
  Status run(comm::Collectives& collectives, std::span<float> buffer, uint64_t tag, comm::ReduceOp op);
  std::span<const float> carried() const { return error_; }
  // The Q factors the next step starts from: the same on every node.
  std::span<const float> q() const { return second_; }
  // Goes on from a checkpoint's error and Q, after `compressed_steps` steps
  // ran here compressed (the later draws of Q's columns depend on it).
  // Invalid argument, and nothing changed, when their sizes are not
  // carried()'s and q()'s.
  Status restore(std::span<const float> error, std::span<const float> q, uint64_t compressed_steps);
  const PowerSgdLayout& layout() const { return layout_; }

 private:
  void start_q(const PowerSgdLayout::Member& m);
  void draw_q(const PowerSgdLayout::Member& m, size_t column, uint64_t draw);

  PowerSgdLayout layout_;
  int world_;
  uint64_t seed_;
  std::vector<float> first_;   // the P factors, then the tensors that cross whole
  std::vector<float> second_;  // the Q factors
  std::vector<float> error_;   // the low-rank tensors' carried error
  std::vector<double> orthonormal_;  // Gram-Schmidt's work
  std::vector<bool> dropped_;        // [member][column]: zero after Gram-Schmidt this step
  uint64_t steps_ = 0;
};

}  // namespace rill
