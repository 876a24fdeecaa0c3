// The explicit list of every op type. Adding an op: define its OpDef in its own
// file under kernels/ops/ and list it here.
#include <algorithm>
#include <array>

#include "kernels/op.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

const auto kAllOps = std::to_array<const OpDef*>({
    &kMatmulOp,
    &kReshapeOp, &kTransposeOp, &kIdentityOp, &kSliceOp, &kSliceGradOp, &kConcatOp,
    &kFillOp, &kUniformOp, &kNormalOp, &kXavierUniformOp, &kKaimingUniformOp,
    &kSgdUpdateOp, &kMomentumUpdateOp, &kAdamUpdateOp,
    &kAddOp, &kSubOp, &kMulOp, &kBiasAddOp, &kScaleOp, &kOnesLikeOp,
    &kReluOp, &kGeluOp, &kTanhOp, &kSigmoidOp, &kSoftmaxOp,
    &kReluGradOp, &kGeluGradOp, &kTanhGradOp, &kSigmoidGradOp, &kSoftmaxGradOp,
    &kSparseSoftmaxCrossEntropyOp, &kSparseSoftmaxCrossEntropyGradOp, &kMseLossOp, &kMseLossGradOp, &kAccuracyOp,
    &kReduceSumOp, &kReduceMeanOp, &kBroadcastLikeOp,
    // OP-LIST: keep sorted by group; see kernels/ops/ops.h.
});

}  // namespace

const OpDef* find_op(std::string_view type) {
  for (const OpDef* def : kAllOps)
    if (type == def->type) return def;
  return nullptr;
}

std::span<const OpDef* const> all_ops() { return kAllOps; }

Status infer_op(const OpDef& def, const Attrs& attrs, std::span<const TensorMeta> inputs,
                std::vector<TensorMeta>* outputs) {
  int n = static_cast<int>(inputs.size());
  if (def.num_inputs >= 0 && n != def.num_inputs)
    return invalid_argument("op '{}' takes {} input(s), got {}", def.type, def.num_inputs, n);
  if (def.num_inputs < 0 && n < 1) return invalid_argument("op '{}' takes at least one input", def.type);
  outputs->clear();
  Status s = def.infer(attrs, inputs, outputs);
  if (!s.ok()) return s.with_context(fmt::format("op '{}'", def.type));
  if (static_cast<int>(outputs->size()) != def.num_outputs)
    return internal_error("op '{}' inferred {} outputs, declares {}", def.type, outputs->size(), def.num_outputs);
  return {};
}

}  // namespace rill
