// Gradient clipping by the global norm, a compile pass after the optimizer's
// (compiler/optimizer.cc): every trained variable's gradient is multiplied
// by min(1, max_norm / (norm + 1e-6)), norm the L2 norm of all gradients
// together, as torch.nn.utils.clip_grad_norm_. Each gradient is first summed
// across devices into the SBP its variable has (an identity hinted so: the
// all-reduce buckets as without clipping), and its sum of squares made
// there (split gradients give partial sums);
// each placement adds its sums up and reduces that one scalar (a hint B:
// one all-reduce of 4 bytes per placement), the placements' totals meet in
// one scalar, and its factor goes back to every gradient's placement.
#pragma once

#include "base/status.h"
#include "compiler/logical_graph.h"

namespace rill::compiler {

// Adds the clipping ops and points each trained variable's `grad` at its
// clipped gradient. No-op when no variable is trained.
Status clip_gradients(double max_norm, LogicalGraph* g);

}  // namespace rill::compiler
