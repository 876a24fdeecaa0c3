// Boxing: what it costs to turn a tensor from one SBP into another, and the
// pass that inserts boxing nodes into a LogicalGraph wherever a producer's SBP
// differs from what a consumer requires (an op input, a variable's gradient,
// which must arrive in the variable's own SBP, or a split scalar for the sink).
// One boxing node per (tensor, target SBP), shared by every consumer needing
// it. With one device there is never boxing. Pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "compiler/logical_graph.h"

namespace rill::compiler {

// The cost of boxing a tensor of `bytes` logical bytes from `from` to `to` over
// `parallel` devices: the bytes that cross devices (all-gather, all-reduce,
// reduce-scatter, all-to-all) plus the bytes of the piece written, so no
// conversion is free. 0 when the SBPs are equal or parallel is 1.
int64_t boxing_cost(const Sbp& from, const Sbp& to, size_t bytes, int parallel);

// The cost of boxing `from` -> `to`: the sum over boxing_steps (kernels/tensor.h) of each step's
// boxing_cost, a step within nodes counted once per node over its part of the
// tensor, a step across nodes once per lane over a lane's part.
int64_t boxing_cost(const NdSbp& from, const NdSbp& to, size_t bytes, int nodes, int per_node);

// A move between placements carries only split or B pieces: the SBP that
// `sbp` is made on `p` before it leaves (partial sums reduced there: P ->
// S(0) when the first axis has a row per device, else B).
NdSbp settled(const NdSbp& sbp, const TensorMeta& meta, const graph::Placement& p);
// The SBP a move writes on `p` for a target `sbp` (P made from B there, locally).
NdSbp arrived(const NdSbp& sbp, const graph::Placement& p);

// The cost of making a tensor `from` on placement `a` into `to` on placement
// `b`: settling its sums on `a` (boxing_cost), then the bytes of every piece
// written on `b` (each crosses devices), then making P on `b` (local).
int64_t move_cost(const NdSbp& from, const graph::Placement& a, const NdSbp& to, const graph::Placement& b,
                  const TensorMeta& meta);

Status insert_boxing(LogicalGraph* graph);

// What a boxing does among `num_nodes` nodes, as `rill plan` names it:
// "all_reduce" (P -> B), "reduce_scatter" (P -> S), "all_gather" (S -> B),
// "all_to_all" (S -> S), or "local" (B -> S, B -> P, S -> P, and anything on
// one node: copies and sums between the node's own pieces).
const char* boxing_collective(const NdSbp& from, const NdSbp& to, int num_nodes);

// The bytes one node's boxing task sends to other nodes per step, for a
// tensor of `bytes` logical bytes split evenly: ring all-reduce 2 (N-1)/N,
// reduce-scatter and all-gather (N-1)/N, all-to-all (N-1)/N^2 of what the
// collective carries (the whole tensor, or every lane's part of it).
int64_t boxing_bytes_sent(const NdSbp& from, const NdSbp& to, int64_t bytes, int num_nodes, int per_node);

}  // namespace rill::compiler
