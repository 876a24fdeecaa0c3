// The scalars of one Adam or AdamW step, worked out from the update op's
// params and the step once, for the CPU kernel (optim_ops.cc) and the CUDA
// kernel (cuda_ops.cc) alike. Pure; any thread.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/attrs.h"
#include "kernels/ops/lr_schedule.h"
#include "kernels/ops/op_params.h"

namespace rill {

struct AdamStep {
  double beta1, beta2, eps;
  double lr;                // the step's rate (lr_schedule.h)
  double step_size;         // lr / (1 - beta1^t), t = the update's number (step + 1 without skipped steps)
  double correction2_sqrt;  // sqrt(1 - beta2^t)
  double decay;             // added to the gradient as decay * w (Adam's L2; 0 for AdamW)
  double shrink;            // w is first multiplied by this (AdamW: 1 - rate * weight_decay; Adam: 1)
};

// Step `step`'s update, the t-th applied (loss scaling skips steps, so t
// may lag step + 1; the rate follows the step, as PyTorch's scheduler).
inline AdamStep adam_step(const AdamParams& p, int64_t step, int64_t t_applied) {
  const double lr = lr_at(p.lr, step), weight_decay = p.weight_decay;
  const bool decoupled = p.decoupled;
  AdamStep s;
  s.beta1 = p.beta1;
  s.beta2 = p.beta2;
  s.eps = p.eps;
  s.lr = lr;
  const double t = static_cast<double>(t_applied);
  s.step_size = lr / (1.0 - std::pow(s.beta1, t));
  s.correction2_sqrt = std::sqrt(1.0 - std::pow(s.beta2, t));
  s.decay = decoupled ? 0.0 : weight_decay;
  s.shrink = decoupled ? 1.0 - lr * weight_decay : 1.0;
  return s;
}

}  // namespace rill
