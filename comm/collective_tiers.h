// Collectives::Tiers: the two groups a rank's all_reduce runs in when its
// ranks are on several machines alike (CollectiveOptions::machines): the
// ranks of its machine, and its lane (the ranks of its index on every
// machine), each a Collectives over a GroupTransport of the same transport.
// Internal to comm/ (collectives.cc owns it, collective_tiers.cc runs it).
#pragma once

#include <utility>
#include <vector>

#include "comm/collectives.h"
#include "comm/group_transport.h"

namespace rill::comm {

struct Collectives::Tiers {
  Tiers(Transport& transport, std::vector<int> machine_ranks, std::vector<int> lane_ranks,
        const CollectiveOptions& options, int index)
      : machine_transport(transport, std::move(machine_ranks)),
        lane_transport(transport, std::move(lane_ranks)),
        machine(machine_transport, within(options)),
        lane(lane_transport, within(options)),
        index(index) {}

  // The groups' calls are steps of one call of the outer object, which
  // records it and its deadline.
  static CollectiveOptions within(CollectiveOptions options) {
    options.machines.clear();
    options.record = nullptr;
    return options;
  }

  GroupTransport machine_transport, lane_transport;
  Collectives machine, lane;
  int index;  // this rank's place among its machine's ranks (its lane)
  std::vector<size_t> counts;  // the all-gather's bytes from each rank of the machine (kept: calls allocate nothing)
};

}  // namespace rill::comm
