// Declarations of every built-in OpDef, one per op type, defined in the
// files of this folder and listed in kernels/registry.cc.
#pragma once

#include "kernels/op.h"

namespace rill {

extern const OpDef kMatmulOp;
extern const OpDef kReshapeOp, kTransposeOp, kIdentityOp, kDependOp, kSliceOp, kSliceGradOp, kConcatOp,
    kZigzagOp;  // layout
extern const OpDef kFillOp, kUniformOp, kNormalOp, kXavierUniformOp, kKaimingUniformOp;  // initializers
extern const OpDef kSgdUpdateOp, kMomentumUpdateOp, kAdamUpdateOp;  // optimizer updates
extern const OpDef kAddOp, kSubOp, kMulOp, kBiasAddOp, kScaleOp, kAccumulateOp, kOnesLikeOp;  // elementwise math
extern const OpDef kCastOp;  // between float dtypes (f32, bf16, f16)
extern const OpDef kReluOp, kGeluOp, kGeluTanhOp, kTanhOp, kSigmoidOp, kSoftmaxOp;  // activations
extern const OpDef kBiasGeluTanhOp, kBiasGeluTanhGradOp;  // bias_add and gelu_tanh fused (compiler/fusion.h)
extern const OpDef kReluGradOp, kGeluGradOp, kGeluTanhGradOp, kTanhGradOp, kSigmoidGradOp, kSoftmaxGradOp;  // their gradients
extern const OpDef kSparseSoftmaxCrossEntropyOp, kSparseSoftmaxCrossEntropyGradOp, kMseLossOp, kMseLossGradOp,
    kAccuracyOp;  // losses and metrics
extern const OpDef kLayerNormOp, kLayerNormGradOp;  // normalization
extern const OpDef kAttentionOp, kAttentionGradOp;  // fused scaled dot-product attention
extern const OpDef kAttentionStepOp, kAttentionGradStepOp;  // ring attention's steps
extern const OpDef kDropoutOp;                      // regularization
extern const OpDef kSumSquaresOp, kAddNOp, kClipFactorOp;  // clipping by the global norm
extern const OpDef kLossScaleOp, kLossScaleCheckOp, kLossScaleUpdateOp;  // dynamic loss scaling
// The error of a loss scale that fell below 1 at `step` (its CPU and CUDA kernels).
Status loss_scale_fell(int64_t step);
extern const OpDef kReduceSumOp, kReduceMeanOp, kBroadcastLikeOp;  // reductions
extern const OpDef kAllReduceOp, kAllGatherOp, kReduceScatterOp;  // collectives (the mirrored view)
extern const OpDef kEmbeddingOp, kEmbeddingGradOp, kEmbeddingMaskOp;  // lookups
// A collective op's `reduce` attr as comm::ReduceOp's value, how its boxing
// combines the ranks' pieces: 0 for "sum" and "mean" (the mean's division
// is the kernel's), 1 "max", 2 "min", 3 "prod"; -1 for any other name.
int collective_reduce_code(const std::string& reduce);
extern const OpDef kMoeRouteOp, kMoeRouteGradOp, kMoeDispatchOp, kMoeCombineOp, kMoeGateGradOp;  // mixture of experts
extern const OpDef kMoeBalanceLossOp, kMoeBalanceLossGradOp, kMoeZLossOp, kMoeZLossGradOp;  // and its router's losses
// OP-DECLS

}  // namespace rill
