// attention_merge(y_a, lse_a, y_b, lse_b) -> (y, lse): joins two parts of
// one attention (the same queries over two sets of keys, as `attention`
// returns each) into the attention over all their keys, by the parts'
// log-sum-exps (attention_merge_math.h). y [..., T, D], lse [..., T]. Ring
// attention (compiler/ring_expansion.h) folds each step's part into the
// steps before with it. Every axis but D splits, the four alike; it is
// made after autograd and has no gradient of its own (the ring's backward
// reads the merged y and lse).
#include "kernels/ops/attention_merge_math.h"
#include "kernels/ops/math_util.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

Status infer_merge(const Attrs&, std::span<const TensorMeta> in, std::vector<TensorMeta>* out) {
  const Shape& y = in[0].shape;
  const Shape rows = y.empty() ? Shape{} : Shape(y.begin(), y.end() - 1);
  for (const TensorMeta* m : {&in[0], &in[1], &in[2], &in[3]})
    if (m->dtype != DType::kF32)
      return invalid_argument("attention_merge takes f32 parts; got {}", dtype_name(m->dtype));
  if (y.size() < 2 || in[2].shape != y || in[1].shape != rows || in[3].shape != rows)
    return invalid_argument("attention_merge: y_a {} and y_b {} must be [..., T, D] alike, lse_a {} and lse_b {} [..., T]",
                            shape_string(y), shape_string(in[2].shape), shape_string(in[1].shape),
                            shape_string(in[3].shape));
  out->push_back(in[0]);
  out->push_back(in[1]);
  return {};
}

// A row is merged where it lies: any axis of the rows splits.
std::vector<SbpSignature> sbp_merge(const Attrs&, std::span<const TensorMeta> in) {
  std::vector<SbpSignature> sigs;
  for (int a = 0; a + 1 < static_cast<int>(in[0].shape.size()); ++a)
    sigs.push_back(math::uniform_signature(Sbp::split(a), 4, 2));
  sigs.push_back(math::uniform_signature(Sbp::broadcast(), 4, 2));
  return sigs;
}

Status cpu_merge(KernelContext& ctx) {
  const TensorView& ya = ctx.inputs[0];
  const int64_t d = ya.shape.back(), rows = ctx.inputs[1].size();
  const float *la = ctx.inputs[1].f32(), *yb = ctx.inputs[2].f32(), *lb = ctx.inputs[3].f32();
  float *y = ctx.outputs[0].f32(), *lse = ctx.outputs[1].f32();
  for (int64_t r = 0; r < rows; ++r)
    lse[r] = attention_merge::merge_row(ya.f32() + r * d, la[r], yb + r * d, lb[r], y + r * d, d);
  return {};
}

}  // namespace

const OpDef kAttentionMergeOp = {
    .type = "attention_merge",
    .num_inputs = 4,
    .num_outputs = 2,
    .infer = infer_merge,
    .sbp = sbp_merge,
    .cpu = cpu_merge,
    .cuda = "attention_merge",
};

}  // namespace rill
