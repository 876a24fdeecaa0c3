// The host side of cast's CUDA kernel (cast.cu).
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/ops/cuda_launch.h"

namespace rill::cuda_ops {
namespace {

StatusOr<cuda_launch::FloatType> float_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return cuda_launch::FloatType::kF32;
    case DType::kBF16: return cuda_launch::FloatType::kBF16;
    case DType::kF16: return cuda_launch::FloatType::kF16;
    case DType::kI32: break;
  }
  return internal_error("op 'cast' on a GPU: {} is not a float dtype", dtype_name(dtype));
}

}  // namespace

RILL_CUDA_KERNEL(cast) {
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.outputs[0];
  RILL_ASSIGN_OR_RETURN(cuda_launch::FloatType from, float_type(x.dtype));
  RILL_ASSIGN_OR_RETURN(cuda_launch::FloatType to, float_type(y.dtype));
  return cuda_status(cuda_launch::cast(x.data, from, y.data, to, y.size(), static_cast<cudaStream_t>(ctx.cuda->stream())),
                     "kernel launch", "op 'cast'");
}

}  // namespace rill::cuda_ops
