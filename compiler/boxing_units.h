// The order in which a plan's boxings run on the comm threads, and which of
// them share one collective (gradient buckets, as DDP's): compiler/physical.cc
// chains each comm thread's units in this order on every node.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "compiler/logical_graph.h"

namespace rill::compiler {

// Units of boxings, in the order they can become ready: by the position of
// the op making their tensor (ops are in topological order), sources and
// variables first. Consecutive boxings that `bucketable` accepts share a unit
// while they are on one placement, at one rate (`rate` of their tensor), at
// most `bucket_bytes` together, and none depends on another's result (a
// bucket waits for all its members, so a member made from another's result
// would wait for itself). The first bucket of each placement closes once
// it holds kFirstBucketBytes (as DDP's first bucket): the gradients the
// backward makes first start across the link while it makes the rest.
inline constexpr size_t kFirstBucketBytes = size_t{1} << 20;
std::vector<std::vector<int>> boxing_units(const LogicalGraph& g, size_t bucket_bytes,
                                           const std::function<bool(size_t)>& bucketable,
                                           const std::function<int(const std::string&)>& rate);

}  // namespace rill::compiler
