// sparse_softmax_cross_entropy: logits [..., C] f32, labels [...] i32 ->
// loss [...], per row loss_n = logsumexp(logits_n) - logits_n[label_n],
// computed stably ([N, C] rows, or a language model's [B, T, V]).
// sparse_softmax_cross_entropy_grad(logits, labels, dloss) -> dlogits, per row
// (softmax(logits_n) - onehot(label_n)) * dloss_n, recomputed from the logits:
// no probabilities are kept between the two. Labels get no gradient.

#include "kernels/ops/cpu_clones.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/softmax_math.h"

namespace rill {
namespace {

Status infer_ce(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_logits_labels(in[0], in[1]));
  out->push_back({in[1].shape, DType::kF32});
  return {};
}

Status infer_ce_grad(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_logits_labels(in[0], in[1]));
  if (in[2].dtype != DType::kF32 || in[2].shape != in[1].shape)
    return invalid_argument("dloss {} {} must be f32 shaped like labels {}", shape_string(in[2].shape),
                            dtype_name(in[2].dtype), shape_string(in[1].shape));
  out->push_back(in[0]);
  return {};
}

// Rows split on any of the labels' axes.
std::vector<SbpSignature> sbp_ce(const Attrs&, std::span<const TensorMeta> in) {
  return math::split_or_broadcast(static_cast<int>(in[1].shape.size()), 2);
}

std::vector<SbpSignature> sbp_ce_grad(const Attrs&, std::span<const TensorMeta> in) {
  const Sbp B = Sbp::broadcast(), P = Sbp::partial_sum();
  auto sigs = math::split_or_broadcast(static_cast<int>(in[1].shape.size()), 3);
  sigs.push_back({{B, B, P}, {P}});  // linear in dloss
  return sigs;
}

Status grad_ce(GradBuilder& g) {
  const std::string dloss = g.output_grad(0);
  if (dloss.empty() || !g.needs_input_grad(0)) return {};
  g.set_input_grad(0, g.add_op("sparse_softmax_cross_entropy_grad", {g.input(0), g.input(1), dloss})[0]);
  return {};
}

// The row loops, each run through the copy for this CPU (cpu_clones.h).
void ce_rows(const float* logits, const int32_t* labels, float* loss, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) loss[r] = softmax_math::cross_entropy_row(logits + r * cols, cols, labels[r]);
}

void ce_grad_rows(const float* logits, const int32_t* labels, const float* dloss, float* dlogits, int64_t rows,
                  int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    softmax_math::cross_entropy_grad_row(logits + r * cols, cols, labels[r], dloss[r], dlogits + r * cols);
}

Status cpu_ce(KernelContext& ctx) {
  const TensorView& logits = ctx.inputs[0];
  const int64_t rows = ctx.inputs[1].size(), cols = logits.shape.back();
  const int32_t* labels = ctx.inputs[1].i32();
  RILL_RETURN_IF_ERROR(math::check_labels("sparse_softmax_cross_entropy", labels, rows, cols));
  float* loss = ctx.outputs[0].f32();
  cpu_clones::run<ce_rows>(logits.f32(), labels, loss, rows, cols);
  return {};
}

Status cpu_ce_grad(KernelContext& ctx) {
  const TensorView& logits = ctx.inputs[0];
  const int64_t rows = ctx.inputs[1].size(), cols = logits.shape.back();
  const int32_t* labels = ctx.inputs[1].i32();
  RILL_RETURN_IF_ERROR(math::check_labels("sparse_softmax_cross_entropy_grad", labels, rows, cols));
  const float* dloss = ctx.inputs[2].f32();
  float* dlogits = ctx.outputs[0].f32();
  cpu_clones::run<ce_grad_rows>(logits.f32(), labels, dloss, dlogits, rows, cols);
  return {};
}

}  // namespace

const OpDef kSparseSoftmaxCrossEntropyOp = {
    .type = "sparse_softmax_cross_entropy",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_ce,
    .sbp = sbp_ce,
    .grad = grad_ce,
    .cpu = cpu_ce,
    .cuda = "sparse_softmax_cross_entropy",
    .index_bound = math::labels_bound,
};

const OpDef kSparseSoftmaxCrossEntropyGradOp = {
    .type = "sparse_softmax_cross_entropy_grad",
    .num_inputs = 3,
    .num_outputs = 1,
    .infer = infer_ce_grad,
    .sbp = sbp_ce_grad,
    .cpu = cpu_ce_grad,
    .cuda = "sparse_softmax_cross_entropy_grad",
    .index_bound = math::labels_bound,
};

}  // namespace rill
