// The router's auxiliary losses, per group of tokens (kernels/ops/moe.cc),
// each [G] for the job to average and weigh into its loss:
//   moe_balance_loss(logits [G, S, E]) -> [G]: Switch Transformer's load
//     balancing, E sum_e f_e P_e, f_e the fraction of the group's tokens
//     whose first choice is e (not differentiated), P_e the mean of their
//     probabilities of e; 1 when balanced, up to E when one expert takes all.
//   moe_z_loss(logits) -> [G]: ST-MoE's router z-loss, the mean over the
//     group's tokens of logsumexp(logits)^2, which keeps the logits small.
// Their gradients (logits, dloss [G]) -> dlogits: with p a row's softmax,
//   balance: dloss E / S p_i (f_i - sum_e f_e p_e); z: dloss 2 / S lse p_i.
// SBP: by groups, or whole.
#include <vector>

#include "kernels/ops/op_params.h"

#include "kernels/ops/moe_math.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_loss(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  const TensorMeta& logits = in[0];
  if (logits.dtype != DType::kF32 || logits.shape.size() != 3 || logits.shape[1] < 1 || logits.shape[2] < 1 ||
      logits.shape[2] > 1024)
    return invalid_argument("logits must be f32 [groups, tokens, experts] with 1 to 1024 experts, got {} {}",
                            dtype_name(logits.dtype), shape_string(logits.shape));
  out->push_back({{logits.shape[0]}, DType::kF32});
  return {};
}

Status infer_loss_grad(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  std::vector<TensorMeta> forward;
  RILL_RETURN_IF_ERROR(infer_loss(attrs, in.first(1), &forward));
  if (in[1].dtype != DType::kF32 || in[1].shape != forward[0].shape)
    return invalid_argument("dloss must be f32 {}, got {} {}", shape_string(forward[0].shape), dtype_name(in[1].dtype),
                            shape_string(in[1].shape));
  out->push_back(in[0]);
  return {};
}

std::vector<SbpSignature> sbp_loss(const Attrs&, std::span<const TensorMeta>) {
  return {{{Sbp::split(0)}, {Sbp::split(0)}}, {{Sbp::broadcast()}, {Sbp::broadcast()}}};
}
std::vector<SbpSignature> sbp_loss_grad(const Attrs&, std::span<const TensorMeta>) {
  return {{{Sbp::split(0), Sbp::split(0)}, {Sbp::split(0)}},
          {{Sbp::broadcast(), Sbp::broadcast()}, {Sbp::broadcast()}}};
}

template <const char* kGrad>
Status grad_loss(GradBuilder& g) {
  const std::string dloss = g.output_grad(0);
  if (dloss.empty() || !g.needs_input_grad(0)) return {};
  g.set_input_grad(0, g.add_op(kGrad, {g.input(0), dloss})[0]);
  return {};
}
constexpr char kBalanceGrad[] = "moe_balance_loss_grad";
constexpr char kZGrad[] = "moe_z_loss_grad";

// Scratch: three rows of E (the probabilities, f and P; moe_math.h).
size_t scratch_loss(const Attrs&, std::span<const TensorMeta> in) {
  return 3 * static_cast<size_t>(in[0].shape.back()) * sizeof(float);
}

// The kernels' shapes and scratch; nullptr scratch where it is too small.
struct Groups {
  int64_t groups, s, e;
  float* p;
  explicit Groups(const KernelContext& ctx)
      : groups(ctx.inputs[0].shape[0]), s(ctx.inputs[0].shape[1]), e(ctx.inputs[0].shape[2]),
        p(scratch_as<float>(ctx, 3 * static_cast<size_t>(e))) {}
  Status check(const KernelContext& ctx, const char* op) const {
    if (p == nullptr) return internal_error("{}: {} bytes of scratch for {} experts", op, ctx.scratch.size(), e);
    return {};
  }
};

Status cpu_balance(KernelContext& ctx) {
  const Groups n(ctx);
  RILL_RETURN_IF_ERROR(n.check(ctx, "moe_balance_loss"));
  for (int64_t g = 0; g < n.groups; ++g)
    ctx.outputs[0].f32()[g] =
        moe::balance_group(ctx.inputs[0].f32() + g * n.s * n.e, n.s, n.e, n.p, n.p + n.e, n.p + 2 * n.e);
  return {};
}

Status cpu_balance_grad(KernelContext& ctx) {
  const Groups n(ctx);
  RILL_RETURN_IF_ERROR(n.check(ctx, "moe_balance_loss_grad"));
  for (int64_t g = 0; g < n.groups; ++g)
    moe::balance_grad_group(ctx.inputs[0].f32() + g * n.s * n.e, n.s, n.e, ctx.inputs[1].f32()[g], n.p, n.p + n.e,
                            n.p + 2 * n.e, ctx.outputs[0].f32() + g * n.s * n.e);
  return {};
}

Status cpu_z(KernelContext& ctx) {
  const TensorView& logits = ctx.inputs[0];
  const int64_t groups = logits.shape[0], s = logits.shape[1], e = logits.shape[2];
  for (int64_t g = 0; g < groups; ++g) {
    float sum = 0.0f;
    for (int64_t t = 0; t < s; ++t) {
      const float lse = moe::logsumexp_row(logits.f32() + (g * s + t) * e, e);
      sum += lse * lse;
    }
    ctx.outputs[0].f32()[g] = sum / static_cast<float>(s);
  }
  return {};
}

Status cpu_z_grad(KernelContext& ctx) {
  const Groups n(ctx);
  RILL_RETURN_IF_ERROR(n.check(ctx, "moe_z_loss_grad"));
  for (int64_t t = 0; t < n.groups * n.s; ++t)
    moe::z_grad_row(ctx.inputs[0].f32() + t * n.e, n.s, n.e, ctx.inputs[1].f32()[t / n.s], n.p,
                    ctx.outputs[0].f32() + t * n.e);
  return {};
}

}  // namespace

const OpDef kMoeBalanceLossOp = {.type = "moe_balance_loss", .infer = infer_loss, .sbp = sbp_loss,
                                 .grad = grad_loss<kBalanceGrad>, .cpu = cpu_balance, .cuda = "moe_balance_loss", .scratch_bytes = scratch_loss};
const OpDef kMoeBalanceLossGradOp = {.type = "moe_balance_loss_grad", .num_inputs = 2, .infer = infer_loss_grad,
                                     .sbp = sbp_loss_grad, .cpu = cpu_balance_grad, .cuda = "moe_balance_loss_grad", .scratch_bytes = scratch_loss};
const OpDef kMoeZLossOp = {.type = "moe_z_loss", .infer = infer_loss, .sbp = sbp_loss, .grad = grad_loss<kZGrad>,
                           .cpu = cpu_z, .cuda = "moe_z_loss"};
const OpDef kMoeZLossGradOp = {.type = "moe_z_loss_grad", .num_inputs = 2, .infer = infer_loss_grad,
                               .sbp = sbp_loss_grad, .cpu = cpu_z_grad, .cuda = "moe_z_loss_grad", .scratch_bytes = scratch_loss};

}  // namespace rill
