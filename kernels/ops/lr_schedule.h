// The learning rate of a step: linear warmup, then cosine decay to a floor,
// as llm.c and nanoGPT schedule GPT training. Read from an update op's attrs
// (lr, warmup_steps, decay_steps, min_lr) into every optimizer kernel's
// params (op_params.h), CPU and CUDA, and by the master for the progress
// line and the metrics. Pure; any thread.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/attrs.h"

namespace rill {

struct LrSchedule {
  double lr = 0.01;           // the peak rate
  int64_t warmup_steps = 0;   // steps 0 .. warmup_steps - 1 ramp up: lr * (step + 1) / warmup_steps
  int64_t decay_steps = 0;    // > warmup_steps: cosine from lr down to min_lr at this step, min_lr after; 0: none
  double min_lr = 0.0;
};

inline double lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay_steps <= s.warmup_steps) return s.lr;
  if (step >= s.decay_steps) return s.min_lr;
  const double ratio =
      static_cast<double>(step - s.warmup_steps) / static_cast<double>(s.decay_steps - s.warmup_steps);
  return s.min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (s.lr - s.min_lr);
}

inline LrSchedule lr_schedule(const Attrs& attrs, double default_lr) {
  return {attrs.get_float("lr", default_lr), attrs.get_int("warmup_steps", 0), attrs.get_int("decay_steps", 0),
          attrs.get_float("min_lr", 0.0)};
}

}  // namespace rill
