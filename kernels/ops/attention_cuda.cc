// The host side of attention's CUDA kernels (attention.cu, attention_ring.cu): the views and
// attrs of a KernelContext turned into launches on the device's stream.
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/op_params.h"

namespace rill::cuda_ops {
namespace {

StatusOr<AttentionShape> shape_of(const KernelContext& ctx, const TensorView& q, const TensorView& k, const char* op) {
  const AttentionShape n = AttentionShape::of(q.shape, k.shape);
  // A causal block on the diagonal (queries and keys from one place of the
  // sequence, whole or a ring's own piece) is the mask the kernel knows.
  const size_t axis = q.shape.size() - 2;
  if (params_of<AttentionParams>(ctx).causal && (n.t != n.s || query_offset(ctx, axis) != piece_offset(ctx, 1, axis)))
    return invalid_argument("op '{}': a causal mask over a piece of the queries or another place's keys (context "
                            "parallelism) runs on CPUs only so far; q {}, k {}",
                            op, shape_string(q.shape), shape_string(k.shape));
  if (n.d > cuda_launch::kAttentionMaxHead)
    return invalid_argument("op '{}' on a GPU takes heads of at most {} values, got {}", op,
                            cuda_launch::kAttentionMaxHead, n.d);
  return n;
}

}  // namespace

RILL_CUDA_KERNEL(attention) {
  RILL_ASSIGN_OR_RETURN(AttentionShape n, shape_of(ctx, ctx.inputs[0], ctx.inputs[1], "attention"));
  const AttentionParams& p = params_of<AttentionParams>(ctx);
  return cuda_status(cuda_launch::attention(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                                            ctx.outputs[0].f32(), ctx.outputs[1].f32(), n.heads, n.t, n.s, static_cast<int>(n.d),
                                            p.scale_for(n.d), p.causal, static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'attention'");
}

RILL_CUDA_KERNEL(attention_grad) {
  RILL_ASSIGN_OR_RETURN(AttentionShape n, shape_of(ctx, ctx.inputs[0], ctx.inputs[1], "attention_grad"));
  const AttentionParams& p = params_of<AttentionParams>(ctx);
  return cuda_status(cuda_launch::attention_grad(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                                                 ctx.inputs[3].f32(), ctx.inputs[4].f32(), ctx.inputs[5].f32(),
                                                 ctx.outputs[0].f32(), ctx.outputs[1].f32(), ctx.outputs[2].f32(),
                                                 n.heads, n.t, n.s, static_cast<int>(n.d), p.scale_for(n.d), p.causal,
                                                 static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'attention_grad'");
}

// Ring attention's steps (attention_ring.cc): the step's attention into
// the outputs, then the steps' before added in, on the same stream.
RILL_CUDA_KERNEL(attention_step) {
  RILL_RETURN_IF_ERROR(rill_cuda_attention(ctx));
  const TensorView& y = ctx.outputs[0];
  return cuda_status(cuda_launch::attention_merge(ctx.inputs[3].f32(), ctx.inputs[4].f32(), y.f32(),
                                                  ctx.outputs[1].f32(), y.f32(), ctx.outputs[1].f32(),
                                                  ctx.outputs[1].size(), y.shape.back(),
                                                  static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'attention_step'");
}

RILL_CUDA_KERNEL(attention_grad_step) {
  RILL_RETURN_IF_ERROR(rill_cuda_attention_grad(ctx));
  const TensorView& dq = ctx.outputs[0];
  return cuda_status(cuda_launch::binary(cuda_launch::Binary::kAdd, dq.f32(), ctx.inputs[6].f32(), 1, dq.f32(),
                                         dq.size(), static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'attention_grad_step'");
}

}  // namespace rill::cuda_ops
