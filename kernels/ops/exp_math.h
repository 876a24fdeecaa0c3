// e^x for x <= 0, the exponential softmax and cross-entropy take of
// x - max(row), in float operations only: no call into libm, so a loop of it
// vectorizes (libm's expf, one element at a time, with the softmaxes around
// it, was 8% of the GPT sample's CPU step), and every copy of such a loop
// (cpu_clones.h) gives the same bits, the build keeping contraction off.
//
// Cody and Waite's reduction, x = n ln 2 + r with |r| <= ln 2 / 2 and n an
// integer found by rounding in float (adding and taking off 1.5 * 2^23),
// ln 2 in two parts so n times the first is exact; e^r by Cephes' degree-7
// polynomial (expf.c, S. L. Moshier); 2^n put into a float's exponent.
// Tested against exp in double over [-87.3, 0]: within 1 ulp of it
// (0.98 measured; the test's bound is 2: tests/kernels/ops_math_test.cc).
// Below ln(FLT_MIN) = -87.34 it returns 0, where libm would give a
// subnormal; NaN gives NaN. For x > 0 it is wrong: its callers pass
// x - max(row), scaled by a positive factor.
#pragma once

#include <cstdint>
#include <cstring>

namespace rill::exp_math {

inline float exp_nonpositive(float x) {
  constexpr float kLowest = -87.3365447505530706f;  // ln(FLT_MIN)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLn2Hi = 0.693359375f;  // 355/512, 9 significant bits: n * kLn2Hi is exact for |n| <= 126
  constexpr float kLn2Lo = -2.12194440e-4f;
  const bool under = x < kLowest;  // false for NaN, which goes on through the arithmetic
  x = under ? 0.0f : x;
  float n = (x * kLog2e + kRound) - kRound;
  n = n >= -126.0f ? (n <= 0.0f ? n : 0.0f) : -126.0f;  // NaN to -126: the int conversion below stays defined
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = (p * r * r + r) + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return under ? 0.0f : e_r * two_n;
}

}  // namespace rill::exp_math
