// The host side of the mixture of experts' CUDA kernels (moe.cu): shapes
// and params from the KernelContext.
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/op_params.h"

namespace rill::cuda_ops {
namespace {

cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.cuda->stream()); }

}  // namespace

RILL_CUDA_KERNEL(moe_route) {
  const MoeParams& p = params_of<MoeParams>(ctx);
  const Shape& s = ctx.inputs[0].shape;
  return cuda_status(cuda_launch::moe_route(ctx.inputs[0].f32(), ctx.outputs[0].f32(), ctx.outputs[1].i32(),
                                            ctx.outputs[2].f32(), s[0], s[1], s[2], p.k, p.capacity, p.normalize,
                                            stream_of(ctx)),
                     "kernel launch", "op 'moe_route'");
}

RILL_CUDA_KERNEL(moe_route_grad) {
  const MoeParams& p = params_of<MoeParams>(ctx);
  const Shape& s = ctx.inputs[0].shape;
  return cuda_status(cuda_launch::moe_route_grad(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                                 s[0] * s[1], s[2], p.k, p.normalize, stream_of(ctx)),
                     "kernel launch", "op 'moe_route_grad'");
}

RILL_CUDA_KERNEL(moe_dispatch) {
  const Shape& x = ctx.inputs[0].shape;
  const Shape& out = ctx.outputs[0].shape;
  const float* weights = ctx.inputs.size() == 3 ? ctx.inputs[2].f32() : nullptr;
  return cuda_status(cuda_launch::moe_dispatch(ctx.inputs[0].f32(), ctx.inputs[1].i32(), weights,
                                               ctx.outputs[0].f32(), x[0], x[1], x[2],
                                               static_cast<int>(ctx.inputs[1].shape[2]), out[0], out[2],
                                               ctx.cuda->bad_label(), stream_of(ctx)),
                     "kernel launch", "op 'moe_dispatch'");
}

RILL_CUDA_KERNEL(moe_combine) {
  const Shape& y = ctx.inputs[0].shape;
  const Shape& out = ctx.outputs[0].shape;
  const float* gates = ctx.inputs.size() == 3 ? ctx.inputs[2].f32() : nullptr;
  return cuda_status(cuda_launch::moe_combine(ctx.inputs[0].f32(), ctx.inputs[1].i32(), gates, ctx.outputs[0].f32(),
                                              out[0], out[1], out[2], static_cast<int>(ctx.inputs[1].shape[2]), y[0],
                                              y[2], ctx.cuda->bad_label(), stream_of(ctx)),
                     "kernel launch", "op 'moe_combine'");
}

RILL_CUDA_KERNEL(moe_gate_grad) {
  const Shape& y = ctx.inputs[0].shape;
  const Shape& x = ctx.inputs[2].shape;
  return cuda_status(cuda_launch::moe_gate_grad(ctx.inputs[0].f32(), ctx.inputs[1].i32(), ctx.inputs[2].f32(),
                                                ctx.outputs[0].f32(), x[0], x[1], x[2],
                                                static_cast<int>(ctx.inputs[1].shape[2]), y[0], y[2],
                                                ctx.cuda->bad_label(), stream_of(ctx)),
                     "kernel launch", "op 'moe_gate_grad'");
}

#define RILL_MOE_LOSS(name, ...)                                                                          \
  RILL_CUDA_KERNEL(name) {                                                                                \
    const Shape& s = ctx.inputs[0].shape;                                                                 \
    return cuda_status(cuda_launch::name(__VA_ARGS__, s[0], s[1], s[2], stream_of(ctx)), "kernel launch", \
                       "op '" #name "'");                                                                 \
  }
RILL_MOE_LOSS(moe_balance_loss, ctx.inputs[0].f32(), ctx.outputs[0].f32())
RILL_MOE_LOSS(moe_balance_loss_grad, ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32())
RILL_MOE_LOSS(moe_z_loss, ctx.inputs[0].f32(), ctx.outputs[0].f32())
RILL_MOE_LOSS(moe_z_loss_grad, ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32())
#undef RILL_MOE_LOSS

}  // namespace rill::cuda_ops
