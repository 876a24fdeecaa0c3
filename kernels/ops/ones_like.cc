// ones_like: a tensor shaped (and typed) like x, filled with 1. Autograd seeds
// the backward pass with it. A partial-sum x (the loss) gives a broadcast
// result: d(sum of pieces) / d(piece) is 1 everywhere.
#include <algorithm>

#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_ones_like(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  out->push_back(in[0]);
  return {};
}

std::vector<SbpSignature> sbp_ones_like(const Attrs&, std::span<const TensorMeta> in) {
  auto sigs = math::split_or_broadcast(static_cast<int>(in[0].shape.size()), 1);
  sigs.push_back({{Sbp::partial_sum()}, {Sbp::broadcast()}});
  return sigs;
}

Status cpu_ones_like(KernelContext& ctx) {
  TensorView& y = ctx.outputs[0];
  visit_dtype(y.dtype, [&]<typename T>(std::type_identity<T>) { std::fill_n(static_cast<T*>(y.data), y.size(), element_from<T>(1.0)); });
  return {};
}

}  // namespace

const OpDef kOnesLikeOp = {
    .type = "ones_like",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_ones_like,
    .sbp = sbp_ones_like,
    .cpu = cpu_ones_like,
    .cuda = "ones_like",
};

}  // namespace rill
