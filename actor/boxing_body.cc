#include "actor/body.h"

#include <algorithm>
#include <cstring>

namespace rill {
namespace {

// A tensor seen as [outer, dim, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
};

AxisView around(const Shape& shape, int axis) {
  AxisView v;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < axis) v.outer *= shape[i];
    else if (i == axis) v.dim = shape[i];
    else v.inner *= shape[i];
  }
  return v;
}

// Copies between the whole tensor and its piece [offset, offset + len) on `axis`.
void copy_piece(const Shape& whole_shape, int axis, int64_t offset, int64_t len, float* whole, float* piece,
                bool into_whole) {
  AxisView v = around(whole_shape, axis);
  size_t row = static_cast<size_t>(len * v.inner) * sizeof(float);
  for (int64_t o = 0; o < v.outer; ++o) {
    float* w = whole + (o * v.dim + offset) * v.inner;
    float* p = piece + o * len * v.inner;
    if (into_whole) std::memcpy(w, p, row);
    else std::memcpy(p, w, row);
  }
}

}  // namespace

BoxingBody::BoxingBody(Sbp in_sbp, Sbp out_sbp, int parallel, TensorMeta logical)
    : in_sbp_(in_sbp), out_sbp_(out_sbp), parallel_(parallel), logical_(std::move(logical)) {
  if (out_sbp_.kind != Sbp::kBroadcast && in_sbp_.kind != Sbp::kBroadcast)
    whole_.resize(static_cast<size_t>(num_elements(logical_.shape)));
}

Status BoxingBody::act(const ActIo& io) {
  const int64_t n = num_elements(logical_.shape);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  // 1. The whole logical tensor, where it can live without a copy.
  float* whole = in_sbp_.kind == Sbp::kBroadcast   ? io.inputs[0]->f32()
                 : out_sbp_.kind == Sbp::kBroadcast ? io.outputs[0]->f32()
                                                    : whole_.data();
  switch (in_sbp_.kind) {
    case Sbp::kBroadcast:
      break;
    case Sbp::kSplit: {
      int64_t dim = logical_.shape[in_sbp_.axis];
      for (int i = 0; i < parallel_; ++i) {
        int64_t offset = split_offset(dim, parallel_, i);
        copy_piece(logical_.shape, in_sbp_.axis, offset, split_offset(dim, parallel_, i + 1) - offset, whole,
                   io.inputs[i]->f32(), true);
      }
      break;
    }
    case Sbp::kPartialSum: {
      std::memcpy(whole, io.inputs[0]->f32(), bytes);
      for (int i = 1; i < parallel_; ++i) {
        const float* piece = io.inputs[i]->f32();
        for (int64_t k = 0; k < n; ++k) whole[k] += piece[k];
      }
      break;
    }
  }
  // 2. Each output piece from the whole.
  for (int j = 0; j < parallel_; ++j) {
    float* out = io.outputs[j]->f32();
    switch (out_sbp_.kind) {
      case Sbp::kBroadcast:
        if (out != whole) std::memcpy(out, whole, bytes);
        break;
      case Sbp::kSplit: {
        int64_t dim = logical_.shape[out_sbp_.axis];
        int64_t offset = split_offset(dim, parallel_, j);
        copy_piece(logical_.shape, out_sbp_.axis, offset, split_offset(dim, parallel_, j + 1) - offset, whole, out,
                   false);
        break;
      }
      case Sbp::kPartialSum:
        if (j == 0) std::memcpy(out, whole, bytes);
        else std::fill(out, out + n, 0.0f);
        break;
    }
  }
  return {};
}

}  // namespace rill
