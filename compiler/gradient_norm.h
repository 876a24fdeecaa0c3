// The global gradient norm and what reads it, a compile pass after the
// optimizer's (compiler/optimizer.cc): gradient clipping and dynamic loss
// scaling. Each trained variable's gradient is first summed across devices
// into the SBP its variable has (an identity hinted so: the all-reduce
// buckets as without this pass), and its sum of squares made there (split
// gradients give partial sums); each placement adds its sums up and
// reduces that one scalar (a hint B: one all-reduce of 4 bytes per
// placement), and the placements' totals meet in one scalar.
//
// Clipping (optimizer.clip_grad_norm): every gradient is multiplied by
// min(1, max_norm / (norm + 1e-6)), norm the L2 norm of all gradients
// together, as torch.nn.utils.clip_grad_norm_.
//
// Loss scaling (train.precision "f16" or train.loss_scale), as PyTorch's
// GradScaler: the loss's gradient starts at the scale (autograd reads it
// from an f32 [3] state variable, `loss_scale_state`, by a loss_scale op),
// so every gradient is scaled; a loss_scale_check op on the total gives
// 1 / scale, by which every gradient is multiplied (exact: a power of
// two), and the step's gate, which each update reads as a third input: 0
// when the total is not finite (some gradient overflowed: every update
// skips the step), else the update's number (Adam's t). The state's own
// update (loss_scale_update, its gradient the total) halves the scale on
// an overflow, doubles it after train.loss_scale_window good steps, and
// stops the job when it would fall below 1. The scale and the steps
// skipped so far are reported as the metrics `loss_scale` and
// `skipped_steps`. With clipping too, the norm is the unscaled one.
#pragma once

#include <optional>

#include "base/status.h"
#include "compiler/logical_graph.h"
#include "graph/job.h"

namespace rill::compiler {

// The first loss scale: train.loss_scale, or 65536 (PyTorch's GradScaler's).
double first_loss_scale(const graph::TrainConfig& train);

// The state variable of loss scaling (`loss_scale_state`, f32 [3], zeros),
// when `train` asks for scaling: checkpoints hold it as any variable.
std::optional<graph::Variable> loss_scale_variable(const graph::TrainConfig& train);

// Adds that variable where the job asks for it (before autograd, which
// reads it). Sets g->loss_scale_*.
Status add_loss_scale_state(const graph::TrainConfig& train, LogicalGraph* g);

// Adds the ops of clipping (max_norm > 0) and loss scaling (when the state
// exists), points each trained variable's `grad` at its finished gradient
// and sets its `gate`. No-op when there is neither or no variable is trained.
Status finish_gradients(double max_norm, LogicalGraph* g);

}  // namespace rill::compiler
