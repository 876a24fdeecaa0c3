// The host side of the clipping ops' CUDA kernels (clip_ops.cu); add_n is a
// copy and then one elementwise add per further input.
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/ops/op_params.h"

namespace rill::cuda_ops {
namespace {

cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.cuda->stream()); }

}  // namespace

RILL_CUDA_KERNEL(sum_squares) {
  return cuda_status(cuda_launch::sum_squares(ctx.inputs[0].f32(), ctx.outputs[0].f32(), ctx.inputs[0].size(),
                                              ctx.cuda->reduction_partials(), CudaContext::kReductionBlocks,
                                              stream_of(ctx)),
                     "kernel launch", "op 'sum_squares'");
}

RILL_CUDA_KERNEL(add_n) {
  TensorView& y = ctx.outputs[0];
  RILL_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(y.data, ctx.inputs[0].data, y.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)),
      "cudaMemcpyAsync", "op 'add_n'"));
  for (size_t k = 1; k < ctx.inputs.size(); ++k)
    RILL_RETURN_IF_ERROR(cuda_status(cuda_launch::binary(cuda_launch::Binary::kAdd, y.f32(), ctx.inputs[k].f32(), 1,
                                                         y.f32(), y.size(), stream_of(ctx)),
                                     "kernel launch", "op 'add_n'"));
  return {};
}

RILL_CUDA_KERNEL(clip_factor) {
  return cuda_status(cuda_launch::clip_factor(ctx.inputs[0].f32(), ctx.outputs[0].f32(), ctx.outputs[1].f32(),
                                              params_of<ClipFactorParams>(ctx).max_norm, stream_of(ctx)),
                     "kernel launch", "op 'clip_factor'");
}

}  // namespace rill::cuda_ops
