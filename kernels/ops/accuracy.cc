// accuracy: logits [..., C] f32, labels [...] i32 -> scalar f32, the
// fraction of rows whose argmax (first on ties) equals the label. It divides
// by the LOGICAL number of rows, so the pieces of a batch split over devices sum (P) to the
// single-device value. Not differentiable.
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_accuracy(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  RILL_RETURN_IF_ERROR(math::check_logits_labels(in[0], in[1]));
  out->push_back({{}, DType::kF32});
  return {};
}

std::vector<SbpSignature> sbp_accuracy(const Attrs&, std::span<const TensorMeta> in) {
  std::vector<SbpSignature> sigs;
  for (int a = 0; a < static_cast<int>(in[1].shape.size()); ++a)
    sigs.push_back({{Sbp::split(a), Sbp::split(a)}, {Sbp::partial_sum()}});
  sigs.push_back(math::uniform_signature(Sbp::broadcast(), 2));
  return sigs;
}

Status cpu_accuracy(KernelContext& ctx) {
  const TensorView& logits = ctx.inputs[0];
  const int64_t rows = ctx.inputs[1].size(), cols = logits.shape.back();
  const int32_t* labels = ctx.inputs[1].i32();
  RILL_RETURN_IF_ERROR(math::check_labels("accuracy", labels, rows, cols));
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.f32() + r * cols;
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == labels[r];
  }
  const int64_t logical_rows = num_elements(ctx.logical_inputs[1]);
  ctx.outputs[0].f32()[0] = logical_rows > 0 ? static_cast<float>(correct) / static_cast<float>(logical_rows) : 0.0f;
  return {};
}

}  // namespace

const OpDef kAccuracyOp = {
    .type = "accuracy",
    .num_inputs = 2,
    .num_outputs = 1,
    .infer = infer_accuracy,
    .sbp = sbp_accuracy,
    .cpu = cpu_accuracy,
    .cuda = "accuracy",
    .index_bound = math::labels_bound,
};

}  // namespace rill
