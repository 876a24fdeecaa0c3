#include "compiler/checkpoint_writers.h"

#include <limits>

#include "kernels/tensor.h"

namespace rill::compiler {

std::vector<bool> CheckpointWriters::writers(const VariableNode& v, const graph::Placement& p) {
  const int ranks = p.parallel();
  std::vector<Region> regions;
  for (int rank = 0; rank < ranks; ++rank)
    regions.push_back(piece_region(v.variable.shape, v.sbp, p.num_nodes(), p.per_node(), rank));
  std::vector<bool> out(static_cast<size_t>(ranks), false);
  std::vector<bool> decided(static_cast<size_t>(ranks), false);
  for (int rank = 0; rank < ranks; ++rank) {
    if (decided[static_cast<size_t>(rank)]) continue;
    // Every rank holding this piece; the writer is the first of them on the
    // least loaded node (ties: the lowest node).
    int best = -1;
    int64_t least = std::numeric_limits<int64_t>::max();
    for (int other = rank; other < ranks; ++other) {
      if (decided[static_cast<size_t>(other)] || regions[static_cast<size_t>(other)] != regions[static_cast<size_t>(rank)])
        continue;
      decided[static_cast<size_t>(other)] = true;
      const int64_t load = bytes_[p.node_of(other)];
      if (load < least) least = load, best = other;
    }
    out[static_cast<size_t>(best)] = true;
    bytes_[p.node_of(best)] += regions[static_cast<size_t>(rank)].size();
  }
  return out;
}

}  // namespace rill::compiler
