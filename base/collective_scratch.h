// The scratch one collective call needs on a rank besides its input and
// output: the rule comm/collectives.h keeps when a caller gives it scratch
// (Collectives::use_scratch), and by which the memory plan reserves that
// scratch for a boxing task's exchange (kernels/boxing_plan.h). It lives
// here, below both, so the two cannot disagree. Pure; any thread.
//
// That scratch holds the partial sums a reduce-scatter or a reduce (not at
// its root) keeps for the blocks it passes on: the whole input's size (they
// are sent without a copy, so each stays until the call ends); for a direct
// all-reduce in place, its input, which it sends while the output changes;
// for recursive doubling, a partner's partial sum taken out of the
// transport's buffer to be combined in rank order. The other collectives
// need none.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rill {

enum class CollectiveCall : uint8_t { kAllReduce, kReduceScatter, kReduce, kAllGather, kAllToAll, kOther };

// "all_reduce", "reduce_scatter", ... (a plan's device collectives name theirs).
constexpr const char* collective_call_name(CollectiveCall call) {
  switch (call) {
    case CollectiveCall::kAllReduce: return "all_reduce";
    case CollectiveCall::kReduceScatter: return "reduce_scatter";
    case CollectiveCall::kReduce: return "reduce";
    case CollectiveCall::kAllGather: return "all_gather";
    case CollectiveCall::kAllToAll: return "all_to_all";
    case CollectiveCall::kOther: return "other";
  }
  return "?";
}

// comm::CollectiveOptions::direct_bytes by default: an all-reduce of at
// most this many bytes among several ranks is one direct exchange (every
// rank sends every other its input), not the ring.
inline constexpr size_t kCollectiveDirectBytes = size_t{64} << 10;
// Among more ranks than this a small all-reduce is recursive doubling
// (log2 of the world in rounds, one message each) instead: the direct
// exchange's world - 1 messages per rank, and world squared in all, would
// grow with the cluster.
inline constexpr int kCollectiveDirectMaxRanks = 8;

constexpr size_t collective_scratch_bytes(CollectiveCall call, size_t in_bytes, bool in_place, int world,
                                          size_t direct_bytes = kCollectiveDirectBytes) {
  if (world <= 1) return 0;
  switch (call) {
    case CollectiveCall::kAllReduce:
      return in_bytes <= direct_bytes && (in_place || world > kCollectiveDirectMaxRanks) ? in_bytes : 0;
    case CollectiveCall::kReduceScatter:
    case CollectiveCall::kReduce: return in_bytes;
    case CollectiveCall::kAllGather:
    case CollectiveCall::kAllToAll:
    case CollectiveCall::kOther: return 0;
  }
  return 0;
}

}  // namespace rill
