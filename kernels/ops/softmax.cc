// softmax over the last axis, and softmax_grad(y, dy) = y * (dy - sum(dy * y))
// per row. A row must be whole on a device, so the last axis is never split.

#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/softmax_math.h"

namespace rill {
namespace {

Status infer_softmax(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  if (in[0].shape.empty()) return invalid_argument("x {} must have at least one axis", shape_string(in[0].shape));
  out->push_back(in[0]);
  return {};
}

Status infer_softmax_grad(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("y and dy must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  if (in[0].shape != in[1].shape || in[0].shape.empty())
    return invalid_argument("y {} and dy {} must have the same shape, with at least one axis",
                            shape_string(in[0].shape), shape_string(in[1].shape));
  out->push_back(in[1]);
  return {};
}

std::vector<SbpSignature> sbp_softmax(const Attrs&, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[0].shape.size());
  return math::split_or_broadcast(rank, 1, rank - 1);
}

std::vector<SbpSignature> sbp_softmax_grad(const Attrs&, std::span<const TensorMeta> in) {
  const int rank = static_cast<int>(in[0].shape.size());
  auto sigs = math::split_or_broadcast(rank, 2, rank - 1);
  sigs.push_back({{Sbp::broadcast(), Sbp::partial_sum()}, {Sbp::partial_sum()}});  // linear in dy
  return sigs;
}

Status grad_softmax(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  g.set_input_grad(0, g.add_op("softmax_grad", {g.output(0), dy})[0]);
  return {};
}

Status cpu_softmax(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const int64_t cols = x.shape.back();
  if (cols == 0) return {};
  const int64_t rows = x.size() / cols;
  for (int64_t r = 0; r < rows; ++r) softmax_math::softmax_row(x.f32() + r * cols, ctx.outputs[0].f32() + r * cols, cols);
  return {};
}

Status cpu_softmax_grad(KernelContext& ctx) {
  const TensorView& y = ctx.inputs[0];
  const int64_t cols = y.shape.back();
  if (cols == 0) return {};
  const int64_t rows = y.size() / cols;
  for (int64_t r = 0; r < rows; ++r)
    softmax_math::softmax_grad_row(y.f32() + r * cols, ctx.inputs[1].f32() + r * cols, ctx.outputs[0].f32() + r * cols,
                                   cols);
  return {};
}

}  // namespace

const OpDef kSoftmaxOp = {
    .type = "softmax",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_softmax,
    .sbp = sbp_softmax,
    .grad = grad_softmax,
    .cpu = cpu_softmax,
};

const OpDef kSoftmaxGradOp = {
    .type = "softmax_grad",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_softmax_grad,
    .sbp = sbp_softmax_grad,
    .cpu = cpu_softmax_grad,
};

}  // namespace rill
