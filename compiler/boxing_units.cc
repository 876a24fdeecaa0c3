#include "compiler/boxing_units.h"

#include <algorithm>
#include <map>
#include <set>

namespace rill::compiler {

std::vector<std::vector<int>> boxing_units(const LogicalGraph& g, size_t bucket_bytes,
                                           const std::function<bool(size_t)>& bucketable,
                                           const std::function<int(const std::string&)>& rate) {
  std::map<std::string, int> made_by;
  for (size_t o = 0; o < g.ops.size(); ++o)
    for (const std::string& out : g.ops[o].outputs) made_by[out] = static_cast<int>(o);
  auto maker = [&](int b) {
    auto it = made_by.find(g.boxings[static_cast<size_t>(b)].tensor);
    return it == made_by.end() ? -1 : it->second;
  };
  std::vector<int> order(g.boxings.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = static_cast<int>(b);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return maker(a) < maker(b); });
  std::vector<int> position(g.boxings.size());
  for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = static_cast<int>(i);
  // The latest position of a boxing each op's result depends on (-1: none).
  std::vector<int> upstream(g.ops.size(), -1);
  for (size_t o = 0; o < g.ops.size(); ++o) {  // topological order
    const OpNode& op = g.ops[o];
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      for (int b = k < op.input_boxing.size() ? op.input_boxing[k] : -1; b >= 0; b = g.boxings[static_cast<size_t>(b)].from)
        upstream[o] = std::max(upstream[o], position[static_cast<size_t>(b)]);
      auto it = made_by.find(op.inputs[k]);
      if (it != made_by.end()) upstream[o] = std::max(upstream[o], upstream[static_cast<size_t>(it->second)]);
    }
  }
  std::vector<std::vector<int>> units;
  size_t bytes_in_bucket = 0;
  int bucket_start = -1;  // position of the open bucket's first member; -1: none open
  std::set<int> started;  // placements whose first bucket is open or closed
  bool first = false;     // the open bucket is its placement's first
  for (size_t i = 0; i < order.size(); ++i) {
    const int b = order[i];
    const BoxingNode& box = g.boxings[static_cast<size_t>(b)];
    const size_t bytes = g.find(box.tensor)->meta.bytes();
    if (!bucketable(static_cast<size_t>(b))) {
      units.push_back({b});
      bucket_start = -1;
      continue;
    }
    const int m = maker(b);
    const bool depends = m >= 0 && upstream[static_cast<size_t>(m)] >= bucket_start;
    if (bucket_start < 0 || depends || bytes_in_bucket + bytes > bucket_bytes ||
        g.boxings[static_cast<size_t>(units.back()[0])].placement != box.placement ||
        rate(g.boxings[static_cast<size_t>(units.back()[0])].tensor) != rate(box.tensor)) {
      units.push_back({});
      bytes_in_bucket = 0;
      bucket_start = static_cast<int>(i);
      first = started.insert(box.placement).second;
    }
    units.back().push_back(b);
    bytes_in_bucket += bytes;
    if (first && bytes_in_bucket >= kFirstBucketBytes) bucket_start = -1;  // the first bucket is full
  }
  return units;
}

}  // namespace rill::compiler
