// Optimizer update ops (sgd_update, momentum_update, adam_update): input 0 is a
// variable, updated in place; input 1 is its gradient. State tensors
// (momentum buffer, Adam's m and v) live in KernelContext::state, shaped like
// the variable and zeroed by the runtime before step 0. Formulas follow
// PyTorch's torch.optim (SGD without dampening or Nesterov; Adam without
// amsgrad), with weight decay added to the gradient (L2), except that
// adam_update with the int attr `decoupled` 1 is AdamW: the variable shrinks
// by lr * weight_decay before the step, the gradient untouched. Every update
// takes its step's rate from the schedule in its attrs (lr_schedule.h).
// Updates are elementwise, so a variable split on any axis updates piecewise.
// Under loss scaling (compiler/gradient_norm.h) an update has a third input,
// the step's gate (i32 []): 0 skips the update (an overflowed step),
// else it is the update's number, Adam's t in its bias corrections.
#include <cmath>

#include "kernels/ops/attr_read.h"
#include "kernels/ops/adam_step.h"
#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

// Checks that `name` is a finite number in [min, max) (max_open) or [min, max].
Status check_range(const Attrs& attrs, const std::string& name, double fallback, double min, double max,
                   bool max_open) {
  RILL_ASSIGN_OR_RETURN(double value, read_float(attrs, name, fallback));
  bool above_max = max_open ? value >= max : value > max;
  if (!std::isfinite(value) || value < min || above_max)
    return invalid_argument("attr '{}' = {} must be in [{}, {}{}", name, value, min, max, max_open ? ")" : "]");
  return {};
}

constexpr double kUnbounded = HUGE_VAL;

Status update_infer_common(std::span<const TensorMeta> inputs) {
  if (inputs.size() != 2 && inputs.size() != 3)
    return invalid_argument("an update reads the variable, its gradient and at most a gate, got {} inputs",
                            inputs.size());
  if (inputs.size() == 3 && (inputs[2].dtype != DType::kI32 || !math::is_scalar_shape(inputs[2].shape)))
    return invalid_argument("the gate must be an i32 scalar, got {} {}", dtype_name(inputs[2].dtype),
                            shape_string(inputs[2].shape));
  const TensorMeta& var = inputs[0];
  const TensorMeta& grad = inputs[1];
  if (var.shape != grad.shape)
    return invalid_argument("variable shape {} and gradient shape {} differ", shape_string(var.shape),
                            shape_string(grad.shape));
  if (var.dtype != DType::kF32 || grad.dtype != DType::kF32)
    return invalid_argument("variable ({}) and gradient ({}) must be f32", dtype_name(var.dtype),
                            dtype_name(grad.dtype));
  return {};
}

Status check_schedule(const Attrs& attrs) {
  RILL_RETURN_IF_ERROR(check_range(attrs, "min_lr", 0.0, 0, kUnbounded, false));
  RILL_ASSIGN_OR_RETURN(int64_t warmup, read_int(attrs, "warmup_steps", 0));
  RILL_ASSIGN_OR_RETURN(int64_t decay, read_int(attrs, "decay_steps", 0));
  if (warmup < 0 || decay < 0) return invalid_argument("warmup_steps {} and decay_steps {} must be >= 0", warmup, decay);
  return {};
}

Status sgd_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>*) {
  RILL_RETURN_IF_ERROR(update_infer_common(inputs));
  RILL_RETURN_IF_ERROR(check_schedule(attrs));
  RILL_RETURN_IF_ERROR(check_range(attrs, "lr", 0.01, 0, kUnbounded, false));
  return check_range(attrs, "weight_decay", 0.0, 0, kUnbounded, false);
}

Status momentum_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  RILL_RETURN_IF_ERROR(sgd_infer(attrs, inputs, outputs));
  return check_range(attrs, "momentum", 0.9, 0, 1, false);
}

Status adam_infer(const Attrs& attrs, std::span<const TensorMeta> inputs, std::vector<TensorMeta>* outputs) {
  RILL_RETURN_IF_ERROR(update_infer_common(inputs));
  RILL_RETURN_IF_ERROR(check_schedule(attrs));
  RILL_RETURN_IF_ERROR(math::check_bool_attr(attrs, "decoupled"));
  RILL_RETURN_IF_ERROR(check_range(attrs, "lr", 0.001, 0, kUnbounded, false));
  RILL_RETURN_IF_ERROR(check_range(attrs, "weight_decay", 0.0, 0, kUnbounded, false));
  RILL_RETURN_IF_ERROR(check_range(attrs, "beta1", 0.9, 0, 1, true));
  RILL_RETURN_IF_ERROR(check_range(attrs, "beta2", 0.999, 0, 1, true));
  return check_range(attrs, "epsilon", 1e-8, 0, kUnbounded, false);
}

// The variable and its gradient always share one SBP: B, or S(a) on any
// axis; a gate is whole everywhere.
std::vector<SbpSignature> update_sbp(const Attrs&, std::span<const TensorMeta> inputs) {
  const bool gated = inputs.size() > 2;
  auto signature = [&](Sbp s) {
    SbpSignature sig{{s, s}, {}};
    if (gated) sig.inputs.push_back(Sbp::broadcast());
    return sig;
  };
  std::vector<SbpSignature> sigs = {signature(Sbp::broadcast())};
  for (size_t a = 0; a < inputs[0].shape.size(); ++a) sigs.push_back(signature(Sbp::split(static_cast<int>(a))));
  return sigs;
}

// Checks the physical views agree before an update touches memory.
Status check_update_views(const KernelContext& ctx, size_t num_state) {
  const TensorView& var = ctx.inputs[0];
  if (ctx.inputs[1].size() != var.size() || ctx.state.size() != num_state)
    return internal_error("update of {} with gradient {} and {} state tensor(s) (want {})", shape_string(var.shape),
                          shape_string(ctx.inputs[1].shape), ctx.state.size(), num_state);
  for (const TensorView& s : ctx.state)
    if (s.size() != var.size())
      return internal_error("update of {}: state tensor has shape {}", shape_string(var.shape), shape_string(s.shape));
  return {};
}

// The update's number (Adam's t): the gate's, or step + 1 without one; 0 skips it.
int64_t update_number(const KernelContext& ctx) {
  return ctx.inputs.size() > 2 ? ctx.inputs[2].i32()[0] : ctx.step + 1;
}

Status sgd_kernel(KernelContext& ctx) {
  RILL_RETURN_IF_ERROR(check_update_views(ctx, 0));
  if (update_number(ctx) == 0) return {};
  const SgdParams& p = params_of<SgdParams>(ctx);
  const double lr = lr_at(p.lr, ctx.step), decay = p.weight_decay;
  float* w = ctx.inputs[0].f32();
  const float* g = ctx.inputs[1].f32();
  for (int64_t i = 0, n = ctx.inputs[0].size(); i < n; ++i)
    w[i] = static_cast<float>(w[i] - lr * (g[i] + decay * w[i]));
  return {};
}

Status momentum_kernel(KernelContext& ctx) {
  RILL_RETURN_IF_ERROR(check_update_views(ctx, 1));
  if (update_number(ctx) == 0) return {};
  const SgdParams& p = params_of<SgdParams>(ctx);
  const double lr = lr_at(p.lr, ctx.step), decay = p.weight_decay, mu = p.momentum;
  float* w = ctx.inputs[0].f32();
  const float* g = ctx.inputs[1].f32();
  float* v = ctx.state[0].f32();
  for (int64_t i = 0, n = ctx.inputs[0].size(); i < n; ++i) {
    // PyTorch starts the buffer at the first gradient; a zeroed buffer gives the same.
    double velocity = mu * v[i] + (g[i] + decay * w[i]);
    v[i] = static_cast<float>(velocity);
    w[i] = static_cast<float>(w[i] - lr * velocity);
  }
  return {};
}

// Adam's elementwise loop, in double as PyTorch's CPU kernel computes it,
// run through the copy for this CPU (cpu_clones.h): every copy gives the
// baseline's bits (sqrt and division are IEEE in every instruction set;
// the build keeps contraction off and math errno unset, so the loop
// vectorizes).
void adam_loop(float* w, const float* g, float* m, float* v, int64_t n, AdamStep s) {
  for (int64_t i = 0; i < n; ++i) {
    const double w_i = s.shrink * w[i];  // AdamW shrinks the variable; Adam adds the decay to the gradient
    const double grad = g[i] + s.decay * w_i;
    const double m_i = s.beta1 * m[i] + (1.0 - s.beta1) * grad;
    const double v_i = s.beta2 * v[i] + (1.0 - s.beta2) * grad * grad;
    m[i] = static_cast<float>(m_i);
    v[i] = static_cast<float>(v_i);
    w[i] = static_cast<float>(w_i - s.step_size * m_i / (std::sqrt(v_i) / s.correction2_sqrt + s.eps));
  }
}

Status adam_kernel(KernelContext& ctx) {
  RILL_RETURN_IF_ERROR(check_update_views(ctx, 2));
  const int64_t t = update_number(ctx);
  if (t == 0) return {};
  const AdamStep s = adam_step(params_of<AdamParams>(ctx), ctx.step, t);
  cpu_clones::run<adam_loop>(ctx.inputs[0].f32(), static_cast<const float*>(ctx.inputs[1].f32()), ctx.state[0].f32(),
                             ctx.state[1].f32(), ctx.inputs[0].size(), s);
  return {};
}

}  // namespace

const OpDef kSgdUpdateOp = {.type = "sgd_update",
                            .num_inputs = -1,
                            .num_outputs = 0,
                            .role = OpRole::kUpdate,
                            .infer = sgd_infer,
                            .sbp = update_sbp,
                            .cpu = sgd_kernel,
                            .cuda = "sgd_update",
                            .num_state = 0,
                            .parse = parse_as<SgdParams>};
const OpDef kMomentumUpdateOp = {.type = "momentum_update",
                                 .num_inputs = -1,
                                 .num_outputs = 0,
                                 .role = OpRole::kUpdate,
                                 .infer = momentum_infer,
                                 .sbp = update_sbp,
                                 .cpu = momentum_kernel,
                                 .cuda = "momentum_update",
                                 .num_state = 1,
                                 .state_names = {"momentum", nullptr},
                                 .parse = parse_as<SgdParams>};
const OpDef kAdamUpdateOp = {.type = "adam_update",
                             .num_inputs = -1,
                             .num_outputs = 0,
                             .role = OpRole::kUpdate,
                             .infer = adam_infer,
                             .sbp = update_sbp,
                             .cpu = adam_kernel,
                             .cuda = "adam_update",
                             .num_state = 2,
                             .state_names = {"adam_m", "adam_v"},
                             .parse = parse_as<AdamParams>};

}  // namespace rill
