// The host side of layer_norm's CUDA kernels (layer_norm.cu): the views and
// attrs of a KernelContext turned into launches on the device's stream.
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/ops/op_params.h"

namespace rill::cuda_ops {

RILL_CUDA_KERNEL(layer_norm) {
  const TensorView& x = ctx.inputs[0];
  const int64_t cols = x.shape.back();
  const float eps = params_of<LayerNormParams>(ctx).eps;
  return cuda_status(cuda_launch::layer_norm(x.f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(), ctx.outputs[0].f32(),
                                             ctx.outputs[1].f32(), ctx.outputs[2].f32(), x.size() / cols, cols, eps,
                                             static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'layer_norm'");
}

RILL_CUDA_KERNEL(layer_norm_grad) {
  const TensorView& x = ctx.inputs[1];
  const int64_t cols = x.shape.back();
  return cuda_status(cuda_launch::layer_norm_grad(ctx.inputs[0].f32(), x.f32(), ctx.inputs[2].f32(),
                                                  ctx.inputs[3].f32(), ctx.inputs[4].f32(), ctx.outputs[0].f32(),
                                                  ctx.outputs[1].f32(), ctx.outputs[2].f32(), x.size() / cols, cols,
                                                  static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'layer_norm_grad'");
}

}  // namespace rill::cuda_ops
