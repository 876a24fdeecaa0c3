// Optimizer pass (train mode): gives every variable that has a gradient its
// update op (sgd_update, momentum_update or adam_update from job.optimizer.type),
// the update attrs (lr, momentum, beta1, beta2, epsilon, weight_decay) and the
// number of optimizer state tensors the op keeps. With train.micro_batches
// K > 1, each gradient is first averaged over the step's K micro-batches: by
// the matmul that makes it (its micro_batches attr) when nothing else reads
// it, else by an accumulate op; the update reads the average.
// Pure; any thread.
#pragma once

#include "compiler/logical_graph.h"

namespace rill::compiler {

Status attach_optimizer(const graph::Optimizer& optimizer, LogicalGraph* graph);

// The update op an optimizer type runs on each trained variable ("adam" and
// "adamw": "adam_update"); null for an unknown type.
const char* update_op_of(const std::string& optimizer_type);

// Whether `op` sums its micro-batches into one output a step (it carries a
// micro_batches attr: an accumulate op or a weight-gradient matmul).
bool accumulates(const OpNode& op);

// Sets LogicalTensor::per_micro when the graph runs micro-batches: inputs and
// what is computed from them, up to the ops that accumulate gradients.
void mark_per_micro(LogicalGraph* graph);

// Pipeline stages, from placements (after mark_per_micro): data is stage 0;
// a forward op is at the latest stage of its per-micro-batch inputs, one
// later for an input made on another placement. So stages count the moves
// between placements along the forward pass: the placements of a pipeline
// in order, whether or not the job calls them stages. Sets each forward
// per-micro tensor's stage and the graph's number of stages.
void mark_stages(LogicalGraph* graph);
// Marks the tensors made, through ops, from a trained variable's model
// (LogicalTensor::after_updates), and those models.
void mark_after_updates(LogicalGraph* graph);

}  // namespace rill::compiler
