// BoxingPlan: what one boxing task does, worked out once from SBPs and
// shapes alone: the copies and sums before its one exchange among nodes,
// the exchange (its kind, buffers and per-node counts), the copies after,
// and the scratch it needs. actor/ runs it (BoxingBody); the compiler's
// memory plan sizes every boxing task's scratch by it, so both agree.
// Conversions between SBPs (kernels/tensor.h: boxing_form), buckets of
// gradients, and moves between placements; what each covers is said at
// BoxingBody (actor/body.h). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/collective_scratch.h"
#include "kernels/tensor.h"

namespace rill {

struct BoxingPlan {
  // A buffer an act reads or writes: an input or output slot, or scratch.
  struct Ref {
    enum Kind : uint8_t { kInput, kOutput, kSend, kRecv } kind = kInput;
    int index = 0;      // slot index (inputs, outputs)
    size_t offset = 0;  // bytes into the scratch
    bool operator==(const Ref&) const = default;
  };
  // copy or add `box` from src (covering src_region) into dst; sum: dst =
  // src + src2 (both covering src_region); zero: fill dst.
  struct Step {
    enum Op : uint8_t { kCopy, kAdd, kSum, kZero } op = kCopy;
    Ref src, src2, dst;
    Region src_region, dst_region, box;
  };
  enum class Exchange : uint8_t { kNone, kAllReduce, kAllGather, kAllToAll, kReduceScatter };

  NdSbp in, out;
  int parallel = 1;
  TensorMeta logical;
  size_t element = 4;  // bytes of an element
  int first_rank = 0, local = 1, nodes = 1, outputs = 1;
  int piece = -1;      // the one output piece this task makes, or -1: all
  bool chain = false;  // no one task converts in to out: its act fails
  std::vector<Step> before, after;  // around the exchange
  Exchange exchange = Exchange::kNone;
  Ref exchange_in, exchange_out;
  size_t exchange_in_bytes = 0, exchange_out_bytes = 0;
  std::vector<size_t> send_counts, recv_counts;  // bytes per node (reduce-scatter: recv_counts in elements)
  size_t send_bytes = 0, recv_bytes = 0;         // the scratch: send buffer, then receive buffer
  // An f32 all-reduce across nodes of gradients sent compressed with error
  // feedback (plan.fbs BoxingConf.compress): kBf16 as bf16
  // (actor/gradient_compression.h), kPowerSgd as low-rank factors of
  // compress_rank (actor/powersgd.h) of the `tensors` one after another in
  // the exchange's buffer.
  enum class Compress : uint8_t { kNone, kBf16, kPowerSgd };
  Compress compress = Compress::kNone;
  int compress_rank = 0;
  int64_t compress_start = 0;  // steps before this one all-reduce uncompressed
  // PowerSGD's draws of Q: equal on every node for one boxing and the same
  // in every run of the plan (its collective_tag), so a run resumed from a
  // checkpoint draws what the straight run drew.
  uint64_t compress_seed = 0;
  std::vector<Shape> tensors;

  int node_of(int rank) const { return rank / local; }
  // The exchange's collective and the scratch it needs in collectives of
  // that direct size (base/collective_scratch.h; the plan sizes it at the
  // default), which the task's scratch holds after the two buffers, at
  // exchange_offset().
  CollectiveCall exchange_call() const;
  size_t exchange_scratch_bytes(size_t direct_bytes = kCollectiveDirectBytes) const;
  size_t exchange_offset() const { return (send_bytes + recv_bytes + 63) / 64 * 64; }
  size_t scratch_bytes() const {
    const size_t collective = exchange_scratch_bytes();
    return collective == 0 ? send_bytes + recv_bytes : exchange_offset() + collective;
  }
};

// A conversion from `in` to `out` of a `logical` tensor of `parallel`
// pieces, this node's `local_pieces` from global rank `first_rank`; `piece`
// >= 0: only that output piece (a conversion within each node to S or P).
BoxingPlan plan_boxing(NdSbp in, NdSbp out, int parallel, TensorMeta logical, int first_rank, int local_pieces,
                       int piece = -1);
// A bucket: P -> B across nodes of several f32 tensors at once.
BoxingPlan plan_boxing_bucket(const std::vector<TensorMeta>& bucket, int parallel, int first_rank, int local_pieces);
// A move between placements: output 0 holds `output` of the logical
// tensor, from the parts of the inputs (holding `inputs`) inside it; `sum`:
// the inputs are partial sums, added up where they overlap.
BoxingPlan plan_boxing_move(TensorMeta logical, const std::vector<Region>& inputs, const Region& output, bool sum);

}  // namespace rill
