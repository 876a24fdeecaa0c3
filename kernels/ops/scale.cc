// scale: y = x * (float attr `scale`, default 1). Linear, so split, broadcast
// and partial-sum inputs all pass through unchanged.
// accumulate: gradient accumulation over the `micro_batches` (int attr, K)
// micro-batches of a step: its actor acts once per micro-batch on one output
// slot, y = x / K at micro-batch 0 and y += x / K after, so the step's
// gradient is the mean of the micro-batches' (the gradient of the whole
// batch's mean loss). Linear, as scale.
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
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
  const float s = static_cast<float>(params_of<ScaleParams>(ctx).scale);
  const int64_t n = ctx.outputs[0].size();
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
  return {};
}

Status infer_accumulate(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  if (attrs.get_int("micro_batches", 0) < 1)
    return invalid_argument("micro_batches is {}, expected at least 1", attrs.get_int("micro_batches", 0));
  if (in[0].dtype != DType::kF32) return invalid_argument("x must be f32, got {}", dtype_name(in[0].dtype));
  out->push_back(in[0]);
  return {};
}

Status cpu_accumulate(KernelContext& ctx) {
  const float* __restrict x = ctx.inputs[0].f32();
  float* __restrict y = ctx.outputs[0].f32();
  const float s = 1.0f / static_cast<float>(params_of<AccumulateParams>(ctx).micro_batches);
  const int64_t n = ctx.outputs[0].size();
  if (ctx.micro == 0) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i] * s;
  }
  return {};
}

}  // namespace

const OpDef kAccumulateOp = {
    .type = "accumulate",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_accumulate,
    .sbp = sbp_scale,
    .cpu = cpu_accumulate,
    .cuda = "accumulate",
    .parse = parse_as<AccumulateParams>,
};

const OpDef kScaleOp = {
    .type = "scale",
    .num_inputs = 1,
    .num_outputs = 1,
    .infer = infer_scale,
    .sbp = sbp_scale,
    .grad = grad_scale,
    .cpu = cpu_scale,
    .cuda = "scale",
    .parse = parse_as<ScaleParams>,
};

}  // namespace rill
