// Typed, checked reads of op attrs for infer functions: a missing required attr
// or one of the wrong type is an invalid_argument naming the attr, so a job
// file's typo is reported rather than silently defaulted. Pure functions; any
// thread. Also the small shape helpers the layout ops share (axis normalising,
// row-major strides).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "kernels/attrs.h"
#include "kernels/tensor.h"

namespace rill {

// Layout kernels index with fixed-size arrays so they never allocate.
inline constexpr int kMaxKernelRank = kMaxRank;

inline StatusOr<std::vector<int64_t>> read_ints(const Attrs& attrs, const std::string& name, bool required) {
  auto it = attrs.values().find(name);
  if (it == attrs.values().end()) {
    if (required) return invalid_argument("missing attr '{}' (a list of ints)", name);
    return std::vector<int64_t>{};
  }
  // Lists only, not a bare int: kernels read the list in place (ints_attr).
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return invalid_argument("attr '{}' must be a list of ints", name);
}

inline StatusOr<int64_t> read_int(const Attrs& attrs, const std::string& name, int64_t fallback) {
  auto it = attrs.values().find(name);
  if (it == attrs.values().end()) return fallback;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return invalid_argument("attr '{}' must be an int", name);
}

inline StatusOr<double> read_float(const Attrs& attrs, const std::string& name, double fallback) {
  auto it = attrs.values().find(name);
  if (it == attrs.values().end()) return fallback;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return invalid_argument("attr '{}' must be a number", name);
}

// Maps axis in [-rank, rank) to [0, rank); errors name the attr and the shape.
inline StatusOr<int> normalize_axis(int64_t axis, const Shape& shape, const char* attr) {
  int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < -rank || axis >= rank)
    return invalid_argument("attr '{}' = {} is out of range for shape {}", attr, axis, shape_string(shape));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Row-major element strides of `shape`.
inline std::array<int64_t, kMaxKernelRank> row_major_strides(const Shape& shape) {
  std::array<int64_t, kMaxKernelRank> strides{};
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// A slice's box origin in `big` for a box of shape `small`, from its
// `starts` (slice_ops.cc; shared by the CPU and CUDA kernels). An uncut axis
// starts at 0, which is also the right origin within a split piece of it.
Status box_origin(std::span<const int64_t> starts, const Shape& big, const Shape& small,
                  std::array<int64_t, kMaxKernelRank>* origin);

inline Status check_rank_limit(const Shape& shape, const char* what) {
  if (shape.size() > static_cast<size_t>(kMaxKernelRank))
    return invalid_argument("{} has rank {} (shape {}); at most {} axes are supported", what, shape.size(),
                            shape_string(shape), kMaxKernelRank);
  return {};
}

}  // namespace rill
