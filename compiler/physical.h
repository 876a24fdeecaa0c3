// Physical expansion: turns a LogicalGraph (after SBP deduction and boxing
// insertion) into a TaskGraph with one task per (op, rank) and the regsts
// between them. Task order, and so every actor id, is fixed: sources (per used
// dataset, per rank), variables (per variable, per rank), compute (per op, per
// rank), boxing, then the sink (node 0's io thread). Each task output is one
// regst, in task order. Boxing on one node: one task per boxing node over every
// piece, on node 0's comm thread 0. Across nodes: one task per boxing node and
// node over the node's own pieces, on comm thread b (the boxing's ordinal) of
// each node, peers and collective tag (b + 1) set; only P -> B, S -> B and
// B -> S are supported there. Regsts still cross nodes afterwards (the sink's
// inputs); transfers.h turns those into Send/Recv pairs.
// Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"
#include "compiler/task_graph.h"

namespace rill::compiler {

StatusOr<TaskGraph> expand(const LogicalGraph& graph);

}  // namespace rill::compiler
