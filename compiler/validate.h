// Validation, the compiler's first pass: runs graph::check_job, checks the job
// against the cluster and builds its forward LogicalGraph for one mode. It
// resolves every tensor name (ops come in definition order, a topological
// order), infers shapes (inputs are batched on axis 0 with the mode's global
// batch), picks the datasets the mode reads and drops what neither the loss
// nor a metric needs. Errors name the job item.
// Pure function; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

StatusOr<LogicalGraph> build_logical_graph(const graph::Job& job, const Cluster& cluster, Mode mode);

}  // namespace rill::compiler
