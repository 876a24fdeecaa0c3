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

// Copies between the whole tensor and the piece of global rank `rank` of an
// S(axis) tensor split `parallel` ways.
void copy_piece(const Shape& whole_shape, int axis, int parallel, int rank, float* whole, float* piece,
                bool into_whole) {
  AxisView v = around(whole_shape, axis);
  int64_t offset = split_offset(v.dim, parallel, rank);
  int64_t len = split_offset(v.dim, parallel, rank + 1) - offset;
  size_t row = static_cast<size_t>(len * v.inner) * sizeof(float);
  for (int64_t o = 0; o < v.outer; ++o) {
    float* w = whole + (o * v.dim + offset) * v.inner;
    float* p = piece + o * len * v.inner;
    if (into_whole) std::memcpy(w, p, row);
    else std::memcpy(p, w, row);
  }
}

}  // namespace

BoxingBody::BoxingBody(Sbp in_sbp, Sbp out_sbp, int parallel, TensorMeta logical, int first_rank, int local_pieces,
                       NodeCollective* collective)
    : in_sbp_(in_sbp),
      out_sbp_(out_sbp),
      parallel_(parallel),
      logical_(std::move(logical)),
      first_rank_(first_rank),
      local_pieces_(local_pieces > 0 ? local_pieces : parallel),
      collective_(collective) {
  if (out_sbp_.kind != Sbp::kBroadcast && in_sbp_.kind != Sbp::kBroadcast)
    whole_.resize(static_cast<size_t>(num_elements(logical_.shape)));
}

Status BoxingBody::act(const ActIo& io) {
  const int64_t n = num_elements(logical_.shape);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  // 1. The whole logical tensor, where it can live without a copy. Across
  // nodes, this node first builds its part (its pieces, or their partial sum)
  // and the collective sums the parts.
  float* whole = in_sbp_.kind == Sbp::kBroadcast   ? io.inputs[0]->f32()
                 : out_sbp_.kind == Sbp::kBroadcast ? io.outputs[0]->f32()
                                                    : whole_.data();
  switch (in_sbp_.kind) {
    case Sbp::kBroadcast:
      break;
    case Sbp::kSplit:
      if (collective_) std::fill(whole, whole + n, 0.0f);  // other nodes' regions stay 0 for the sum
      for (int i = 0; i < local_pieces_; ++i)
        copy_piece(logical_.shape, in_sbp_.axis, parallel_, first_rank_ + i, whole, io.inputs[i]->f32(), true);
      break;
    case Sbp::kPartialSum: {
      std::memcpy(whole, io.inputs[0]->f32(), bytes);
      for (int i = 1; i < local_pieces_; ++i) {
        const float* piece = io.inputs[i]->f32();
        for (int64_t k = 0; k < n; ++k) whole[k] += piece[k];
      }
      break;
    }
  }
  if (collective_ && in_sbp_.kind != Sbp::kBroadcast)
    RILL_RETURN_IF_ERROR(collective_->all_reduce(std::span<float>(whole, static_cast<size_t>(n))));
  // 2. Each local output piece from the whole.
  for (int j = 0; j < local_pieces_; ++j) {
    float* out = io.outputs[j]->f32();
    int rank = first_rank_ + j;
    switch (out_sbp_.kind) {
      case Sbp::kBroadcast:
        if (out != whole) std::memcpy(out, whole, bytes);
        break;
      case Sbp::kSplit:
        copy_piece(logical_.shape, out_sbp_.axis, parallel_, rank, whole, out, false);
        break;
      case Sbp::kPartialSum:
        if (rank == 0) std::memcpy(out, whole, bytes);
        else std::fill(out, out + n, 0.0f);
        break;
    }
  }
  return {};
}

}  // namespace rill
