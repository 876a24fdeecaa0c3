// scale: y = x * (float attr `scale`, default 1). Linear, so split, broadcast
// and partial-sum inputs all pass through unchanged.
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_scale(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_float_attr(attrs, "scale"));
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  out->push_back(in[0]);
  return {};
}

std::vector<SbpSignature> sbp_scale(const Attrs&, std::span<const TensorMeta> in) {
  auto sigs = math::split_or_broadcast(static_cast<int>(in[0].shape.size()), 1);
  sigs.push_back(math::uniform_signature(Sbp::partial_sum(), 1));
  return sigs;
}

Status grad_scale(GradBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (dy.empty() || !g.needs_input_grad(0)) return {};
  g.set_input_grad(0, g.add_op("scale", {dy}, {{"scale", g.attrs().get_float("scale", 1.0)}})[0]);
  return {};
}

Status cpu_scale(KernelContext& ctx) {
  const float* __restrict x = ctx.inputs[0].f32();
  float* __restrict y = ctx.outputs[0].f32();
  const float s = static_cast<float>(ctx.attrs->get_float("scale", 1.0));
  const int64_t n = ctx.outputs[0].size();
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
  return {};
}

}  // namespace

const OpDef kScaleOp = {
    .type = "scale",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_scale,
    .sbp = sbp_scale,
    .grad = grad_scale,
    .cpu = cpu_scale,
};

}  // namespace rill
