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

// Each expert's share of first choices (f) and mean probability (P) in
// group g; `p` gets the group's probabilities, row after row.
void shares(const float* logits, int64_t s, int64_t e, std::vector<float>* p, std::vector<float>* f,
            std::vector<float>* mean) {
  p->resize(static_cast<size_t>(s * e));
  f->assign(static_cast<size_t>(e), 0.0f);
  mean->assign(static_cast<size_t>(e), 0.0f);
  for (int64_t t = 0; t < s; ++t) {
    float* row = p->data() + t * e;
    moe::softmax_row(logits + t * e, e, row);
    int32_t first = 0;
    moe::top_k(row, e, 1, &first);
    (*f)[static_cast<size_t>(first)] += 1.0f;
    for (int64_t i = 0; i < e; ++i) (*mean)[static_cast<size_t>(i)] += row[i];
  }
  for (int64_t i = 0; i < e; ++i) {
    (*f)[static_cast<size_t>(i)] /= static_cast<float>(s);
    (*mean)[static_cast<size_t>(i)] /= static_cast<float>(s);
  }
}

Status cpu_balance(KernelContext& ctx) {
  const TensorView& logits = ctx.inputs[0];
  const int64_t groups = logits.shape[0], s = logits.shape[1], e = logits.shape[2];
  std::vector<float> p, f, mean;
  for (int64_t g = 0; g < groups; ++g) {
    shares(logits.f32() + g * s * e, s, e, &p, &f, &mean);
    float sum = 0.0f;
    for (int64_t i = 0; i < e; ++i) sum += f[static_cast<size_t>(i)] * mean[static_cast<size_t>(i)];
    ctx.outputs[0].f32()[g] = static_cast<float>(e) * sum;
  }
  return {};
}

Status cpu_balance_grad(KernelContext& ctx) {
  const TensorView& logits = ctx.inputs[0];
  const int64_t groups = logits.shape[0], s = logits.shape[1], e = logits.shape[2];
  std::vector<float> p, f, mean;
  for (int64_t g = 0; g < groups; ++g) {
    shares(logits.f32() + g * s * e, s, e, &p, &f, &mean);
    const float scale = ctx.inputs[1].f32()[g] * static_cast<float>(e) / static_cast<float>(s);
    for (int64_t t = 0; t < s; ++t) {
      const float* row = p.data() + t * e;
      float expected = 0.0f;
      for (int64_t i = 0; i < e; ++i) expected += f[static_cast<size_t>(i)] * row[i];
      float* d = ctx.outputs[0].f32() + (g * s + t) * e;
      for (int64_t i = 0; i < e; ++i) d[i] = scale * row[i] * (f[static_cast<size_t>(i)] - expected);
    }
  }
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
  const TensorView& logits = ctx.inputs[0];
  const int64_t groups = logits.shape[0], s = logits.shape[1], e = logits.shape[2];
  std::vector<float> p(static_cast<size_t>(e));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t t = 0; t < s; ++t) {
      const float* row = logits.f32() + (g * s + t) * e;
      const float lse = moe::logsumexp_row(row, e);
      moe::softmax_row(row, e, p.data());
      const float scale = ctx.inputs[1].f32()[g] * 2.0f / static_cast<float>(s) * lse;
      float* d = ctx.outputs[0].f32() + (g * s + t) * e;
      for (int64_t i = 0; i < e; ++i) d[i] = scale * p[static_cast<size_t>(i)];
    }
  return {};
}

}  // namespace

const OpDef kMoeBalanceLossOp = {.type = "moe_balance_loss", .infer = infer_loss, .sbp = sbp_loss,
                                 .grad = grad_loss<kBalanceGrad>, .cpu = cpu_balance, .cuda = "moe_balance_loss"};
const OpDef kMoeBalanceLossGradOp = {.type = "moe_balance_loss_grad", .num_inputs = 2, .infer = infer_loss_grad,
                                     .sbp = sbp_loss_grad, .cpu = cpu_balance_grad, .cuda = "moe_balance_loss_grad"};
const OpDef kMoeZLossOp = {.type = "moe_z_loss", .infer = infer_loss, .sbp = sbp_loss, .grad = grad_loss<kZGrad>,
                           .cpu = cpu_z, .cuda = "moe_z_loss"};
const OpDef kMoeZLossGradOp = {.type = "moe_z_loss_grad", .num_inputs = 2, .infer = infer_loss_grad,
                               .sbp = sbp_loss_grad, .cpu = cpu_z_grad, .cuda = "moe_z_loss_grad"};

}  // namespace rill
