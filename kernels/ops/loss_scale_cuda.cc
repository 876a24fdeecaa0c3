// The host side of the loss_scale ops' CUDA kernels (loss_scale.cu). A scale
// that falls below 1 raises the context's data flag with the step
// (CudaContext::bad_label), reported as loss_scale_fell when the step's
// work is seen complete.
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/ops/op_params.h"

namespace rill::cuda_ops {
namespace {

cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.cuda->stream()); }

}  // namespace

RILL_CUDA_KERNEL(loss_scale) {
  return cuda_status(cuda_launch::loss_scale_value(ctx.inputs[0].f32(), ctx.outputs[0].f32(),
                                                   params_of<LossScaleParams>(ctx).exponent, stream_of(ctx)),
                     "kernel launch", "op 'loss_scale'");
}

RILL_CUDA_KERNEL(loss_scale_check) {
  return cuda_status(cuda_launch::loss_scale_check(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                                   ctx.outputs[1].f32(), ctx.outputs[2].i32(), ctx.outputs[3].f32(),
                                                   params_of<LossScaleParams>(ctx).exponent, ctx.step,
                                                   stream_of(ctx)),
                     "kernel launch", "op 'loss_scale_check'");
}

RILL_CUDA_KERNEL(loss_scale_update) {
  const LossScaleParams& p = params_of<LossScaleParams>(ctx);
  return cuda_status(cuda_launch::loss_scale_update(ctx.inputs[0].f32(), ctx.inputs[1].f32(), p.exponent, p.window,
                                                    ctx.step, ctx.cuda->bad_label(), stream_of(ctx)),
                     "kernel launch", "op 'loss_scale_update'");
}

}  // namespace rill::cuda_ops
