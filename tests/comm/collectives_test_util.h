// Helpers for the collectives tests (tests/comm/collectives_*_test.cc): each
// rank's input of small integers, their sum over ranks, and exact comparison.
// Inputs are small integers, so float sums are exact and results compare
// exactly.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "tests/comm/comm_test_util.h"

namespace rill::comm::testing {

// Element i of rank `rank`'s input (-8..8); `salt` varies it between calls.
inline float value(int rank, size_t i, int salt) {
  return static_cast<float>(static_cast<int>((rank * 7 + i * 13 + salt) % 17) - 8);
}

inline std::vector<float> input(int rank, size_t count, int salt) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(rank, i, salt);
  return v;
}

// The sum over ranks 0..world-1 of their inputs.
inline std::vector<float> sum(int world, size_t count, int salt) {
  std::vector<float> s(count, 0.0f);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) s[i] += value(r, i, salt);
  }
  return s;
}

template <typename T>
std::span<const std::byte> bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <typename T>
std::span<std::byte> writable(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

inline Status expect_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  if (got.size() != want.size()) return internal_error("{}: {} elements, expected {}", what, got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return internal_error("{}: element {} is {}, expected {}", what, i, got[i], want[i]);
  }
  return Status::ok_status();
}

}  // namespace rill::comm::testing
