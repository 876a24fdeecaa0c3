#include "runtime/cluster/replica_choice.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rill::agent_internal {

namespace {

const std::vector<int64_t>& replica_steps(const std::map<int, KeptSteps>& kept, int buddy, int r) {
  static const std::vector<int64_t> none;
  auto node = kept.find(buddy);
  if (node == kept.end()) return none;
  auto held = node->second.replicas.find(r);
  return held == node->second.replicas.end() ? none : held->second;
}

}  // namespace

ReplicaHolders find_replica_holders(const std::vector<int>& ring, int copies, const std::map<int, KeptSteps>& kept,
                                    const std::function<bool(int)>& holder,
                                    const std::function<bool(int)>& copies_pieces,
                                    const std::function<std::string(int)>& name) {
  ReplicaHolders out;
  auto narrow = [&](const std::set<int64_t>& held) {
    if (!out.steps) out.steps = held;
    else std::erase_if(*out.steps, [&](int64_t s) { return held.count(s) == 0; });
  };
  // A rank's replica is on the next `reach` ranks of the ring, never itself.
  const size_t reach = std::clamp<size_t>(static_cast<size_t>(std::max(copies, 1)), 1,
                                          std::max<size_t>(ring.size(), 2) - 1);
  for (size_t i = 0; i < ring.size(); ++i) {
    const int r = ring[i];
    if (holder(r)) {
      out.own[r].own = copies_pieces(r);
      if (copies_pieces(r)) {
        auto node = kept.find(r);
        narrow(node == kept.end() ? std::set<int64_t>{}
                                  : std::set<int64_t>(node->second.own_replicas.begin(),
                                                      node->second.own_replicas.end()));
      }
      continue;
    }
    out.lost += (out.lost.empty() ? "" : ", ") + name(r);
    if (!copies_pieces(r)) continue;  // it held no piece of its own to copy
    std::vector<std::string> gone;    // its buddies lost too
    std::set<int64_t> held;           // the steps any surviving buddy holds its replica at
    std::vector<int>& buddies = out.buddies[r];
    for (size_t k = 1; k <= reach; ++k) {
      const int buddy = ring[(i + k) % ring.size()];
      if (!holder(buddy)) {
        gone.push_back(name(buddy));
        continue;
      }
      buddies.push_back(buddy);
      for (int64_t s : replica_steps(kept, buddy, r)) held.insert(s);
    }
    if (buddies.empty() && out.problem.empty())
      out.problem = gone.size() == 1
                        ? fmt::format("{} is lost, and so is {}, which held its replica", name(r), gone[0])
                        : fmt::format("{} is lost, and so are {}, which held its replicas", name(r),
                                      fmt::join(gone, " and "));
    narrow(held);
  }
  return out;
}

std::map<int, GatherFrom> gather_at(const ReplicaHolders& holders, const std::map<int, KeptSteps>& kept,
                                    int64_t step) {
  std::map<int, GatherFrom> gather = holders.own;
  for (const auto& [r, buddies] : holders.buddies)
    for (int buddy : buddies) {
      const std::vector<int64_t>& steps = replica_steps(kept, buddy, r);
      if (std::find(steps.begin(), steps.end(), step) == steps.end()) continue;
      gather[buddy].replicas_of.push_back(r);
      break;
    }
  std::erase_if(gather, [](const auto& g) { return !g.second.own && g.second.replicas_of.empty(); });
  return gather;
}

}  // namespace rill::agent_internal
