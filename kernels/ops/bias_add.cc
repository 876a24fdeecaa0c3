// bias_add: y = x + b broadcast along every axis but `axis` (int attr,
// default 1): x[N, C] + b[C]. b's gradient sums dy over the other axes.
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_bias_add(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_int_attr(attrs, "axis"));
  const Shape& x = in[0].shape;
  const Shape& b = in[1].shape;
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("x and b must be f32, got {} and {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
  const int64_t axis = attrs.get_int("axis", 1);
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()))
    return invalid_argument("axis {} is out of range for x {}", axis, shape_string(x));
  if (b.size() != 1 || b[0] != x[axis])
    return invalid_argument("b {} must be [{}], the size of axis {} of x {}", shape_string(b), x[axis], axis,
                            shape_string(x));
  out->push_back({x, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_bias_add(const Attrs& attrs, std::span<const TensorMeta> in) {
  const int axis = static_cast<int>(attrs.get_int("axis", 1));
  const int rank = static_cast<int>(in[0].shape.size());
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < rank; ++i) {
    if (i == axis) sigs.push_back({{Sbp::split(i), Sbp::split(0)}, {Sbp::split(i)}});
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
    const int64_t axis = g.attrs().get_int("axis", 1);
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < static_cast<int64_t>(g.meta(g.input(0)).shape.size()); ++i)
      if (i != axis) axes.push_back(i);
    g.set_input_grad(1, g.add_op("reduce_sum", {dy}, {{"axes", axes}, {"keepdims", int64_t{0}}})[0]);
  }
  return {};
}

Status cpu_bias_add(KernelContext& ctx) {
  const TensorView& x = ctx.inputs[0];
  const int axis = static_cast<int>(ctx.attrs->get_int("axis", 1));
  int64_t outer = 1, inner = 1;
  const int64_t c = x.shape[axis];
  for (int i = 0; i < axis; ++i) outer *= x.shape[i];
  for (size_t i = axis + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
  const float* __restrict xp = x.f32();
  const float* __restrict bp = ctx.inputs[1].f32();
  float* __restrict yp = ctx.outputs[0].f32();
  if (inner == 1) {  // the common [N, C] case: one contiguous row add per sample
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < c; ++j) yp[o * c + j] = xp[o * c + j] + bp[j];
    return {};
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < c; ++j) {
      const float bias = bp[j];
      const int64_t base = (o * c + j) * inner;
      for (int64_t i = 0; i < inner; ++i) yp[base + i] = xp[base + i] + bias;
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
};

}  // namespace rill
