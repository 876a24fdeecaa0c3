// SBP deduction: picks an SBP signature for every op of a LogicalGraph, in
// topological order. Inputs are S(0) unless hinted B, variables B unless hinted
// S(axis) (set by validation). For each op, among the signatures its OpDef
// offers for the logical input metas (all-B when it offers none) and that
// agree with the op's output hints, the one with the least boxing cost
// (boxing.h) wins; ties go to the first listed. Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

Status deduce_sbp(LogicalGraph* graph);

}  // namespace rill::compiler
