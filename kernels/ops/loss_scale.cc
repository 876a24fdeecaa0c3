// The ops of dynamic loss scaling (compiler/gradient_norm.h; the arithmetic in
// loss_scale_math.h). `state` is the f32 [3] variable the update keeps;
// attrs `scale` (the first scale, a power of two from 1 to 2^127) and, for
// the update, `window` (good steps before the scale doubles).
//   loss_scale(state) -> scale []: what the loss's gradient starts at.
//   loss_scale_check(total, state) -> (unscale [], unscaled_total [],
//     gate [] i32, skipped []): total is the sum of squares of every scaled
//     gradient; unscale = 1 / scale multiplies each gradient; gate is the
//     number of this update for Adam's bias correction, 0 when total is
//     not finite (an overflow: every update skips the step); skipped
//     counts the steps skipped so far. Reads the step.
//   loss_scale_update(state, total): an update op (no optimizer state) that
//     moves the state on; fails when the scale would fall below 1, naming
//     the step.
#include "kernels/ops/attr_read.h"
#include "kernels/ops/loss_scale_math.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status check_attrs(const Attrs& attrs, bool window) {
  RILL_ASSIGN_OR_RETURN(double scale, read_float(attrs, "scale", 0.0));
  int exponent = 0;
  if (!std::isfinite(scale) || std::frexp(scale, &exponent) != 0.5 || exponent < 1 ||
      exponent - 1 > loss_scale::kMaxExponent)
    return invalid_argument("attr 'scale' is {}; it must be a power of two from 1 to 2^{}", scale,
                            loss_scale::kMaxExponent);
  if (!window) return {};
  RILL_ASSIGN_OR_RETURN(int64_t steps, read_int(attrs, "window", 2000));
  if (steps < 1 || steps > loss_scale::kMaxWindow)
    return invalid_argument("attr 'window' is {}; it must be in [1, {}]", steps, loss_scale::kMaxWindow);
  return {};
}

Status check_state(const TensorMeta& state) {
  if (state.dtype != DType::kF32 || state.shape != Shape{loss_scale::kStateSize})
    return invalid_argument("state must be f32 [{}], got {} {}", int{loss_scale::kStateSize}, dtype_name(state.dtype),
                            shape_string(state.shape));
  return {};
}

Status check_total(const TensorMeta& total) {
  if (total.dtype != DType::kF32 || !math::is_scalar_shape(total.shape))
    return invalid_argument("total must be an f32 scalar, got {} {}", dtype_name(total.dtype),
                            shape_string(total.shape));
  return {};
}

Status infer_loss_scale(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_attrs(attrs, false));
  RILL_RETURN_IF_ERROR(check_state(in[0]));
  out->push_back({{}, DType::kF32});
  return {};
}

Status infer_check(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(check_attrs(attrs, false));
  RILL_RETURN_IF_ERROR(check_total(in[0]));
  RILL_RETURN_IF_ERROR(check_state(in[1]));
  *out = {{{}, DType::kF32}, {{}, DType::kF32}, {{}, DType::kI32}, {{}, DType::kF32}};
  return {};
}

Status infer_update(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>*) {
  RILL_RETURN_IF_ERROR(check_attrs(attrs, true));
  RILL_RETURN_IF_ERROR(check_state(in[0]));
  return check_total(in[1]);
}

// Scalars and the state: whole on every device.
std::vector<SbpSignature> sbp_whole(const Attrs&, std::span<const TensorMeta> in) {
  return {math::uniform_signature(Sbp::broadcast(), static_cast<int>(in.size()))};
}
std::vector<SbpSignature> sbp_loss_scale(const Attrs&, std::span<const TensorMeta>) {
  return {{{Sbp::broadcast()}, {Sbp::broadcast()}}};
}
std::vector<SbpSignature> sbp_check(const Attrs&, std::span<const TensorMeta>) {
  const Sbp B = Sbp::broadcast();
  return {{{B, B}, {B, B, B, B}}};
}

Status cpu_loss_scale(KernelContext& ctx) {
  ctx.outputs[0].f32()[0] = loss_scale::scale(params_of<LossScaleParams>(ctx).exponent, ctx.inputs[0].f32());
  return {};
}

Status cpu_check(KernelContext& ctx) {
  const loss_scale::Check c = loss_scale::check(ctx.inputs[0].f32()[0], ctx.inputs[1].f32(),
                                                params_of<LossScaleParams>(ctx).exponent, ctx.step);
  ctx.outputs[0].f32()[0] = c.unscale;
  ctx.outputs[1].f32()[0] = c.unscaled_total;
  ctx.outputs[2].i32()[0] = c.gate;
  ctx.outputs[3].f32()[0] = c.skipped;
  return {};
}

Status cpu_update(KernelContext& ctx) {
  const LossScaleParams& p = params_of<LossScaleParams>(ctx);
  float* state = ctx.inputs[0].f32();
  if (!loss_scale::update(state, ctx.inputs[1].f32()[0], p.exponent, p.window))
    return loss_scale_fell(ctx.step);
  return {};
}

}  // namespace

Status loss_scale_fell(int64_t step) {
  return Status(
      Code::kFailedPrecondition,
      fmt::format("the loss scale fell below 1 at step {}: the gradients overflowed at every scale down to 1, so the loss or "
      "the model is not finite (lower the learning rate, or look for an inf or NaN in the data)",
      step));
}

const OpDef kLossScaleOp = {.type = "loss_scale", .num_inputs = 1, .num_outputs = 1, .infer = infer_loss_scale,
                            .sbp = sbp_loss_scale, .cpu = cpu_loss_scale, .cuda = "loss_scale",
                            .parse = parse_as<LossScaleParams>};
const OpDef kLossScaleCheckOp = {.type = "loss_scale_check", .num_inputs = 2, .num_outputs = 4,
                                 .infer = infer_check, .sbp = sbp_check, .cpu = cpu_check,
                                 .cuda = "loss_scale_check", .parse = parse_as<LossScaleParams>,
                                 .reads_step = true};
const OpDef kLossScaleUpdateOp = {.type = "loss_scale_update", .num_inputs = 2, .num_outputs = 0,
                                  .role = OpRole::kUpdate, .infer = infer_update, .sbp = sbp_whole,
                                  .cpu = cpu_update, .cuda = "loss_scale_update", .num_state = 0,
                                  .parse = parse_as<LossScaleParams>};

}  // namespace rill
