// The host side of bias_gelu_tanh's CUDA kernels (bias_gelu.cu).
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"

namespace rill::cuda_ops {
namespace {

cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.cuda->stream()); }

}  // namespace

RILL_CUDA_KERNEL(bias_gelu_tanh) {
  const int64_t n = ctx.inputs[1].size();
  if (n == 0) return {};
  return cuda_status(cuda_launch::bias_gelu_tanh(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.outputs[0].f32(),
                                                 ctx.inputs[0].size(), n, stream_of(ctx)),
                     "kernel launch", "op 'bias_gelu_tanh'");
}

RILL_CUDA_KERNEL(bias_gelu_tanh_grad) {
  const int64_t n = ctx.inputs[1].size();
  if (n == 0) return {};
  return cuda_status(cuda_launch::bias_gelu_tanh_grad(ctx.inputs[0].f32(), ctx.inputs[1].f32(), ctx.inputs[2].f32(),
                                                      ctx.outputs[0].f32(), ctx.inputs[0].size(), n, stream_of(ctx)),
                     "kernel launch", "op 'bias_gelu_tanh_grad'");
}

}  // namespace rill::cuda_ops
