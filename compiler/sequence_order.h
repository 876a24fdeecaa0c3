// Where a sequence's order goes through a graph: given the tensors a job
// marks as holding the sequence's places (graph/job.h `sequence_axis`),
// which tensors would hold the sequence in another order if those did,
// and along which axis, following the forward ops; or why the order must
// stay: an op that is not known to work place by place reads one of them,
// an op mixes one with a tensor of the natural order along the sequence
// (tokens marked, targets not), an embedding's table is marked, a causal
// attention reads a sequence in the natural order, a causal softmax (the
// composed attention) reads places, or a fetched tensor would come back
// reordered. compiler/ring_balance.h reorders only where this finds no
// reason. Pure.
#pragma once

#include <map>
#include <string>

#include "compiler/logical_graph.h"

namespace rill::compiler {

struct SequenceOrder {
  std::map<std::string, int> axis;  // each reordered tensor's sequence axis
  std::string refused;              // why the order must stay ("": it may change)
};

// `marked`: tensor -> its sequence axis, each of `length` places; `fetched`:
// tensors the job's result carries whole.
SequenceOrder follow_sequence_order(const LogicalGraph& g, const std::map<std::string, int>& marked, int64_t length,
                                    const std::vector<std::string>& fetched);

}  // namespace rill::compiler
