// The host side of dropout's CUDA kernel (dropout.cu): the piece's place in
// its logical tensor, the step's key and the rate, from the KernelContext.
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/ops/op_params.h"
#include "kernels/ops/dropout_math.h"

namespace rill::cuda_ops {

RILL_CUDA_KERNEL(dropout) {
  const TensorView& x = ctx.inputs[0];
  const auto stream = static_cast<cudaStream_t>(ctx.cuda->stream());
  const DropoutParams& p = params_of<DropoutParams>(ctx);
  const double rate = p.rate;
  if (rate == 0.0)
    return cuda_status(cudaMemcpyAsync(ctx.outputs[0].data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, stream),
                       "copy", "op 'dropout'");
  const Shape& logical = ctx.logical_inputs.empty() ? x.shape : ctx.logical_inputs[0];
  const int64_t* offset = ctx.input_offsets.empty() ? nullptr : ctx.input_offsets[0].data();
  cuda_launch::DropoutPlace place;
  place.rank = static_cast<int>(x.shape.size());
  if (place.rank > 8 || logical.size() != x.shape.size() || (offset && ctx.input_offsets[0].size() != x.shape.size()))
    return invalid_argument("op 'dropout': piece {} of logical {} (at most 8 axes, one rank)", shape_string(x.shape),
                            shape_string(logical));
  int64_t stride = 1;
  for (int a = place.rank - 1; a >= 0; --a) {
    const auto u = static_cast<size_t>(a);
    place.extent[a] = x.shape[u];
    place.offset[a] = offset ? offset[u] : 0;
    place.logical_stride[a] = stride;
    stride *= logical[u];
  }
  return cuda_status(
      cuda_launch::dropout(x.f32(), ctx.outputs[0].f32(), x.size(), place,
                           dropout_math::step_key(p.seed, ctx.step),
                           static_cast<uint64_t>(ctx.micro * num_elements(logical)), dropout_math::threshold(rate),
                           static_cast<float>(1.0 / (1.0 - rate)), stream),
      "kernel launch", "op 'dropout'");
}

}  // namespace rill::cuda_ops
