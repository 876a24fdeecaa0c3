// Ring attention's steps (compiler/ring_expansion.h), each the attention of
// a device's queries over the piece of keys it reads at that step, folded
// into the steps before it, so that one step follows another (each reads
// the last one's result) and no step's part outlives the next:
//
// attention_step(q, k, v, y_prev, lse_prev) -> (y, lse): `attention` of q
// over k and v (the causal mask by places in the whole sequence: a piece
// wholly in the queries' future gives nothing), joined with the steps
// before by log-sum-exps (attention_merge_math.h). attention_grad_step(q, k,
// v, y, lse, dy, dq_prev) -> (dq, dk, dv): `attention_grad` over k and v
// with the whole row's y and lse, dq added to the steps' before; dk and dv
// are this step's parts, which travel the ring back to their piece.
//
// Their leading axes split, or all is whole; made after autograd, they have
// no gradients of their own.
#include "kernels/ops/attention_cpu.h"
#include "kernels/ops/attention_merge_math.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_step(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(infer_op(kAttentionOp, attrs, in.first(3), out));
  if (in[3] != (*out)[0] || in[4] != (*out)[1])
    return invalid_argument("attention_step: the steps' y {} and lse {} so far must be f32 {} and {}",
                            shape_string(in[3].shape), shape_string(in[4].shape), shape_string((*out)[0].shape),
                            shape_string((*out)[1].shape));
  return {};
}

Status infer_grad_step(const Attrs& attrs, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(infer_op(kAttentionGradOp, attrs, in.first(6), out));
  if (in[6] != (*out)[0])
    return invalid_argument("attention_grad_step: the steps' dq {} so far must be f32 {}", shape_string(in[6].shape),
                            shape_string((*out)[0].shape));
  return {};
}

// attention's own splits (leading axes, or whole) over the step's tensors.
template <int kInputs, int kOutputs>
std::vector<SbpSignature> sbp_leading(const Attrs&, std::span<const TensorMeta> in) {
  return leading_splits(static_cast<int>(in[0].shape.size()), kInputs, kOutputs);
}

Status cpu_step(KernelContext& ctx) {
  RILL_RETURN_IF_ERROR(cpu_attention(ctx));
  const int64_t d = ctx.inputs[0].shape.back(), rows = ctx.outputs[1].size();
  const float *y_prev = ctx.inputs[3].f32(), *lse_prev = ctx.inputs[4].f32();
  float *y = ctx.outputs[0].f32(), *lse = ctx.outputs[1].f32();
  for (int64_t r = 0; r < rows; ++r)
    lse[r] = attention_merge::merge_row(y_prev + r * d, lse_prev[r], y + r * d, lse[r], y + r * d, d);
  return {};
}

Status cpu_grad_step(KernelContext& ctx) {
  RILL_RETURN_IF_ERROR(cpu_attention_grad(ctx));
  float* dq = ctx.outputs[0].f32();
  const float* before = ctx.inputs[6].f32();
  for (int64_t i = 0; i < ctx.outputs[0].size(); ++i) dq[i] += before[i];
  return {};
}

}  // namespace

const OpDef kAttentionStepOp = {
    .type = "attention_step",
    .num_inputs = 5,
    .num_outputs = 2,
    .infer = infer_step,
    .sbp = sbp_leading<5, 2>,
    .cpu = cpu_step,
    .cuda = "attention_step",
    .scratch_bytes = scratch_attention,
    .parse = parse_as<AttentionParams>,
};

const OpDef kAttentionGradStepOp = {
    .type = "attention_grad_step",
    .num_inputs = 7,
    .num_outputs = 3,
    .infer = infer_grad_step,
    .sbp = sbp_leading<7, 3>,
    .cpu = cpu_grad_step,
    .cuda = "attention_grad_step",
    .scratch_bytes = scratch_attention,
    .parse = parse_as<AttentionParams>,
};

}  // namespace rill
