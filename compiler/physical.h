// Physical expansion: turns a LogicalGraph (after SBP deduction and boxing
// insertion) into a TaskGraph with one task per (op, rank) and the regsts
// between them. Task order, and so every actor id, is fixed: sources (per used
// dataset, per rank), variables (per variable, per rank), compute (per op, per
// rank), boxing (one per boxing node, on node 0's comm thread), then the sink
// (node 0's io thread). Each task output is one regst, in task order.
// Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"
#include "compiler/task_graph.h"

namespace rill::compiler {

StatusOr<TaskGraph> expand(const LogicalGraph& graph);

}  // namespace rill::compiler
