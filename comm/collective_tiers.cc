// The all-reduce among ranks on several machines, within each machine
// first (CollectiveOptions::machines): with m machines of l ranks each, a
// ring among all m l ranks sends every tensor 2 (m l - 1) / (m l) times
// around, across each machine boundary it passes; here each rank's block
// (1/l of the tensor) crosses machines 2 (m - 1) / m times in a ring of
// its lane, the lanes side by side, and the rest stays within machines
// (shared memory for a launched program's ranks). Each machine so sends
// about (m l - 1) / (l (m - 1)) times fewer bytes across than the flat
// ring's boundary ranks, in 2 (m - 1) steps instead of 2 (m l - 1).
#include "comm/collective_tiers.h"

#include <algorithm>
#include <map>

namespace rill::comm {

Collectives::Tiers* Collectives::tiers() {
  if (tiers_checked_) return tiers_.get();
  tiers_checked_ = true;
  const std::vector<int>& machines = options_.machines;
  if (machines.size() != static_cast<size_t>(world())) return nullptr;
  std::map<int, std::vector<int>> ranks;  // by machine, in rank order
  for (int r = 0; r < world(); ++r) ranks[machines[static_cast<size_t>(r)]].push_back(r);
  const size_t per = ranks.begin()->second.size();
  if (ranks.size() < 2 || per < 2 ||
      std::any_of(ranks.begin(), ranks.end(), [per](const auto& m) { return m.second.size() != per; }))
    return nullptr;
  const std::vector<int>& mine = ranks[machines[static_cast<size_t>(rank())]];
  const int index = static_cast<int>(std::find(mine.begin(), mine.end(), rank()) - mine.begin());
  std::vector<int> lane;  // the ranks of this index, machine by machine (in the order of their first rank)
  for (const auto& [machine, members] : ranks) lane.push_back(members[static_cast<size_t>(index)]);
  std::sort(lane.begin(), lane.end());
  tiers_ = std::make_unique<Tiers>(transport_, mine, std::move(lane), options_, index);
  return tiers_.get();
}

// Reduce-scatter within the machine (block `index` here), all-reduce of the
// block along the lane, all-gather within the machine. Every rank of a lane
// gets its block's same bits (the lane's all-reduce), and each machine
// gathers the same blocks, so every rank holds the same bits. An average
// is summed here and divided once, by the whole world, by the caller.
template <typename T>
Status Collectives::all_reduce_tiered(std::span<const T> in, std::span<T> out, uint64_t tag, ReduceOp op) {
  Tiers& t = *tiers_;
  // The steps end by this call's deadline, moved on where a step waited on
  // while its liveness changed (patiently).
  t.machine.outer_deadline_ = t.lane.outer_deadline_ = deadline_;
  auto after = [&](Collectives& step) {
    deadline_ = std::max(deadline_, step.deadline_);
    t.machine.outer_deadline_ = t.lane.outer_deadline_ = deadline_;
  };
  const ReduceOp combine = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  const int per = t.machine.world();
  const BlockRange mine = block_range(in.size(), per, t.index);
  RILL_ASSIGN_OR_RETURN(T * block, work<T>(mine.size, "all_reduce", tag));
  const std::span<T> part(block, mine.size);
  RILL_RETURN_IF_ERROR(t.machine.reduce_scatter(in, part, tag, combine));
  after(t.machine);
  RILL_RETURN_IF_ERROR(t.lane.all_reduce(std::span<const T>(part), part, tag, combine));
  after(t.lane);
  t.counts.resize(static_cast<size_t>(per));
  for (int j = 0; j < per; ++j) t.counts[static_cast<size_t>(j)] = block_range(in.size(), per, j).size * sizeof(T);
  return t.machine.all_gather_v(std::as_bytes(part), std::as_writable_bytes(out), t.counts, tag);
}

template Status Collectives::all_reduce_tiered(std::span<const float>, std::span<float>, uint64_t, ReduceOp);
template Status Collectives::all_reduce_tiered(std::span<const int32_t>, std::span<int32_t>, uint64_t, ReduceOp);
template Status Collectives::all_reduce_tiered(std::span<const BFloat16>, std::span<BFloat16>, uint64_t, ReduceOp);
template Status Collectives::all_reduce_tiered(std::span<const Float16>, std::span<Float16>, uint64_t, ReduceOp);

}  // namespace rill::comm
