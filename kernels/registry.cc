// The explicit list of every op type. Adding an op: define its OpDef in its own
// file under kernels/ops/ and list it here.
#include <cmath>
#include <algorithm>
#include <array>

#include "kernels/op.h"
#include "kernels/ops/ops.h"

namespace rill {
namespace {

const auto kAllOps = std::to_array<const OpDef*>({
    &kMatmulOp,
    &kReshapeOp, &kTransposeOp, &kIdentityOp, &kDependOp, &kSliceOp, &kSliceGradOp, &kConcatOp, &kZigzagOp,
    &kFillOp, &kUniformOp, &kNormalOp, &kXavierUniformOp, &kKaimingUniformOp,
    &kSgdUpdateOp, &kMomentumUpdateOp, &kAdamUpdateOp,
    &kAddOp, &kSubOp, &kMulOp, &kBiasAddOp, &kScaleOp, &kAccumulateOp, &kOnesLikeOp, &kCastOp,
    &kReluOp, &kGeluOp, &kGeluTanhOp, &kTanhOp, &kSigmoidOp, &kSoftmaxOp,
    &kReluGradOp, &kGeluGradOp, &kGeluTanhGradOp, &kTanhGradOp, &kSigmoidGradOp, &kSoftmaxGradOp,
    &kSparseSoftmaxCrossEntropyOp, &kSparseSoftmaxCrossEntropyGradOp, &kMseLossOp, &kMseLossGradOp, &kAccuracyOp,
    &kLayerNormOp, &kLayerNormGradOp, &kAttentionOp, &kAttentionGradOp, &kAttentionStepOp, &kAttentionGradStepOp, &kDropoutOp,
    &kBiasGeluTanhOp, &kBiasGeluTanhGradOp, &kSumSquaresOp, &kAddNOp, &kClipFactorOp, &kLossScaleOp, &kLossScaleCheckOp, &kLossScaleUpdateOp,
    &kReduceSumOp, &kReduceMeanOp, &kBroadcastLikeOp,
    &kAllReduceOp, &kAllGatherOp, &kReduceScatterOp,
    &kEmbeddingOp, &kEmbeddingGradOp, &kEmbeddingMaskOp,
    &kMoeRouteOp, &kMoeRouteGradOp, &kMoeDispatchOp, &kMoeCombineOp, &kMoeGateGradOp,
    &kMoeBalanceLossOp, &kMoeBalanceLossGradOp, &kMoeZLossOp, &kMoeZLossGradOp,
    // OP-LIST: keep sorted by group; see kernels/ops/ops.h.
});

}  // namespace

const OpDef* find_op(std::string_view type) {
  for (const OpDef* def : kAllOps)
    if (type == def->type) return def;
  return nullptr;
}

std::span<const OpDef* const> all_ops() { return kAllOps; }

StatusOr<OpParams> parse_params(const OpDef& def, const Attrs& attrs) {
  if (def.parse == nullptr) return OpParams();
  auto parsed = def.parse(attrs);
  if (!parsed.ok()) return parsed.status().with_context(fmt::format("op '{}'", def.type));
  return parsed;
}

Status infer_op(const OpDef& def, const Attrs& attrs, std::span<const TensorMeta> inputs,
                std::vector<TensorMeta>* outputs) {
  int n = static_cast<int>(inputs.size());
  if (def.num_inputs >= 0 && n != def.num_inputs)
    return invalid_argument("op '{}' takes {} input(s), got {}", def.type, def.num_inputs, n);
  if (def.num_inputs < 0 && n < 1) return invalid_argument("op '{}' takes at least one input", def.type);
  // A NaN or infinite constant (an init value, a scale, a learning rate)
  // would train to a NaN loss; refuse it where it is written.
  for (const auto& [name, value] : attrs.values())
    if (const double* f = std::get_if<double>(&value); f && !std::isfinite(*f))
      return invalid_argument("op '{}': attribute '{}' is {}; it must be finite", def.type, name, *f);
  outputs->clear();
  Status s = def.infer(attrs, inputs, outputs);
  if (!s.ok()) return s.with_context(fmt::format("op '{}'", def.type));
  if (static_cast<int>(outputs->size()) != def.num_outputs)
    return internal_error("op '{}' inferred {} outputs, declares {}", def.type, outputs->size(), def.num_outputs);
  for (size_t i = 0; i < outputs->size(); ++i)
    if (checked_bytes((*outputs)[i].shape, (*outputs)[i].dtype) < 0)
      return invalid_argument("op '{}': output {} of shape {} is over the largest tensor of {} bytes", def.type, i,
                              shape_string((*outputs)[i].shape), kMaxTensorBytes);
  return {};
}

}  // namespace rill
