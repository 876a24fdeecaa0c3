// Autograd (train mode): appends to a LogicalGraph the backward ops that compute
// the gradient of the loss with respect to every trainable variable, and sets
// VariableNode::grad. The seed is ones_like(loss); ops are visited in reverse
// topological order and each OpDef's gradient rule adds ordinary ops through a
// GradBuilder; several contributions to one tensor are summed with `add`. Only
// ops on a path from a trainable variable to the loss take part. Finally drops
// whatever neither the reported scalars nor a gradient needs.
// Pure function of the graph; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

Status build_backward(LogicalGraph* graph);

}  // namespace rill::compiler
