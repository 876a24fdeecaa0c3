// Ring attention, the pass after SBP deduction: an `attention` whose
// queries, keys and values all lie split along the sequence (a ring
// signature, OpDef::ring_sbp) becomes one attention per step of a ring of
// the P devices holding the sequence's pieces. At step r each device reads
// the keys' and values' piece of the device r places back (OpNode::
// ring_steps: the expander wires the reader to that device's regst, and
// the runtime moves it, across nodes too), computes its queries' part of
// the attention over those keys (the causal mask by places in the whole
// sequence; a piece wholly in the queries' future gives nothing), and
// joins it with the steps before by their log-sum-exps (attention_step,
// kernels/ops/attention_ring.cc, reading the last step's result, so steps
// run one after another and no step's part outlives the next). Within a
// node a device reads the other's piece where it lies; across nodes the
// runtime ships it into the reader's mirror slots. A step's read overlaps
// the step before's work (the actors run as their inputs come).
//
// Its gradient, `attention_grad` likewise split, becomes one step per
// place, reading the whole rows' y and lse: each device sums its queries'
// gradient step by step (attention_grad_step), and the keys' and values' gradients
// travel the ring the other way round, each device adding its part to the
// running sum of the piece it read (an `add` reading the sum one place
// back), so that after P steps each sum is back at the device holding the
// piece it belongs to.
//
// The sequence must be cut evenly (each device the same number of places);
// a 2-D placement's other axis splits the batch or the heads as usual.
// Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

Status expand_rings(LogicalGraph* graph);

// The rank of placement `p` whose piece of a tensor of `logical` shape in
// `sbp` is rank `rank`'s moved `steps` places back along `axis` (the same
// region but there, wrapping from the sequence's start to its end): `rank`
// itself where it holds that; among copies (a 2-D placement's B) one on
// the same node, else the first.
// -1 where no rank holds it (an uneven cut).
int ring_source(const Shape& logical, const NdSbp& sbp, const graph::Placement& p, int axis, int rank, int steps);

}  // namespace rill::compiler
