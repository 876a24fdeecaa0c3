// The activations' scalar math, shared by the CPU kernels (activation.cc) and
// the CUDA kernels (activation.cu), so both compute the same formula.
#pragma once

#include <math.h>

#include "base/host_device.h"

namespace rill::act {

enum class Act { kRelu, kGelu, kTanh, kSigmoid, kGeluTanh };

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCubic = 0.044715f;  // the tanh form's cubic term, as GPT-2 and PyTorch's approximate='tanh'

// tanh as a rational function of x (odd degree 13 over even degree 6, on
// [-7.9053, 7.9053], where float tanh rounds to +-1 beyond): at most 3.3e-7
// relative error against tanh in double over [-20, 20] (3 ulp; measured on a
// 1e-4 grid), and no call into libm, so a loop of it vectorizes (libm's
// tanhf made GELU 40% of the GPT sample's CPU time). The coefficients are the
// minimax fit Eigen's fast tanh uses.
RILL_HOST_DEVICE inline float rational_tanh(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  x = x > kClamp ? kClamp : (x < -kClamp ? -kClamp : x);
  const float x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return x * p / q;
}

template <Act kAct>
RILL_HOST_DEVICE inline float forward(float x) {
  if constexpr (kAct == Act::kRelu) return x > 0.0f ? x : 0.0f;
  else if constexpr (kAct == Act::kGelu) return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  else if constexpr (kAct == Act::kTanh) return tanhf(x);
  else if constexpr (kAct == Act::kGeluTanh)
    return 0.5f * x * (1.0f + rational_tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
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
    const float th = rational_tanh(kSqrt2OverPi * (t + kGeluCubic * t * t * t));
    return dy * (0.5f * (1.0f + th) + 0.5f * t * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * t * t));
  }
  else return dy * t * (1.0f - t);
}

}  // namespace rill::act
