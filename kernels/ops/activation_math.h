// The activations' scalar math, shared by the CPU kernels (activation.cc) and
// the CUDA kernels (activation.cu), so both compute the same formula.
#pragma once

#include <math.h>

#include "kernels/ops/host_device.h"

namespace rill::act {

enum class Act { kRelu, kGelu, kTanh, kSigmoid, kGeluTanh };

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCubic = 0.044715f;  // the tanh form's cubic term, as GPT-2 and PyTorch's approximate='tanh'

template <Act kAct>
RILL_HOST_DEVICE inline float forward(float x) {
  if constexpr (kAct == Act::kRelu) return x > 0.0f ? x : 0.0f;
  else if constexpr (kAct == Act::kGelu) return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  else if constexpr (kAct == Act::kTanh) return tanhf(x);
  else if constexpr (kAct == Act::kGeluTanh) return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  else return 1.0f / (1.0f + expf(-x));
}

// dx from t (y, or x for the gelus) and dy.
template <Act kAct>
RILL_HOST_DEVICE inline float backward(float t, float dy) {
  if constexpr (kAct == Act::kRelu) return t > 0.0f ? dy : 0.0f;
  else if constexpr (kAct == Act::kGelu)
    return dy * (0.5f * (1.0f + erff(t * kInvSqrt2)) + t * kInvSqrt2Pi * expf(-0.5f * t * t));
  else if constexpr (kAct == Act::kTanh) return dy * (1.0f - t * t);
  else if constexpr (kAct == Act::kGeluTanh) {
    const float th = tanhf(kSqrt2OverPi * (t + kGeluCubic * t * t * t));
    return dy * (0.5f * (1.0f + th) + 0.5f * t * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * t * t));
  }
  else return dy * t * (1.0f - t);
}

}  // namespace rill::act
