// The host side of attention's CUDA kernels (attention.cu, attention_ring.cu): the views and
// attrs of a KernelContext turned into launches on the device's stream. A
// ring's step over another piece of the sequence (ring attention,
// compiler/ring_expansion.h) is a block wholly before the queries (no
// mask) or wholly after (nothing seen), which needs no mask of its own.
// A sequence in the zigzag order (a balanced ring) is refused: its pieces
// are two chunks each, which these kernels do not cut.
#include <cmath>
#include <string_view>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/op_params.h"

namespace rill::cuda_ops {
namespace {

// What a causal mask asks of a block of queries and keys, by their places
// in the whole sequence: the kernel's own mask (the diagonal: queries and
// keys from one place, whole or a ring's own piece), no mask (every key at
// or before the first query: a ring's step over an earlier piece), or
// nothing to see (every key after the last query: a later piece).
enum class Mask { kCausal, kNone, kEmpty };

struct Block {
  AttentionShape n;
  Mask mask = Mask::kNone;
};

StatusOr<Block> block_of(const KernelContext& ctx, const TensorView& q, const TensorView& k, const char* op) {
  Block b{AttentionShape::of(q.shape, k.shape)};
  const AttentionShape& n = b.n;
  if (n.d > cuda_launch::kAttentionMaxHead)
    return invalid_argument("op '{}' on a GPU takes heads of at most {} values, got {}", op,
                            cuda_launch::kAttentionMaxHead, n.d);
  if (!params_of<AttentionParams>(ctx).causal) return b;
  if (params_of<AttentionParams>(ctx).zigzag > 1)
    return invalid_argument(
        "op '{}': a causal mask over a sequence in the zigzag order ({} parts) runs on CPUs only; the compiler "
        "keeps a GPU ring's sequence in its natural order",
        op, params_of<AttentionParams>(ctx).zigzag);
  const size_t axis = q.shape.size() - 2;
  const int64_t first_query = query_offset(ctx, axis), first_key = piece_offset(ctx, 1, axis);
  const bool split_keys = ctx.logical_inputs.size() > 1 && ctx.logical_inputs[1][axis] > n.s;
  if (n.t == n.s && first_query == first_key) {
    b.mask = Mask::kCausal;
  } else if (split_keys && first_key + n.s - 1 <= first_query) {
    b.mask = Mask::kNone;
  } else if (split_keys && first_key > first_query + n.t - 1) {
    b.mask = Mask::kEmpty;
  } else {
    return invalid_argument(
        "op '{}': a causal mask over queries {} at {} and keys {} at {} cuts across the block; on "
        "a GPU it runs on the diagonal, or on a ring's pieces of one length (CPUs take any)",
        op, shape_string(q.shape), first_query, shape_string(k.shape), first_key);
  }
  return b;
}

cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.cuda->stream()); }

// Outputs of a block whose queries see none of its keys: y (and the
// gradients) 0, lse -inf.
Status write_empty(const KernelContext& ctx, const char* op) {
  for (size_t o = 0; o < ctx.outputs.size(); ++o) {
    const TensorView& out = ctx.outputs[o];
    const bool lse = std::string_view(op) == "attention" && o == 1;
    RILL_RETURN_IF_ERROR(cuda_status(lse ? cuda_launch::fill(out.f32(), -INFINITY, out.size(), stream_of(ctx))
                                         : cudaMemsetAsync(out.data, 0, out.bytes(), stream_of(ctx)),
                                     "kernel launch",
                                     std::string_view(op) == "attention" ? "op 'attention'" : "op 'attention_grad'"));
  }
  return {};
}

}  // namespace

RILL_CUDA_KERNEL(attention) {
  RILL_ASSIGN_OR_RETURN(const Block b, block_of(ctx, ctx.inputs[0], ctx.inputs[1], "attention"));
  if (b.mask == Mask::kEmpty) return write_empty(ctx, "attention");
  const AttentionShape& n = b.n;
  const AttentionParams& p = params_of<AttentionParams>(ctx);
  return cuda_status(
      cuda_launch::attention(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(), ctx.outputs[0].f32(),
                             ctx.outputs[1].f32(), n.heads, n.t, n.s, static_cast<int>(n.d), p.scale_for(n.d),
                             b.mask == Mask::kCausal, stream_of(ctx)),
      "kernel launch", "op 'attention'");
}

RILL_CUDA_KERNEL(attention_grad) {
  RILL_ASSIGN_OR_RETURN(const Block b, block_of(ctx, ctx.inputs[0], ctx.inputs[1], "attention_grad"));
  if (b.mask == Mask::kEmpty) return write_empty(ctx, "attention_grad");
  const AttentionShape& n = b.n;
  const AttentionParams& p = params_of<AttentionParams>(ctx);
  return cuda_status(
      cuda_launch::attention_grad(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(), ctx.inputs[3].f32(),
                                  ctx.inputs[4].f32(), ctx.inputs[5].f32(), ctx.outputs[0].f32(), ctx.outputs[1].f32(),
                                  ctx.outputs[2].f32(), n.heads, n.t, n.s, static_cast<int>(n.d), p.scale_for(n.d),
                                  b.mask == Mask::kCausal, stream_of(ctx)),
      "kernel launch", "op 'attention_grad'");
}

// Ring attention's steps (attention_ring.cc): the step's attention into
// the outputs, then the steps' before added in, on the same stream.
RILL_CUDA_KERNEL(attention_step) {
  RILL_RETURN_IF_ERROR(rill_cuda_attention(ctx));
  const TensorView& y = ctx.outputs[0];
  return cuda_status(
      cuda_launch::attention_merge(ctx.inputs[3].f32(), ctx.inputs[4].f32(), y.f32(), ctx.outputs[1].f32(), y.f32(),
                                   ctx.outputs[1].f32(), ctx.outputs[1].size(), y.shape.back(), stream_of(ctx)),
      "kernel launch", "op 'attention_step'");
}

RILL_CUDA_KERNEL(attention_grad_step) {
  RILL_RETURN_IF_ERROR(rill_cuda_attention_grad(ctx));
  const TensorView& dq = ctx.outputs[0];
  return cuda_status(cuda_launch::binary(cuda_launch::Binary::kAdd, dq.f32(), ctx.inputs[6].f32(), 1, dq.f32(),
                                         dq.size(), stream_of(ctx)),
                     "kernel launch", "op 'attention_grad_step'");
}

}  // namespace rill::cuda_ops
