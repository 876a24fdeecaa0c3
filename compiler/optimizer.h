// Optimizer pass (train mode): gives every variable that has a gradient its
// update op (sgd_update, momentum_update or adam_update from job.optimizer.type),
// the update attrs (lr, momentum, beta1, beta2, epsilon, weight_decay) and the
// number of optimizer state tensors the op keeps. Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

Status attach_optimizer(const graph::Optimizer& optimizer, LogicalGraph* graph);

}  // namespace rill::compiler
