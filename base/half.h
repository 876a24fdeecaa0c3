// 16-bit floats as stored in tensors: bfloat16 (float's 8-bit exponent, 7
// mantissa bits) and IEEE binary16 (5-bit exponent, 10 mantissa bits). Only
// storage and exact conversions to and from float, rounding to nearest even
// as CUDA's __float2bfloat16 / __float2half and PyTorch's .to() do; a
// kernel computes in float. Plain bit patterns: the same code converts on
// the host and in CUDA kernels (RILL_HOST_DEVICE), so both give the same
// bits, NaNs included.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/host_device.h"

namespace rill {

namespace half_bits {

RILL_HOST_DEVICE inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

RILL_HOST_DEVICE inline float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace half_bits

// Neither type converts implicitly nor is built from a number ({1} would be
// a bit pattern): from_float and from_bits say which is meant.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  RILL_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 x;
    x.bits = b;
    return x;
  }
  RILL_HOST_DEVICE static BFloat16 from_float(float x) {
    const uint32_t u = half_bits::bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return from_bits(static_cast<uint16_t>((u >> 16) | 0x0040u));  // quiet NaN
    // Round to nearest, ties to even: add half an ulp less one, plus the
    // kept part's last bit. Overflow rounds up into infinity, as it should.
    return from_bits(static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
  }
  RILL_HOST_DEVICE float to_float() const { return half_bits::float_of(static_cast<uint32_t>(bits) << 16); }
  bool operator==(const BFloat16&) const = default;
};

struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  RILL_HOST_DEVICE static Float16 from_bits(uint16_t b) {
    Float16 x;
    x.bits = b;
    return x;
  }
  RILL_HOST_DEVICE static Float16 from_float(float x) {
    const uint32_t u = half_bits::bits_of(x);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return from_bits(static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu)));  // NaN
    if (a >= 0x477ff000u) return from_bits(static_cast<uint16_t>(sign | 0x7c00u));  // rounds to infinity or is
    if (a >= 0x38800000u) {  // normal in binary16 (>= 2^-14)
      // Rebias the exponent (127 -> 15) and round the 13 dropped bits to
      // nearest even; a carry out of the mantissa moves to the next exponent.
      const uint32_t rebiased = a - 0x38000000u;
      return from_bits(static_cast<uint16_t>(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13)));
    }
    if (a < 0x33000000u) return from_bits(static_cast<uint16_t>(sign));  // below half the smallest subnormal: zero
    // Subnormal: the value in units of 2^-24, rounded to nearest even.
    const uint32_t exponent = a >> 23;                       // 102 .. 112
    const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;   // with the implicit 1
    const uint32_t shift = 126 - exponent;                   // 14 .. 24
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rounded = kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
    return from_bits(static_cast<uint16_t>(sign | rounded));
  }
  RILL_HOST_DEVICE float to_float() const {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    if (exponent == 0x1fu) return half_bits::float_of(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
    if (exponent != 0) return half_bits::float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
    if (mantissa == 0) return half_bits::float_of(sign);
    // Subnormal: mantissa x 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -magnitude : magnitude;
  }
  bool operator==(const Float16&) const = default;
};

// Whether T is one of these 16-bit floats: stored, never computed in.
template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

}  // namespace rill
