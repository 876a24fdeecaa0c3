// Dynamic loss scaling's arithmetic, for the CPU and CUDA kernels of the
// loss_scale ops (loss_scale.cc, loss_scale.cu) alike, as PyTorch's
// GradScaler: the scale is a power of two, 2^(initial exponent + shift);
// a step whose gradients' sum of squares is finite counts towards `window`
// good steps, after which the scale doubles; one that is not is skipped
// and halves it. The state is an f32 [3] variable (compiler/gradient_norm.h):
// the shift, the good steps since the last change and the steps skipped so
// far, integers f32 holds exactly up to 2^24: the window is at most 2^24
// (train.loss_scale_window is checked so), and the skipped count would
// stop counting past 2^24 skipped steps (16.7 million), leaving Adam's t
// (step + 1 - skipped) to drift; no job skips that many.
#pragma once

#include <math.h>

#include <cstdint>

#include "base/host_device.h"

namespace rill::loss_scale {

inline constexpr int kMaxExponent = 127;  // the largest power of two an f32 holds
inline constexpr int64_t kMaxWindow = int64_t{1} << 24;

enum : int { kShift = 0, kGood = 1, kSkipped = 2, kStateSize = 3 };

RILL_HOST_DEVICE inline int exponent(int initial, const float* state) {
  return initial + static_cast<int>(state[kShift]);
}

RILL_HOST_DEVICE inline float scale(int initial, const float* state) {
  return ldexpf(1.0f, exponent(initial, state));
}

// What the step's check gives: the factor each gradient is multiplied by
// (1 / scale, exact), the sum of squares of the unscaled gradients, the
// update's number for Adam's bias correction (the steps applied so far,
// this one included; 0: this step is skipped) and the steps skipped so far.
struct Check {
  float unscale, unscaled_total;
  int32_t gate;
  float skipped;
};

RILL_HOST_DEVICE inline Check check(float total, const float* state, int initial, int64_t step) {
  const bool finite = isfinite(total);
  const float unscale = ldexpf(1.0f, -exponent(initial, state));
  const float skipped = state[kSkipped] + (finite ? 0.0f : 1.0f);
  int64_t applied = step + 1 - static_cast<int64_t>(skipped);
  if (applied > INT32_MAX) applied = INT32_MAX;  // Adam's corrections are 1 long before
  return {unscale, total * unscale * unscale, finite ? static_cast<int32_t>(applied) : 0, skipped};
}

// Updates the state after a step whose (scaled) sum of squares was `total`.
// False when the scale fell below 1: every scale down to 1 overflowed.
RILL_HOST_DEVICE inline bool update(float* state, float total, int initial, int64_t window) {
  if (isfinite(total)) {
    state[kGood] += 1.0f;
    if (state[kGood] >= static_cast<float>(window)) {
      state[kGood] = 0.0f;
      if (exponent(initial, state) < kMaxExponent) state[kShift] += 1.0f;
    }
    return true;
  }
  state[kGood] = 0.0f;
  state[kSkipped] += 1.0f;
  state[kShift] -= 1.0f;
  return exponent(initial, state) >= 0;
}

}  // namespace rill::loss_scale
