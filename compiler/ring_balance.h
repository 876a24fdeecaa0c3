// Ring attention's causal work, balanced: in the natural order of a
// sequence split over P devices, device k's queries see the keys of k + 1
// pieces, so the last device works P times as long as the first at each
// layer. In the zigzag order (kernels/ops/zigzag_math.h: 2P chunks, device
// k holding chunk k and chunk 2P-1-k, as Megatron's and torchtitan's
// context parallelism) every device does the same work at every step of
// the ring.
//
// A job says which of its tensors hold places of the sequence
// (`sequence_axis` of an input or variable: tokens and targets on axis 1,
// a position table on axis 0), as torchtitan's context_parallel takes its
// buffers and their sequence dims. Where SBP deduction makes causal
// attentions rings of P devices, the compiler compiles the job again with
// each of those tensors read through a `zigzag` op of P parts (its
// gradient the inverse) and every causal attention told the order (attr
// `zigzag`): every op in between computes place by place, so the model is
// the one the job describes; only the sequence's order on the devices
// changes. A loss averaged over places is the same sum in another order.
//
// The order stays natural (rings unbalanced, and correct), and the plan
// says why, where the job marks no tensor, where the rings differ in size
// or sequence, where the sequence is not a multiple of 2P places, where a
// ring runs on a GPU (its kernels do not cut a piece in two chunks yet),
// or where following the marked tensors through the forward ops
// (compiler/sequence_order.h) finds an op that is not known to work place
// by place, a mix of the two orders, or a fetched tensor that would come
// back reordered. Eager generation (runtime/eager/generate.h) runs the job
// as written. Pure.
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/logical_graph.h"
#include "graph/job.h"

namespace rill::compiler {

// Whether the rings of `deduced` (the graph of `job` after SBP deduction)
// are balanced: the parts of the zigzag order that do it, or 1 and why
// the sequence keeps its natural order ("" where no causal attention
// rings). An error names a marked tensor whose axis is not the rings'
// sequence.
struct RingBalance {
  int parts = 1;
  std::string natural_because;
  int64_t length = 0;  // the rings' sequence (causal_rings)
};
StatusOr<RingBalance> ring_balance(const graph::Job& job, const LogicalGraph& deduced);
// The rings alone: their places (1 with why they cannot be balanced: on
// GPUs, of two sizes, a sequence not of 2P equal chunks; 1 and "": none).
RingBalance causal_rings(const LogicalGraph& deduced);

// `job` with each input and variable it marks read through a `zigzag` op
// of `parts` along its sequence axis (named "<tensor>.zigzag", on the
// tensor's placement and in its group), and every causal attention's attr
// `zigzag` set to `parts`.
StatusOr<graph::Job> in_zigzag_order(const graph::Job& job, int parts);

}  // namespace rill::compiler
