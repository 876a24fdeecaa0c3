// bias_add: y = x + b, b broadcast along the axes of x it does not cover. b
// covers the axes [axis, axis + rank(b)) of x; the int attr `axis` defaults
// to the last rank(b) axes: x [N, C] + b [C], x [B, T, C] + b [C], and a
// position table x [B, T, C] + wpe [T, C]. b's gradient sums dy over the
// axes it does not cover.
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

using math::bias_axis;

Status infer_bias_add(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_int_attr(attrs, "axis"));
  const Shape& x = in[0].shape;
  const Shape& b = in[1].shape;
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("x and b must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  if (b.empty()) return invalid_argument("b {} must have at least one axis", shape_string(b));
  const int64_t axis = bias_axis(attrs, x, b);
  const int64_t end = axis + static_cast<int64_t>(b.size());
  if (axis < 0 || end > static_cast<int64_t>(x.size()))
    return invalid_argument("b {} at axis {} does not fit in x {}", shape_string(b), axis, shape_string(x));
  if (!std::equal(b.begin(), b.end(), x.begin() + axis))
    return invalid_argument("b {} must be {}, the axes {} to {} of x {}", shape_string(b),
                            shape_string(Shape(x.begin() + axis, x.begin() + end)), axis, end - 1, shape_string(x));
  out->push_back({x, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_bias_add(const Attrs& attrs, std::span<const TensorMeta> in) {
  const int axis = static_cast<int>(bias_axis(attrs, in[0].shape, in[1].shape));
  const int rank = static_cast<int>(in[0].shape.size()), b_rank = static_cast<int>(in[1].shape.size());
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < rank; ++i) {
    if (i >= axis && i < axis + b_rank) sigs.push_back({{Sbp::split(i), Sbp::split(i - axis)}, {Sbp::split(i)}});
    else sigs.push_back({{Sbp::split(i), B}, {Sbp::split(i)}});
  }
  sigs.push_back(math::uniform_signature(B, 2));
  sigs.push_back(math::uniform_signature(P, 2));
  return sigs;
}

Status grad_bias_add(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return {};
  if (g.needs_input_grad(0)) g.set_input_grad(0, dy);
  if (g.needs_input_grad(1)) {
    const Shape& x = g.meta(g.input(0)).shape;
    const Shape& b = g.meta(g.input(1)).shape;
    const int64_t axis = bias_axis(g.attrs(), x, b), end = axis + static_cast<int64_t>(b.size());
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (i < axis || i >= end) axes.push_back(i);
    g.set_input_grad(1, axes.empty() ? dy : g.add_op("reduce_sum", {dy}, {{"axes", axes}, {"keepdims", int64_t{0}}})[0]);
  }
  return {};
}

Status cpu_bias_add(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& bias = ctx.inputs[1];
  const auto [outer, c, inner] =
      math::bias_layout(params_of<BiasAddParams>(ctx).axis_for(x.shape, bias.shape), x.shape, bias.shape);
  const float* __restrict xp = x.f32();
  const float* __restrict bp = bias.f32();
  float* __restrict yp = ctx.outputs[0].f32();
  if (inner == 1) {  // b covers the trailing axes: one contiguous add per row
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < c; ++j) yp[o * c + j] = xp[o * c + j] + bp[j];
    return {};
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < c; ++j) {
      const float value = bp[j];
      const int64_t base = (o * c + j) * inner;
      for (int64_t i = 0; i < inner; ++i) yp[base + i] = xp[base + i] + value;
    }
  }
  return {};
}

}  // namespace

const OpDef kBiasAddOp = {
    .type = "bias_add",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_bias_add,
    .sbp = sbp_bias_add,
    .grad = grad_bias_add,
    .cpu = cpu_bias_add,
    .cuda = "bias_add",
    .parse = parse_as<BiasAddParams>,
};

}  // namespace rill
