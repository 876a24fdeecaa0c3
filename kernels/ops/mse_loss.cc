// mse_loss: pred, target (same shape, f32) -> scalar [] = sum((pred - target)^2),
// divided by the LOGICAL element count when the string attr `reduction` is
// "mean" (default "sum"), so S(i) pieces give partial sums (P) that add up to
// the single-device value. mse_loss_grad(pred, target, dloss) -> dpred.
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status check_reduction(const Attrs& attrs) {
  RILL_RETURN_IF_ERROR(math::check_string_attr(attrs, "reduction"));
  std::string reduction = attrs.get_string("reduction", "sum");
  if (reduction != "sum" && reduction != "mean")
    return invalid_argument("attr 'reduction' must be \"sum\" or \"mean\", got \"{}\"", reduction);
  return {};
}

Status check_pair(std::span<const TensorMeta> in) {
  if (in[0].dtype != DType::kF32 || in[1].dtype != DType::kF32)
    return invalid_argument("pred and target must be f32, got {} and {}", dtype_name(in[0].dtype),
                            dtype_name(in[1].dtype));
  if (in[0].shape != in[1].shape)
    return invalid_argument("pred {} and target {} must have the same shape", shape_string(in[0].shape),
                            shape_string(in[1].shape));
  return {};
}

Status infer_mse(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_reduction(attrs));
  RILL_RETURN_IF_ERROR(check_pair(in));
  out->push_back({{}, DType::kF32});
  return {};
}

Status infer_mse_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_reduction(attrs));
  RILL_RETURN_IF_ERROR(check_pair(in));
  if (in[2].dtype != DType::kF32 || num_elements(in[2].shape) != 1)
    return invalid_argument("dloss {} {} must be an f32 scalar", shape_string(in[2].shape), dtype_name(in[2].dtype));
  out->push_back(in[0]);
  return {};
}

std::vector<SbpSignature> sbp_mse(const Attrs&, std::span<const TensorMeta> in) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < static_cast<int>(in[0].shape.size()); ++i)
    sigs.push_back({{Sbp::split(i), Sbp::split(i)}, {Sbp::partial_sum()}});
  sigs.push_back(math::uniform_signature(Sbp::broadcast(), 2));
  return sigs;
}

std::vector<SbpSignature> sbp_mse_grad(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < static_cast<int>(in[0].shape.size()); ++i)
    sigs.push_back({{Sbp::split(i), Sbp::split(i), B}, {Sbp::split(i)}});
  sigs.push_back(math::uniform_signature(B, 3));
  sigs.push_back({{B, B, P}, {P}});  // linear in dloss
  return sigs;
}

Status grad_mse(GradBuilder& g) {
  const std::string dloss = g.output_grad(0);
  if (dloss.empty()) return {};
  if (!g.needs_input_grad(0) && !g.needs_input_grad(1)) return {};
  Attrs attrs{{"reduction", g.attrs().get_string("reduction", "sum")}};
  std::string dpred = g.add_op("mse_loss_grad", {g.input(0), g.input(1), dloss}, attrs)[0];
  if (g.needs_input_grad(0)) g.set_input_grad(0, dpred);
  if (g.needs_input_grad(1)) g.set_input_grad(1, g.add_op("scale", {dpred}, {{"scale", -1.0}})[0]);
  return {};
}

// 1 for "sum", 1 / logical count for "mean".
float mean_factor(const KernelContext& ctx) {
  if (!params_of<MseParams>(ctx).mean) return 1.0f;
  const int64_t count = num_elements(ctx.logical_inputs[0]);
  return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
}

Status cpu_mse(KernelContext& ctx) {
  const float* __restrict p = ctx.inputs[0].f32();
  const float* __restrict t = ctx.inputs[1].f32();
  const int64_t n = ctx.inputs[0].size();
  double sum = 0.0;  // double: a long sum of squares loses little this way
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - t[i];
    sum += d * d;
  }
  ctx.outputs[0].f32()[0] = static_cast<float>(sum * mean_factor(ctx));
  return {};
}

Status cpu_mse_grad(KernelContext& ctx) {
  const float* __restrict p = ctx.inputs[0].f32();
  const float* __restrict t = ctx.inputs[1].f32();
  float* __restrict dp = ctx.outputs[0].f32();
  const float factor = 2.0f * ctx.inputs[2].f32()[0] * mean_factor(ctx);
  const int64_t n = ctx.inputs[0].size();
  for (int64_t i = 0; i < n; ++i) dp[i] = factor * (p[i] - t[i]);
  return {};
}

}  // namespace

const OpDef kMseLossOp = {
    .type = "mse_loss",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_mse,
    .sbp = sbp_mse,
    .grad = grad_mse,
    .cpu = cpu_mse,
    .cuda = "mse_loss",
    .parse = parse_as<MseParams>,
};

const OpDef kMseLossGradOp = {
    .type = "mse_loss_grad",
    .num_inputs = 3,
    .num_outputs = 1,
    .infer = infer_mse_grad,
    .sbp = sbp_mse_grad,
    .cpu = cpu_mse_grad,
    .cuda = "mse_loss_grad",
    .parse = parse_as<MseParams>,
};

}  // namespace rill
