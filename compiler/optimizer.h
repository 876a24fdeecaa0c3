// Optimizer pass (train mode): gives every variable that has a gradient its
// update op (sgd_update, momentum_update or adam_update from job.optimizer.type),
// the update attrs (lr, momentum, beta1, beta2, epsilon, weight_decay) and the
// number of optimizer state tensors the op keeps. With train.micro_batches
// K > 1, each gradient first goes through an accumulate op (the mean of the
// step's K micro-batch gradients), which the update reads instead.
// Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

Status attach_optimizer(const graph::Optimizer& optimizer, LogicalGraph* graph);

// Sets LogicalTensor::per_micro when the graph runs micro-batches: inputs and
// what is computed from them, up to each gradient's accumulate op.
void mark_per_micro(LogicalGraph* graph);

}  // namespace rill::compiler
